"""A systolic-array speed model of a CNN training step that skips zeros.

Dense cycles of every GEMM come from SCALE-Sim v3
(:mod:`unstall.sparse.cnn.scalesim_adapter`): ``folds x (fill + streamed length + drain)``.
Zero skipping removes streamed steps of a fold on which no processing element has work
(:mod:`unstall.sparse.cnn.skipping`), measured on the real masks of recorded training steps; the
fill and drain of each fold stay. Three ways to run:

``dense``
    nothing skipped (the sparsity-agnostic array).
``input_only``
    input sparsity only: the zeros of the input activations (ReLU zeros), in the forward GEMM
    (operand ``A = im2col(X)``) and in the weight-gradient GEMM (operand ``B = im2col(X)``), as an
    accelerator that exploits activation sparsity does. The input-gradient GEMM runs dense.
``full``
    input and output sparsity: as above, plus the zeros of the output gradient (operand ``A = dY``
    of the input-gradient GEMM, operand ``A = dY^T`` of the weight-gradient GEMM) and the outputs
    of the input-gradient GEMM known in advance to be thrown away (positions where the layer's
    input, a ReLU output, was zero: the ReLU's backward would zero them).

Which output gradient counts as ``dY`` for a layer followed by BatchNorm and a ReLU is set by
``bn_gradient`` (see :mod:`unstall.sparse.cnn.recording`): ``folded`` (default) takes the
ReLU-masked gradient, ``exact`` autograd's dense one.

How many streamed steps skipping removes depends on the skipping model (``lockstep`` or
``per-row`` with a ``lookahead``, :data:`SKIPPING_MODELS`) and on the dataflow, which decides
which operand streams along the array's rows (the one whose zeros a row can skip on its own),
which streams down its columns (columns move together) and which stays in the PEs (a zero there
idles one PE for the whole fold and saves no time):

=========  ======================  ======================  ===================
dataflow   along rows              down columns            stationary
=========  ======================  ======================  ===================
``os``     A (forward: im2col X;   B (forward: W;          outputs (dX: which
           dX: dY; dW: dY^T)       dX: W^T; dW: im2col X)  are needed)
``ws``     A^T (the same as os)    needed outputs^T        B
``is``     B (forward: W;          needed outputs          A (im2col X, dY,
           dX: W^T; dW: im2col X)                          dY^T)
=========  ======================  ======================  ===================

Speed-ups are cycle ratios: forward, input gradient, weight gradient; back-propagation (input +
weight gradient) over dense and over ``input_only``; and the whole step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from unstall.config import check
from unstall.results import JsonResult
from unstall.sparse.cnn.gemms import GemmShape, im2col_mask, output_rows_mask
from unstall.sparse.cnn.recording import LayerTensors
from unstall.sparse.cnn.scalesim_adapter import ArrayConfig, fold_cycles, fold_plan
from unstall.sparse.cnn.skipping import GemmMasks, busy_steps, effectual_macs

Mode = Literal["dense", "input_only", "full"]
MODES: tuple[Mode, ...] = ("dense", "input_only", "full")
GemmName = Literal["forward", "input_grad", "weight_grad"]
GEMMS: tuple[GemmName, ...] = ("forward", "input_grad", "weight_grad")
BnGradient = Literal["folded", "exact"]


SkippingModel = Literal["lockstep", "per-row"]
# The skipping models (see unstall.sparse.cnn.skipping), by name.
SKIPPING_MODELS: dict[str, str] = {
    "lockstep": "a streamed step of a fold is skipped only when every PE of the fold idles on it",
    "per-row": "each array row skips its own zero steps; rows meet every `lookahead` steps",
}


@dataclass(frozen=True, kw_only=True)
class AcceleratorConfig:
    """The array and what it may skip.

    ``skipping``: a model of :data:`SKIPPING_MODELS`. For ``per-row``: ``lookahead``, the steps
    of the buffer for the operand the rows share (None: unbounded, the fold lasts as long as its
    densest row); ``row_group``, rows that share one queue and skip together (1: every row).
    """

    array: ArrayConfig = field(default_factory=ArrayConfig)
    skipping: SkippingModel = "lockstep"
    lookahead: int | None = None
    row_group: int = 1
    bn_gradient: BnGradient = "folded"

    def __post_init__(self) -> None:
        rows, group = self.array.rows, self.row_group
        names = tuple(SKIPPING_MODELS)
        check(self.skipping in SKIPPING_MODELS, self, "skipping", f"must be one of {names}")
        ok = isinstance(group, int) and 1 <= group <= rows and rows % group == 0
        check(ok, self, "row_group", f"must divide the array's {rows} rows, got {group}")
        ok = self.lookahead is None or (isinstance(self.lookahead, int) and self.lookahead >= 1)
        check(ok, self, "lookahead", f"must be an int >= 1 or None, got {self.lookahead}")
        plain = self.lookahead is None and group == 1
        check(
            self.skipping == "per-row" or plain,
            self,
            "skipping",
            "lookahead and row_group apply to the per-row model only",
        )
        check(self.bn_gradient in ("folded", "exact"), self, "bn_gradient", "folded or exact")

    @property
    def group_rows(self) -> int:
        """Array rows that skip together."""
        return self.array.rows if self.skipping == "lockstep" else self.row_group

    @property
    def skipping_label(self) -> str:
        """``"lockstep"``, ``"per-row depth 16"``, ``"per-row unbounded, groups of 4"``."""
        if self.skipping == "lockstep":
            return "lockstep"
        depth = "unbounded" if self.lookahead is None else f"depth {self.lookahead}"
        groups = f", groups of {self.row_group}" if self.row_group > 1 else ""
        return f"per-row {depth}{groups}"

    @property
    def label(self) -> str:
        """``"32x32 os, per-row depth 16, bn=folded"``."""
        return f"{self.array.label}, {self.skipping_label}, bn={self.bn_gradient}"


@dataclass(frozen=True, kw_only=True)
class GemmCycles(JsonResult):
    """Cycles of one GEMM per recorded step in each mode; ``tile_density``: the share of the
    streamed steps that still do work in ``full`` mode (1 = nothing skippable); ``macs_*``:
    the multiply-accumulates left at element granularity (see :func:`effectual_macs`)."""

    dense: float
    input_only: float
    full: float
    tile_density: float
    macs_dense: float
    macs_input_only: float
    macs_full: float


@dataclass(frozen=True, kw_only=True)
class LayerSpeed(JsonResult):
    """One layer's cycles and speed-ups (``full`` over ``dense`` unless named otherwise)."""

    name: str
    forward: GemmCycles
    input_grad: GemmCycles | None
    weight_grad: GemmCycles
    forward_speedup: float
    input_grad_speedup: float | None
    weight_grad_speedup: float
    backprop_speedup_vs_dense: float
    speedup_vs_input_only: float


