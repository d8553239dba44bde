"""Dropout masks of the three modes, sampled ahead of a sequence.

Masks do not depend on the data, so a whole sequence's masks are drawn before the first step. That
lets a caller inject them (tests replay the same masks through a dense reference) or read back the
ones a forward pass used, and lets the structured kernels know every kept-unit set in advance.

- ``standard``: elementwise, a fresh Bernoulli draw for every (step, sample, unit), as nn.Dropout.
- ``locked``: variational (Gal & Ghahramani, AWD-LSTM): one draw per (sample, unit), reused at
  every step.
- ``structured``: one draw per (step, unit), shared by the whole batch, fresh at every step. The
  dropped units are whole columns of the activations, so the matrix products can leave them out.
- ``structured-window``: structured, with each step's kept set a random window of a random
  permutation drawn once per sequence (see :class:`WindowMask`): the same per-step and per-unit
  statistics, and the kept weight rows are contiguous, so nothing is gathered per step.

In the structured modes a set can be held for ``steps_per_set`` consecutive steps (1: fresh every
step). A connection that does not depend on the recurrence (a layer's input, the decoder) then
multiplies ``steps_per_set`` steps of kept columns at once: one large product on the kept units
instead of one small product and one weight gather per step. The elementwise modes ignore it.

Dense masks hold the already-scaled values (0 or 1/(1-p)); structured masks hold the sorted indices
of the kept units per step and the scale.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeAlias

import torch
from torch import Tensor

from unstall.config import check

DropoutMode: TypeAlias = Literal["standard", "locked", "structured", "structured-window"]


@dataclass(frozen=True)
class DenseMask:
    """Elementwise mask, already scaled: (T, B, N), one per step, or (1, B, N) for every step."""

    values: Tensor

    def at(self, step: int) -> Tensor:
        """The (B, N) mask of one step."""
        return self.values[step if self.values.shape[0] > 1 else 0]

    def dense(self, steps: int, batch: int) -> Tensor:
        """The (T, B, N) mask as a tensor, for the dense reference."""
        return self.values.expand(steps, batch, self.values.shape[2])


@dataclass(frozen=True)
class StructuredMask:
    """Sorted indices of the kept units (shared by the batch), one set per ``steps_per_set``
    consecutive steps (1: a fresh set every step); the 1/(1-p) scale."""

    keep: tuple[Tensor, ...]
    size: int
    scale: float
    steps_per_set: int = 1

    def __post_init__(self) -> None:
        check(self.steps_per_set >= 1, self, "steps_per_set", "must be >= 1")

    def at(self, step: int) -> Tensor:
        """The kept units of ``step``."""
        return self.keep[step // self.steps_per_set]

    def blocks(self, steps: int) -> list[tuple[slice, Tensor]]:
        """(steps, kept units) of each run of consecutive steps that shares one kept set."""
        self._check_steps(steps)
        k = self.steps_per_set
        return [(slice(s, min(s + k, steps)), self.keep[s // k]) for s in range(0, steps, k)]

    def _check_steps(self, steps: int) -> None:
        need = -(-steps // self.steps_per_set)
        check(len(self.keep) == need, self, "keep", f"has {len(self.keep)} sets, need {need}")

    def dense(self, steps: int, batch: int) -> Tensor:
        """The equivalent (T, B, N) elementwise mask, for the dense reference."""
        self._check_steps(steps)
        out = torch.zeros(steps, self.size, dtype=torch.float64)
        for t in range(steps):
            out[t, self.at(t).cpu()] = self.scale
        return out.unsqueeze(1).expand(steps, batch, self.size)

    def to(self, device: torch.device) -> StructuredMask:
        """The same mask with its index tensors on ``device``, moved in one copy (each copy from
        the CPU waits for the GPU's queue, so one per set would stall the host once per step)."""
        if not self.keep or all(k.device == device for k in self.keep):
            return self
        sizes = [int(k.numel()) for k in self.keep]
        moved = torch.cat(self.keep).to(device).split(sizes)
        return StructuredMask(
            keep=tuple(moved),
            size=self.size,
            scale=self.scale,
            steps_per_set=self.steps_per_set,
        )


@dataclass(frozen=True)
class WindowMask:
    """Structured, with the kept set of step t a window of a per-sequence random permutation.

    ``keep(t) = perm[o_t], perm[o_t + 1], ..., perm[o_t + kept - 1]`` (indices modulo N). For one
    step this is a uniformly random set of ``kept`` units, and each unit is kept at each step
    independently with probability kept/N, as with :class:`StructuredMask`; what differs is that
    units next to each other in ``perm`` tend to be dropped together within the sequence. The
    payoff: with W^T laid out in ``perm`` order once per sequence, every step's kept rows are one
    contiguous slice, so no per-step gather or scatter of the weights is needed.
    """

    perm: Tensor
    offsets: tuple[int, ...]
    kept: int
    scale: float

    @property
    def size(self) -> int:
        return int(self.perm.numel())

    def keep(self, step: int) -> Tensor:
        """Indices of the units kept at ``step`` (in window order, not sorted)."""
        start = self.offsets[step]
        return torch.cat([self.perm, self.perm])[start : start + self.kept]

    def dense(self, steps: int, batch: int) -> Tensor:
        """The equivalent (T, B, N) elementwise mask, for the dense reference."""
        out = torch.zeros(steps, self.size, dtype=torch.float64)
        for t in range(steps):
            out[t, self.keep(t).cpu()] = self.scale
        return out.unsqueeze(1).expand(steps, batch, self.size)

    def to(self, device: torch.device) -> WindowMask:
        """The same mask with its permutation on ``device``."""
        return WindowMask(
            perm=self.perm.to(device), offsets=self.offsets, kept=self.kept, scale=self.scale
        )


Mask: TypeAlias = DenseMask | StructuredMask | WindowMask | None


@dataclass(frozen=True)
class LayerMasks:
    """One layer's masks for a sequence: on its input x_t, and on h_{t-1} as it enters the gates."""

    input: Mask
    recurrent: Mask


@dataclass(frozen=True)
class MaskShape:
    """What a sampler draws for: ``steps`` x ``batch`` x ``size`` units, a set held for
    ``steps_per_set`` steps (structured modes only)."""

    steps: int
    batch: int
    size: int
    steps_per_set: int = 1

    @property
    def sets(self) -> int:
        return -(-self.steps // self.steps_per_set)


MaskSampler: TypeAlias = Callable[
    [MaskShape, float, torch.Generator], DenseMask | StructuredMask | WindowMask
]


def _standard(shape: MaskShape, p: float, gen: torch.Generator) -> DenseMask:
    kept = torch.rand(shape.steps, shape.batch, shape.size, generator=gen, device=gen.device) >= p
    return DenseMask(kept.to(torch.get_default_dtype()) / (1.0 - p))


def _locked(shape: MaskShape, p: float, gen: torch.Generator) -> DenseMask:
    kept = torch.rand(1, shape.batch, shape.size, generator=gen, device=gen.device) >= p
    return DenseMask(kept.to(torch.get_default_dtype()) / (1.0 - p))


def _structured(shape: MaskShape, p: float, gen: torch.Generator) -> StructuredMask:
    kept = torch.rand(shape.sets, shape.size, generator=gen, device=gen.device) >= p
    keep = tuple(row.nonzero().squeeze(1) for row in kept)
    return StructuredMask(
        keep=keep, size=shape.size, scale=1.0 / (1.0 - p), steps_per_set=shape.steps_per_set
    )


def _window(shape: MaskShape, p: float, gen: torch.Generator) -> WindowMask:
    size = shape.size
    kept = max(1, round((1.0 - p) * size))  # the drop rate is 1 - kept/size, p rounded to units
    perm = torch.randperm(size, generator=gen, device=gen.device)
    drawn = torch.randint(size, (shape.sets,), generator=gen, device=gen.device).tolist()
    offsets = tuple(int(drawn[t // shape.steps_per_set]) for t in range(shape.steps))
    return WindowMask(perm=perm, offsets=offsets, kept=kept, scale=size / kept)


MASK_SAMPLERS: dict[str, MaskSampler] = {
    "standard": _standard,
    "locked": _locked,
    "structured": _structured,
    "structured-window": _window,
}
# The dropout modes, in the order the tables list them.
DROPOUT_MODES: tuple[str, ...] = tuple(MASK_SAMPLERS)


# Where the elementwise masks (standard, locked) are drawn when the model is on a GPU:
# - "cpu": from the run's CPU generator, then copied over, so a run draws the same masks on any
#   device (a GPU run matches a CPU one up to the kernels' rounding);
# - "device" (the default): on the model's device, from a generator there that is seeded from
#   the CPU generator once per draw, so the CPU generator stays the run's one source of
#   randomness (its state is what a checkpoint keeps) and a run is still reproducible on one kind
#   of device. This is what nn.Dropout does on a GPU, and the fair baseline there: a (steps,
#   batch, units) mask drawn on the CPU takes longer than the GPU's whole training step
#   (BENCHMARKS.md, structured dropout on a GPU).
# On a CPU the two are the same draws. The structured modes always draw on the CPU: a kept set's
# size is a shape the host must know, and the sets are small.
MASK_SOURCES: tuple[str, ...] = ("cpu", "device")
DENSE_MODES: tuple[str, ...] = ("standard", "locked")


def check_mask_source(owner: object, field: str, source: str) -> None:
    check(source in MASK_SOURCES, owner, field, f"must be one of {MASK_SOURCES}, got {source!r}")


class MaskGenerators:
    """The generator a module draws each sequence's masks from, by its mask source.

    ``for_draw(cpu, mode, device)`` is ``cpu`` itself unless the source is ``device``, the mode
    elementwise and ``device`` not the CPU; then it is a generator on ``device`` (one kept per
    device), seeded from one draw of ``cpu``.
    """

    def __init__(self, source: str) -> None:
        check_mask_source(type(self).__name__, "source", source)
        self.source = source
        self._on_device: dict[torch.device, torch.Generator] = {}

    def for_draw(
        self, cpu: torch.Generator, mode: str, device: torch.device | None
    ) -> torch.Generator:
        if self.source == "cpu" or device is None or device.type == "cpu":
            return cpu
        if mode not in DENSE_MODES:
            return cpu
        seed = int(torch.randint(1 << 62, (1,), generator=cpu, device=cpu.device))
        gen = self._on_device.get(device)
        if gen is None:
            gen = self._on_device[device] = torch.Generator(device=device)
        return gen.manual_seed(seed)


def check_dropout(owner: object, field: str, p: float) -> None:
    """A dropout probability must lie in [0, 1): at 1 nothing is kept and the scale is infinite."""
    check(0.0 <= p < 1.0, owner, field, f"must be in [0, 1), got {p!r}")


def check_device(owner: object, field: str, name: str) -> None:
    """``name`` must be a device torch can run on here: ``cpu``, or ``cuda``/``cuda:N`` with
    that GPU present (caught when the run is configured, not after the data is loaded)."""
    try:
        device = torch.device(name)
    except RuntimeError:
        check(False, owner, field, f"{name!r} is not a device; use cpu or cuda[:N]")
    supported = device.type in ("cpu", "cuda")
    check(supported, owner, field, f"{name!r}: only cpu and cuda are supported")
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        check(count > 0, owner, field, f"{name!r}: torch sees no CUDA device on this machine")
        index = device.index or 0
        check(index < count, owner, field, f"{name!r}: torch sees {count} CUDA device(s)")


def check_mode(owner: object, field: str, mode: str) -> None:
    """``mode`` must name a sampler in :data:`MASK_SAMPLERS`."""
    check(
        mode in MASK_SAMPLERS, owner, field, f"unknown mode {mode!r}; known: {list(MASK_SAMPLERS)}"
    )


def sample_mask(
    mode: str,
    steps: int,
    batch: int,
    size: int,
    p: float,
    generator: torch.Generator,
    steps_per_set: int = 1,
) -> Mask:
    """Draw the mask of one connection for ``steps`` steps; ``None`` when nothing is dropped.

    In the structured modes one kept set serves ``steps_per_set`` consecutive steps.
    """
    check_mode("sample_mask", "mode", mode)
    check_dropout("sample_mask", "p", p)
    check(steps_per_set >= 1, "sample_mask", "steps_per_set", f"must be >= 1, got {steps_per_set}")
    if p == 0.0:
        return None
    return MASK_SAMPLERS[mode](MaskShape(steps, batch, size, steps_per_set), p, generator)


def mask_to(mask: Mask, device: torch.device, dtype: torch.dtype) -> Mask:
    """Move a mask to the device (and, for dense masks, the dtype) of the tensors it multiplies."""
    if isinstance(mask, DenseMask):
        return DenseMask(mask.values.to(device=device, dtype=dtype))
    if isinstance(mask, StructuredMask | WindowMask):
        return mask.to(device)
    return None
