"""Densities of each layer over the recorded steps, from the masks the hooks recorded.

A :class:`SparsityCounter` per layer sums non-zero counts step by step (the masks themselves are
let go after each step: a big model's are hundreds of MB) and gives a :class:`LayerSparsity`:
input-activation density, output-gradient density (raw and at the ReLU input), the share of the
gradient's zeros the forward mask predicts, dead inputs, and the share of im2col padding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from unstall.results import JsonResult
from unstall.sparse.cnn.gemms import LayerGemms, LayerKind, im2col_mask
from unstall.sparse.cnn.recording import LayerTensors


@dataclass(frozen=True, kw_only=True)
class LayerSparsity(JsonResult):
    """Densities of one layer, averaged over the recorded steps (None: not applicable)."""

    index: int
    name: str
    kind: LayerKind
    activation: str  # path from the output to its activation, e.g. "bn+relu"; "none"
    input_density: float
    grad_density: float  # dL/dY as autograd gives it
    relu_grad_density: float | None  # dL/dZ at the activation's input
    mask_zero_fraction: float | None  # share of outputs whose gradient the forward mask zeroes
    known_zero_share: float | None  # share of dL/dZ's zeros that the forward mask predicts
    input_dead_fraction: float | None  # share of inputs whose gradient is known to be unused
    padding_share: float = 0.0  # share of the im2col operand (forward A) that is zero padding
    gemms: LayerGemms


class SparsityCounter:
    """Non-zero counts of one layer over recorded steps, turned into a :class:`LayerSparsity`."""

    def __init__(self) -> None:
        self.sums: dict[str, list[float]] = {}
        # what the result names, not the masks (they are large: one step's are let go)
        self.about: tuple[str, LayerKind, str, LayerGemms] | None = None

    def _add(self, key: str, part: torch.Tensor, whole: torch.Tensor | None = None) -> None:
        total = float(whole.sum().item()) if whole is not None else float(part.numel())
        acc = self.sums.setdefault(key, [0.0, 0.0])
        acc[0] += float(part.sum().item())
        acc[1] += total

    def _ratio(self, key: str) -> float | None:
        acc = self.sums.get(key)
        return acc[0] / acc[1] if acc is not None and acc[1] > 0 else None

    def observe(self, t: LayerTensors) -> None:
        assert t.dy_nz is not None, "backward pass not recorded"
        self.about = (t.name, t.geometry.kind, t.activation, t.gemms)
        self._add("input", t.x_nz)
        if "padding" not in self.sums:  # geometry only: the same every step
            self._add("padding", ~im2col_mask(torch.ones_like(t.x_nz[:1]), t.geometry))
        self._add("grad", t.dy_nz)
        if t.x_alive is not None:
            self._add("input_dead", ~t.x_alive)
        if t.dz_nz is not None and t.known_dead is not None:
            self._add("relu_grad", t.dz_nz)
            self._add("mask_zero", t.known_dead)
            self._add("known_share", t.known_dead & ~t.dz_nz, ~t.dz_nz)

    def result(self, index: int) -> LayerSparsity:
        assert self.about is not None, "no step observed"
        name, kind, activation, gemms = self.about
        return LayerSparsity(
            index=index,
            name=name,
            kind=kind,
            activation=activation,
            input_density=self._ratio("input") or 0.0,
            grad_density=self._ratio("grad") or 0.0,
            relu_grad_density=self._ratio("relu_grad"),
            mask_zero_fraction=self._ratio("mask_zero"),
            known_zero_share=self._ratio("known_share"),
            input_dead_fraction=self._ratio("input_dead"),
            padding_share=self._ratio("padding") or 0.0,
            gemms=gemms,
        )


def summarize(records: Sequence[LayerTensors]) -> list[LayerSparsity]:
    """Per-layer densities of the records of one or more steps, in first-seen order."""
    counters: dict[str, SparsityCounter] = {}
    for record in records:
        counters.setdefault(record.name, SparsityCounter()).observe(record)
    return [c.result(i) for i, c in enumerate(counters.values())]