@dataclass(frozen=True, kw_only=True)
class ModelSpeed(JsonResult):
    """Whole-model cycles per step (sums over layers) and speed-ups."""

    cycles: dict[str, dict[str, float]]  # gemm -> mode -> cycles
    forward_speedup: float
    input_grad_speedup: float
    weight_grad_speedup: float
    backprop_speedup_vs_dense: float  # (input grad + weight grad), full over dense
    speedup_vs_input_only: float  # back-propagation, full over input_only
    input_only_backprop_speedup: float  # back-propagation, input_only over dense
    step_speedup_vs_dense: float  # forward + back-propagation
    step_speedup_vs_input_only: float
    # The same two back-propagation ratios in effectual multiply-accumulates: an ideal machine
    # that skips every zero at element granularity (the bound no array reaches).
    ideal_backprop_speedup_vs_dense: float
    ideal_speedup_vs_input_only: float


class CycleCounter:
    """Accumulates the busy steps of every layer's GEMMs over the recorded training steps."""

    def __init__(self, config: AcceleratorConfig) -> None:
        self.config = config
        self.busy: dict[tuple[str, GemmName, Mode], int] = {}
        self.macs: dict[tuple[str, GemmName, Mode], int] = {}
        self.steps: dict[str, int] = {}
        self.shapes: dict[str, dict[GemmName, GemmShape | None]] = {}

    def observe(self, t: LayerTensors) -> None:
        """Count one recorded step of one layer (an ``on_layer`` callback of the analyser)."""
        shapes: dict[GemmName, GemmShape | None] = {
            "forward": t.gemms.forward,
            "input_grad": t.gemms.input_grad,
            "weight_grad": t.gemms.weight_grad,
        }
        self.shapes[t.name] = shapes
        self.steps[t.name] = self.steps.get(t.name, 0) + 1
        for (gemm, mode), masks in _layer_masks(t, self.config.bn_gradient).items():
            shape = shapes[gemm]
            assert shape is not None
            busy = busy_steps(
                masks,
                shape.m,
                shape.n,
                shape.k,
                shape.groups,
                self.config.array,
                self.config.group_rows,
                self.config.lookahead,
            )
            macs = effectual_macs(masks, shape.m, shape.n, shape.k, shape.groups)
            key = (t.name, gemm, mode)
            self.busy[key] = self.busy.get(key, 0) + busy
            self.macs[key] = self.macs.get(key, 0) + macs

    def layer_speed(self, name: str) -> LayerSpeed:
        """Cycles and speed-ups of layer ``name`` per step, averaged over what was observed."""
        cycles = {
            gemm: self._gemm_cycles(name, gemm, shape)
            for gemm, shape in self.shapes[name].items()
            if shape is not None
        }
        return _layer_speed(name, cycles)

    def _gemm_cycles(self, name: str, gemm: GemmName, shape: GemmShape) -> GemmCycles:
        array = self.config.array
        plan = fold_plan(shape.m, shape.n, shape.k, array)
        per_fold = fold_cycles(shape.m, shape.n, shape.k, array)  # SCALE-Sim
        overhead = per_fold - plan.stream
        steps = self.steps[name]
        all_busy = shape.groups * plan.folds * plan.stream
        fixed = shape.groups * (plan.folds * overhead - 1)

        def cycles(mode: Mode) -> float:
            busy = self.busy.get((name, gemm, mode), steps * all_busy) / steps
            return fixed + busy

        def macs(mode: Mode) -> float:
            return self.macs.get((name, gemm, mode), steps * shape.macs) / steps

        full_busy = self.busy.get((name, gemm, "full"), steps * all_busy) / steps
        return GemmCycles(
            dense=cycles("dense"),
            input_only=cycles("input_only"),
            full=cycles("full"),
            tile_density=full_busy / all_busy,
            macs_dense=macs("dense"),
            macs_input_only=macs("input_only"),
            macs_full=macs("full"),
        )


