"""The structured kernels as two single-threaded streams (see :mod:`unstall.sparse.lstm.streams`).

An LSTM layer: stream A runs the recurrence, stream B the input connection, which does not
depend on it. Forward, B computes the input products step by step ahead of A, which waits for
step t's before adding the recurrent product and running the cell. Backward, A runs
backpropagation through time (the recurrent products and their weight gradient, the cell) and
reports each step's gate gradients; B turns them into the input gradient and the input weight
gradient, step by step in reverse, right behind A. Each stream does about half the products.

The decoder (:class:`SplitDecoder`): a structured product onto a vocabulary-wide output in the
column tiles of :class:`~unstall.sparse.lstm.projections.TiledCompactProjection`, each stream
owning half of the tiles and running every step on them, so each core's gathers read its own
tiles from its cache; the outputs and weight-gradient rows of the two halves are disjoint, and
the input gradient is the sum of the two halves' parts, added once at the end.

Each stream runs the same operations in the same order as the serial one-thread kernels: the
outputs, the state and the gradients of the input, the initial state, the recurrent weights and
the bias equal theirs to the bit; only the input weight gradient adds up its blocks in reverse
order (B follows A backwards), so it equals the serial one within float rounding. Nothing depends
on timing: the results are the same from run to run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

import torch
from torch import Tensor

from unstall.sparse.lstm import projections
from unstall.sparse.lstm.cell import recurrence_backward, recurrence_forward
from unstall.sparse.lstm.masks import LayerMasks, StructuredMask
from unstall.sparse.lstm.projections import (
    CompactProjection,
    Projection,
    TiledCompactProjection,
    make_projection,
    structured_projection,
)
from unstall.sparse.lstm.streams import Progress, in_two_streams

StructuredProjection = CompactProjection | TiledCompactProjection
A = TypeVar("A")
B = TypeVar("B")


def layer_forward(
    x: Tensor,
    h0: Tensor,
    weights: tuple[Tensor, Tensor],
    masks: LayerMasks,
    state: tuple[Tensor, Tensor, Tensor, Tensor],
) -> tuple[StructuredProjection, Projection]:
    """Fill ``state`` = (acts, cs, tanh_c, out) as the serial loop does; returns (input,
    recurrent) projections. ``acts`` holds the bias; ``masks.input`` must be structured."""
    w_ih, w_hh = weights
    acts, cs, tanh_c, out = state
    assert isinstance(masks.input, StructuredMask)
    input_mask, steps = masks.input, x.shape[0]
    progress = Progress(0)  # steps whose input products are in acts

    def input_connection() -> StructuredProjection:
        inp = structured_projection(w_ih, input_mask)
        inp.project_all(x, acts, done=progress.set)
        return inp

    def recurrence() -> Projection:
        rec = make_projection(w_hh, masks.recurrent, steps)
        recurrence_forward(rec, acts, cs, tanh_c, out, h0, wait=_after(progress))
        return rec

    rec, inp = in_two_streams(recurrence, input_connection, progress)
    return inp, rec


def _after(progress: Progress) -> Callable[[int], None]:
    """Wait until step t's input products are done."""
    return lambda t: progress.wait_until(lambda done: done > t)


def _at_or_before(start: int) -> Callable[[int], bool]:
    """Whether the gate gradients are final down to step ``start``."""
    return lambda first: first <= start


def layer_backward(
    projections: tuple[StructuredProjection, Projection],
    saved: tuple[Tensor, Tensor, Tensor],
    grads: tuple[Tensor, Tensor, Tensor],
    need: tuple[bool, ...],
) -> tuple[Tensor | None, ...]:
    """The gradients of (x, h0, c0, w_ih, w_hh, bias) as ``LSTMLayerFn.backward`` returns them;
    ``saved`` is (acts, cs, tanh_c), ``grads`` (d_out, d_hT, d_cT), ``need`` the Function's
    ``needs_input_grad``."""
    inp, rec = projections
    acts = saved[0]
    steps = acts.shape[0]
    d_gates = torch.empty_like(acts)
    progress = Progress(steps)  # the first step whose gate gradients are final

    def input_gradients() -> tuple[Tensor | None, Tensor | None]:
        dxs = []
        for block, _ in reversed(inp.mask.blocks(steps)):
            progress.wait_until(_at_or_before(block.start))
            dxs.append(inp.backward_block(block, d_gates, need_input=need[0]))
        dx = torch.cat([d for d in reversed(dxs) if d is not None]) if need[0] else None
        return dx, inp.grad_weight(d_gates) if need[3] else None

    def through_time() -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        dh, dc = recurrence_backward(rec, saved, grads, d_gates, done=progress.set)
        dw_hh = rec.grad_weight(d_gates) if need[4] else None
        return dh, dc, dw_hh, d_gates.sum((0, 1)) if need[5] else None

    (dh, dc, dw_hh, db), (dx, dw_ih) = in_two_streams(through_time, input_gradients, progress)
    return dx, dh, dc, dw_ih, dw_hh, db


def _both(stream_a: Callable[[], A], stream_b: Callable[[], B]) -> tuple[A, B]:
    """Two independent streams (neither waits on the other)."""
    return in_two_streams(stream_a, stream_b, Progress(0))


class SplitDecoder:
    """A structured product onto a wide output in column tiles, half of the tiles per stream.

    Each half is a :class:`TiledCompactProjection` of its own columns (rows of W); both draw on
    the same kept sets. The split falls on a tile boundary (so every tile but the last is full)
    when there are two tiles or more.
    """

    def __init__(self, weight: Tensor, mask: StructuredMask) -> None:
        width, tile = weight.shape[0], projections.TILE_COLUMNS
        half = tile * math.ceil(math.ceil(width / tile) / 2) if width > tile else width // 2
        self.mask = mask
        self.halves = (
            TiledCompactProjection(weight, mask, slice(0, half)),
            TiledCompactProjection(weight, mask, slice(half, width)),
        )

    def project_all(self, v: Tensor, out: Tensor) -> None:
        a, b = self.halves
        _both(lambda: a.project_all(v, out), lambda: b.project_all(v, out))

    def project_step(self, t: int, v: Tensor, out: Tensor) -> None:
        a, b = self.halves
        _both(lambda: a.project_step(t, v, out), lambda: b.project_step(t, v, out))

    def _backward(
        self, blocks: list[tuple[int, Tensor, Tensor]], need_input: bool
    ) -> Tensor | None:
        a, b = self.halves
        part_a, part_b = _both(
            lambda: a.backward_kept(blocks, need_input), lambda: b.backward_kept(blocks, need_input)
        )
        if part_a is None or part_b is None:
            return None
        return a.expand(blocks, [x.add_(y) for x, y in zip(part_a, part_b, strict=True)])

    def backward_all(self, d_out: Tensor, need_input: bool) -> Tensor | None:
        grad = self._backward(self.halves[0].grad_blocks(d_out), need_input)
        return None if grad is None else grad.view(*d_out.shape[:2], -1)

    def backward_step(self, t: int, d_out: Tensor) -> Tensor:
        grad = self._backward([(t, self.mask.at(t), d_out)], need_input=True)
        assert grad is not None
        return grad

    def grad_weight(self, d_out: Tensor) -> Tensor:
        """The weight gradient, each stream transposing its half's tiles into place."""
        a, b = self.halves
        grad = a.rows.new_empty(b.columns.stop, self.mask.size)
        _both(
            lambda: a.grad_weight_into(grad[a.columns]), lambda: b.grad_weight_into(grad[b.columns])
        )
        return grad

    def begin_backward(self) -> None:
        for half in self.halves:
            half.begin_backward()