def _layer_masks(
    t: LayerTensors, bn_gradient: BnGradient
) -> dict[tuple[GemmName, Mode], GemmMasks]:
    """The operand masks each GEMM may skip in each sparse mode (dense needs none: every
    streamed step of every fold is busy)."""
    geom = t.geometry
    x_cols = im2col_mask(t.x_nz, geom)  # (g, P, window): forward A, weight-gradient B
    dy_rows = output_rows_mask(t.grad_nz(bn_gradient), geom)  # (g, P, Cout/g)
    masks: dict[tuple[GemmName, Mode], GemmMasks] = {
        ("forward", "input_only"): GemmMasks(a=x_cols),
        ("forward", "full"): GemmMasks(a=x_cols),
        ("weight_grad", "input_only"): GemmMasks(b=x_cols),
        ("weight_grad", "full"): GemmMasks(a=dy_rows.transpose(1, 2), b=x_cols),
    }
    if t.gemms.input_grad is not None:
        need = None if t.x_alive is None else im2col_mask(t.x_alive, geom)
        masks["input_grad", "full"] = GemmMasks(a=dy_rows, need=need)
    return masks


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else float("nan")


def _layer_speed(name: str, c: dict[GemmName, GemmCycles]) -> LayerSpeed:
    igrad = c.get("input_grad")
    bp = {
        mode: sum(getattr(c[g], mode) for g in ("input_grad", "weight_grad") if g in c)
        for mode in MODES
    }
    return LayerSpeed(
        name=name,
        forward=c["forward"],
        input_grad=igrad,
        weight_grad=c["weight_grad"],
        forward_speedup=_ratio(c["forward"].dense, c["forward"].full),
        input_grad_speedup=None if igrad is None else _ratio(igrad.dense, igrad.full),
        weight_grad_speedup=_ratio(c["weight_grad"].dense, c["weight_grad"].full),
        backprop_speedup_vs_dense=_ratio(bp["dense"], bp["full"]),
        speedup_vs_input_only=_ratio(bp["input_only"], bp["full"]),
    )


def model_speed(layers: list[LayerSpeed]) -> ModelSpeed:
    """Sum the layers' cycles and form the model's speed-ups."""
    totals: dict[str, dict[str, float]] = {g: dict.fromkeys(MODES, 0.0) for g in GEMMS}
    macs: dict[str, dict[str, float]] = {g: dict.fromkeys(MODES, 0.0) for g in GEMMS}
    for layer in layers:
        for gemm in GEMMS:
            cycles = getattr(layer, gemm)
            if cycles is not None:
                for mode in MODES:
                    totals[gemm][mode] += getattr(cycles, mode)
                    macs[gemm][mode] += getattr(cycles, f"macs_{mode}")
    bp = {m: totals["input_grad"][m] + totals["weight_grad"][m] for m in MODES}
    bp_macs = {m: macs["input_grad"][m] + macs["weight_grad"][m] for m in MODES}
    step = {m: bp[m] + totals["forward"][m] for m in MODES}

    def gain(gemm: GemmName) -> float:
        return _ratio(totals[gemm]["dense"], totals[gemm]["full"])

    return ModelSpeed(
        cycles=totals,
        forward_speedup=gain("forward"),
        input_grad_speedup=gain("input_grad"),
        weight_grad_speedup=gain("weight_grad"),
        backprop_speedup_vs_dense=_ratio(bp["dense"], bp["full"]),
        speedup_vs_input_only=_ratio(bp["input_only"], bp["full"]),
        input_only_backprop_speedup=_ratio(bp["dense"], bp["input_only"]),
        step_speedup_vs_dense=_ratio(step["dense"], step["full"]),
        step_speedup_vs_input_only=_ratio(step["input_only"], step["full"]),
        ideal_backprop_speedup_vs_dense=_ratio(bp_macs["dense"], bp_macs["full"]),
        ideal_speedup_vs_input_only=_ratio(bp_macs["input_only"], bp_macs["full"]),
    )
