"""Masked products ``mask(v) @ W^T`` and their gradients: one *projection* per kind of mask.

Every dropout mode runs the same LSTM loop (:mod:`unstall.sparse.lstm.kernels`); the modes differ
only in how a masked product is computed, which is the job of a projection:

- :class:`DenseProjection` (no mask, ``standard``, ``locked``): multiplies by the elementwise mask
  and does full-size products. The input connection of a layer does not depend on the recurrence,
  so its forward product, input gradient and weight gradient are each one big GEMM over all steps.
- :class:`CompactProjection` (``structured``): at step t the batch shares the kept set K_t, so
  ``v[:, K_t] @ W^T[K_t]`` is all there is to compute. W^T (N x 4H) is kept row-major, so the kept
  rows are one contiguous ``index_select`` into a reused buffer (a memory copy, K_t x 4H), then the
  forward GEMM, the input-gradient GEMM and the weight-gradient GEMM all have K_t instead of N on
  their shared dimension. The weight gradient of the kept rows is added into place with
  ``index_add_``; dropped rows get nothing, which is their true gradient. The price is the
  gather (forward, and again in backward rather than holding T slabs) and the scatter, memory
  traffic that does not shrink with the batch: it eats much of the gain at small batches.
  :class:`TiledCompactProjection` does the same products for a vocabulary-wide output (the
  decoder) with one thread, one cache-sized column tile of W^T at a time for every step.
- :class:`WindowProjection` (``structured-window``): W is laid out once per sequence in the
  order of the sequence's permutation, and each step's kept units are a window of it, so every
  product reads a contiguous slice in place: no per-step gather or scatter at all.

:func:`make_projection` picks the projection by the kind of mask.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeAlias

import torch
from torch import Tensor

from unstall.sparse.lstm.masks import DenseMask, Mask, StructuredMask, WindowMask

# Bytes of W^T rows the structured projection gathers at once (128 rows at hidden 1024): small
# enough to be read back from cache by the GEMM that follows the gather.
GATHER_CHUNK_BYTES = 2 << 20
# Largest product output (bytes) computed chunk by chunk: each chunk's product re-reads and
# re-writes the output, so beyond a cache-sized output the chunks cost more than they save.
CHUNKED_OUTPUT_BYTES = 2 << 20
# Single-threaded, a structured product with an output at least this wide (a vocabulary) runs in
# column tiles of TILE_COLUMNS (see TiledCompactProjection).
TILED_MIN_COLUMNS = 8192
TILE_COLUMNS = 1024


# Called by a projection with ``stop`` once the outputs of steps before ``stop`` are final.
StepsDone: TypeAlias = Callable[[int], None]


class Projection(Protocol):
    """One masked connection ``v -> mask(v) @ W^T`` (W is out x N), with its own backward."""

    def project_all(self, v: Tensor, out: Tensor) -> None:
        """``out[t] += mask_t(v[t]) @ W^T`` for every step; v is (T, B, N), out (T, B, out)."""
        ...

    def project_step(self, t: int, v: Tensor, out: Tensor) -> None:
        """``out += mask_t(v) @ W^T`` for one step; v is (B, N), out (B, out)."""
        ...

    def backward_step(self, t: int, d_out: Tensor) -> Tensor:
        """Gradient with respect to v at step t (B, N); records what the weight gradient needs."""
        ...

    def backward_all(self, d_out: Tensor, need_input: bool) -> Tensor | None:
        """Gradient with respect to v for every step (T, B, N), or None when not needed."""
        ...

    def grad_weight(self, d_out: Tensor) -> Tensor:
        """Gradient with respect to W (out x N), once the backward steps are done."""
        ...

    def begin_backward(self) -> None:
        """Forget what an earlier backward pass accumulated (a graph can be run backward twice)."""
        ...


class DenseProjection:
    """Elementwise mask (or none) and full-size products; the baseline the structured mode beats."""

    def __init__(self, weight: Tensor, mask: DenseMask | None, steps: int) -> None:
        self.weight = weight
        self.mask = mask
        self.steps = steps
        self.masked: Tensor | None = None  # (T, B, N): mask(v), the left factor of dW

    def project_all(self, v: Tensor, out: Tensor) -> None:
        vm = v if self.mask is None else v * self.mask.values
        self.masked = vm
        t, b, n = vm.shape
        out.view(t * b, -1).addmm_(vm.reshape(t * b, n), self.weight.t())

    def project_step(self, t: int, v: Tensor, out: Tensor) -> None:
        if self.masked is None:
            self.masked = v.new_empty(self.steps, *v.shape)
        vm = self.masked[t]
        if self.mask is None:
            vm.copy_(v)
        else:
            torch.mul(v, self.mask.at(t), out=vm)
        out.addmm_(vm, self.weight.t())

    def backward_step(self, t: int, d_out: Tensor) -> Tensor:
        dv = torch.mm(d_out, self.weight)
        return dv if self.mask is None else dv.mul_(self.mask.at(t))

    def backward_all(self, d_out: Tensor, need_input: bool) -> Tensor | None:
        if not need_input:
            return None
        t, b, o = d_out.shape
        dv = torch.mm(d_out.reshape(t * b, o), self.weight).view(t, b, -1)
        return dv if self.mask is None else dv.mul_(self.mask.values)

    def grad_weight(self, d_out: Tensor) -> Tensor:
        assert self.masked is not None, "grad_weight before a forward pass"
        t, b, o = d_out.shape
        return torch.mm(d_out.reshape(t * b, o).t(), self.masked.reshape(t * b, -1))

    def begin_backward(self) -> None:
        pass


class CompactProjection:
    """Structured mask: only the kept units' columns of v and rows of W^T enter the products.

    The products run per *block*: a run of steps that shares one kept set (one step when the
    mask is fresh every step; the recurrent connection always goes step by step). A block of k
    steps is one (k*B x kept) @ (kept x out) product after one gather of the kept rows of W^T,
    so holding a set for several steps turns many small products and gathers into a few large
    ones.

    Single-threaded, the kept rows are gathered and multiplied in chunks of
    :data:`GATHER_CHUNK_BYTES` through one small reused buffer, so a gathered chunk is still in
    cache when the GEMM reads it (gathering a whole step's 8 MB at hidden 1024 writes it out to
    memory and reads it back). With more threads the small chunk GEMMs split badly across the
    threads (slower than one whole gather and one product), so a block's kept rows are then
    gathered at once (``benchmarks/lstm_profile.py`` profiles both). Chunks also stop paying when
    a product's output is larger than a chunk (a held block, or the decoder's 10k-word rows):
    every chunk's product re-reads and re-writes the whole output, which then costs more than
    the gather saved.
    """

    def __init__(self, weight: Tensor, mask: StructuredMask) -> None:
        self.weight_t = weight.t().contiguous()  # (N, out): kept units are whole rows
        self.mask = mask
        width = self.weight_t.shape[1]
        most = max([1, *(int(k.numel()) for k in mask.keep)])
        self.rows_per_chunk = most
        self.chunked_out_bytes = 0  # outputs up to this size are computed in chunks
        if single_cpu_thread(weight):
            self.rows_per_chunk = max(16, GATHER_CHUNK_BYTES // (width * weight.element_size()))
            self.chunked_out_bytes = CHUNKED_OUTPUT_BYTES
        # Reused buffers: gathered rows of W^T, and their weight-gradient rows.
        self.chunk = weight.new_empty(most, width)
        self.step_grad = torch.empty_like(self.chunk)
        # v[:, K] * scale of every block (or step), keyed by the block's first step.
        self.kept_v: dict[int, Tensor] = {}
        self.grad_weight_t: Tensor | None = None

    def _chunks(self, keep: Tensor, out: Tensor) -> list[tuple[slice, Tensor]]:
        """(columns of v[:, K], unit indices) of each chunk of a kept set K for output ``out``."""
        size = max(1, int(keep.numel()))
        if out.numel() * out.element_size() <= self.chunked_out_bytes:
            size = self.rows_per_chunk
        return [
            (slice(start, start + size), keep[start : start + size])
            for start in range(0, keep.numel(), size)
        ]

    def _gather(self, source: Tensor, idx: Tensor) -> Tensor:
        return torch.index_select(source, 0, idx, out=self.chunk[: idx.numel()])

    def project_all(self, v: Tensor, out: Tensor, done: StepsDone | None = None) -> None:
        """As :meth:`Projection.project_all`; ``done(stop)`` after each block (steps up to
        ``stop`` are then final), so another stream can use them while the rest is computed."""
        width = out.shape[-1]
        for steps, keep in self.mask.blocks(v.shape[0]):
            rows = out[steps].view(-1, width)  # out is contiguous: a view, written in place
            self._project(steps.start, keep, v[steps].reshape(rows.shape[0], -1), rows)
            if done is not None:
                done(steps.stop)

    def project_step(self, t: int, v: Tensor, out: Tensor) -> None:
        self._project(t, self.mask.at(t), v, out)

    def _project(self, key: int, keep: Tensor, v: Tensor, out: Tensor) -> None:
        vk = v.index_select(1, keep).mul_(self.mask.scale)
        self.kept_v[key] = vk
        for cols, idx in self._chunks(keep, out):
            out.addmm_(vk[:, cols], self._gather(self.weight_t, idx))

    def backward_step(self, t: int, d_out: Tensor) -> Tensor:
        dv = self._backward_kept(t, self.mask.at(t), d_out, need_input=True)
        assert dv is not None
        return dv

    def _backward_kept(
        self, key: int, keep: Tensor, d_out: Tensor, need_input: bool, into: Tensor | None = None
    ) -> Tensor | None:
        """The input gradient (rows x N) of one block or step, written into ``into`` (zeros,
        rows x N) when given; adds the weight gradient of its kept rows."""
        vk = self.kept_v.get(key)
        assert vk is not None, "backward before a forward pass"
        if self.grad_weight_t is None:
            self.grad_weight_t = torch.zeros_like(self.weight_t)
        dvk = d_out.new_zeros(d_out.shape[0], vk.shape[1]) if need_input else None
        for cols, idx in self._chunks(keep, d_out):
            if dvk is not None:
                dvk[:, cols].addmm_(d_out, self._gather(self.weight_t, idx).t())
            # Weight gradient of the kept rows only: (kept x rows) @ (rows x out), added in place.
            step_grad = torch.mm(vk[:, cols].t(), d_out, out=self.step_grad[: idx.numel()])
            self.grad_weight_t.index_add_(0, idx, step_grad)
        if dvk is None:
            return None
        dv = d_out.new_zeros(d_out.shape[0], self.mask.size) if into is None else into
        return dv.index_copy_(1, keep, dvk.mul_(self.mask.scale))

    def backward_all(self, d_out: Tensor, need_input: bool) -> Tensor | None:
        steps, batch, width = d_out.shape
        dv = d_out.new_zeros(steps, batch, self.mask.size) if need_input else None
        for block, keep in self.mask.blocks(steps):
            rows = d_out[block].reshape(-1, width)
            into = None if dv is None else dv[block].view(rows.shape[0], -1)
            self._backward_kept(block.start, keep, rows, need_input, into)
        return dv

    def backward_block(self, steps: slice, d_out: Tensor, need_input: bool) -> Tensor | None:
        """The input gradient (steps x B x N) of one block of ``mask.blocks`` (``d_out`` covers
        the whole sequence), adding the block's weight gradient; blocks may come in any order."""
        block = d_out[steps]
        keep = self.mask.at(steps.start)
        dv = self._backward_kept(steps.start, keep, block.reshape(-1, block.shape[-1]), need_input)
        return None if dv is None else dv.view(*block.shape[:2], -1)

    def grad_weight(self, d_out: Tensor) -> Tensor:
        if self.grad_weight_t is None:
            self.grad_weight_t = torch.zeros_like(self.weight_t)
        return self.grad_weight_t.t()

    def begin_backward(self) -> None:
        self.grad_weight_t = None


class TiledCompactProjection:
    """Structured mask on a wide output (the decoder's 10k words), single-threaded, in column tiles.

    With 64 rows per step, a product on the kept rows of a 10k-wide W^T does only 128 flops per
    weight element it gathers and the GEMM then packs, so at one step at a time those copies of
    8 MB (hidden 400) through memory cost nearly what the arithmetic does. Here W^T is split once
    per pass into column tiles (N x :data:`TILE_COLUMNS`, 1.6 MB at N = 400), and each tile serves
    every step before the next tile: the per-step gathers read a tile that stays in the core's
    cache, and the weight gradient of the kept rows is added into a tile in cache too. The kept
    sets, the products' shapes and the arithmetic are those of :class:`CompactProjection`; only
    the order changes (the input gradient is summed over tiles, so it differs by rounding).
    """

    def __init__(self, weight: Tensor, mask: StructuredMask, columns: slice | None = None) -> None:
        """``columns``: the output columns (rows of W) this projection computes, all by default;
        :class:`unstall.sparse.lstm.pipelined.SplitDecoder` gives each stream half of them."""
        self.mask = mask
        start, stop, _ = (columns or slice(None)).indices(weight.shape[0])
        self.columns = slice(start, stop)
        self.cols = [
            slice(s, min(s + TILE_COLUMNS, stop)) for s in range(start, stop, TILE_COLUMNS)
        ]
        self.tiles = [weight[cols].t().contiguous() for cols in self.cols]  # (N, tile width)
        most = max([1, *(int(k.numel()) for k in mask.keep)])
        # Reused flat buffers: one tile's gathered kept rows, and their weight-gradient rows.
        self.rows = weight.new_empty(most * TILE_COLUMNS)
        self.step_grad = torch.empty_like(self.rows)
        self.kept_v: dict[int, Tensor] = {}  # v[:, K] * scale of each block, by its first step
        self.grad_tiles: list[Tensor] | None = None

    def _gather(self, tile: int, keep: Tensor) -> Tensor:
        source = self.tiles[tile]
        out = self.rows[: keep.numel() * source.shape[1]].view(keep.numel(), source.shape[1])
        return torch.index_select(source, 0, keep, out=out)

    def _keep_v(self, key: int, keep: Tensor, v: Tensor) -> Tensor:
        vk = v.index_select(1, keep).mul_(self.mask.scale)
        self.kept_v[key] = vk
        return vk

    def _project_blocks(self, blocks: list[tuple[Tensor, Tensor, Tensor]]) -> None:
        """``out += vk @ W^T[K]`` for each (kept units K, kept v, output rows), tile by tile."""
        for tile, cols in enumerate(self.cols):
            for keep, vk, out in blocks:
                out[:, cols].addmm_(vk, self._gather(tile, keep))

    def project_all(self, v: Tensor, out: Tensor, done: StepsDone | None = None) -> None:
        width, blocks = out.shape[-1], []
        for steps, keep in self.mask.blocks(v.shape[0]):
            rows = out[steps].view(-1, width)  # out is contiguous: a view, written in place
            vk = self._keep_v(steps.start, keep, v[steps].reshape(rows.shape[0], -1))
            blocks.append((keep, vk, rows))
        self._project_blocks(blocks)
        if done is not None:
            done(v.shape[0])  # tiles serve every step: all steps are final at once

    def project_step(self, t: int, v: Tensor, out: Tensor) -> None:
        keep = self.mask.at(t)
        self._project_blocks([(keep, self._keep_v(t, keep, v), out)])

    def _backward_blocks(
        self, blocks: list[tuple[int, Tensor, Tensor]], need_input: bool
    ) -> Tensor | None:
        """Input gradients (rows of every block x N) of (first step, kept units, output-gradient
        rows) blocks."""
        dvks = self.backward_kept(blocks, need_input)
        return None if dvks is None else self.expand(blocks, dvks)

    def expand(self, blocks: list[tuple[int, Tensor, Tensor]], dvks: list[Tensor]) -> Tensor:
        """The input gradients of the blocks, one after the other (rows of every block x N), from
        :meth:`backward_kept`'s kept columns: each block's kept columns copied into place."""
        rows = [d.shape[0] for _, _, d in blocks]
        grad = dvks[0].new_zeros(sum(rows), self.mask.size)
        for (_, keep, _), dvk, part in zip(blocks, dvks, grad.split(rows), strict=True):
            part.index_copy_(1, keep, dvk.mul_(self.mask.scale))
        return grad

    def backward_kept(
        self, blocks: list[tuple[int, Tensor, Tensor]], need_input: bool
    ) -> list[Tensor] | None:
        """Adds the weight gradient of this projection's columns; returns, when ``need_input``,
        each block's input gradient on its kept units before the dropout scale (rows x kept),
        which sums over the columns: another projection's columns add their part."""
        if self.grad_tiles is None:
            self.grad_tiles = [torch.zeros_like(tile) for tile in self.tiles]
        dvks = [d.new_zeros(d.shape[0], keep.numel()) for _, keep, d in blocks]
        for tile, cols in enumerate(self.cols):
            grad_tile = self.grad_tiles[tile]
            for (key, keep, d_rows), dvk in zip(blocks, dvks, strict=True):
                vk = self.kept_v.get(key)
                assert vk is not None, "backward before a forward pass"
                d_out = d_rows[:, cols]
                if need_input:
                    dvk.addmm_(d_out, self._gather(tile, keep).t())
                size = keep.numel() * d_out.shape[1]
                step_grad = self.step_grad[:size].view(keep.numel(), d_out.shape[1])
                grad_tile.index_add_(0, keep, torch.mm(vk.t(), d_out, out=step_grad))
        return dvks if need_input else None

    def backward_step(self, t: int, d_out: Tensor) -> Tensor:
        grad = self._backward_blocks([(t, self.mask.at(t), d_out)], need_input=True)
        assert grad is not None
        return grad

    def grad_blocks(self, d_out: Tensor) -> list[tuple[int, Tensor, Tensor]]:
        """(first step, kept units, output-gradient rows) of every block of a (T, B, out) d_out."""
        steps, _, width = d_out.shape
        return [(s.start, keep, d_out[s].reshape(-1, width)) for s, keep in self.mask.blocks(steps)]

    def backward_all(self, d_out: Tensor, need_input: bool) -> Tensor | None:
        grad = self._backward_blocks(self.grad_blocks(d_out), need_input)
        return None if grad is None else grad.view(*d_out.shape[:2], -1)

    def backward_block(self, steps: slice, d_out: Tensor, need_input: bool) -> Tensor | None:
        """As :meth:`CompactProjection.backward_block`."""
        block = d_out[steps]
        rows = block.reshape(-1, block.shape[-1])
        grad = self._backward_blocks([(steps.start, self.mask.at(steps.start), rows)], need_input)
        return None if grad is None else grad.view(*block.shape[:2], -1)

    def grad_weight(self, d_out: Tensor) -> Tensor:
        grad = self.rows.new_empty(self.columns.stop - self.columns.start, self.mask.size)
        self.grad_weight_into(grad)
        return grad

    def grad_weight_into(self, grad: Tensor) -> None:
        """Write the weight gradient of this projection's columns (rows of W) into ``grad``
        (columns x N): each tile's gradient transposed into place, one copy."""
        if self.grad_tiles is None:
            self.grad_tiles = [torch.zeros_like(tile) for tile in self.tiles]
        start = self.columns.start
        for cols, tile_grad in zip(self.cols, self.grad_tiles, strict=True):
            grad[cols.start - start : cols.stop - start].copy_(tile_grad.t())

    def begin_backward(self) -> None:
        self.grad_tiles = None


class WindowProjection:
    """Window mask: W^T is laid out in the sequence's permutation order once per forward pass, so
    the kept rows of every step are one contiguous slice and no step gathers or scatters weights.

    Rows are stored for positions 0 .. N + kept - 2 of the doubled permutation, so a window that
    wraps around the end is still one slice; the gradient of the doubled rows is folded back.
    """

    def __init__(self, weight: Tensor, mask: WindowMask) -> None:
        self.mask = mask
        size, kept = mask.size, mask.kept
        self.order = torch.cat([mask.perm, mask.perm])[: size + kept - 1]
        # (out, N + kept - 1): a window is a column slice, which BLAS reads in place through its
        # leading dimension. The gradient is kept row-major (N + kept - 1, out), where a window is
        # a block of whole rows that a GEMM can accumulate into directly.
        self.weight_p = weight.index_select(1, self.order)
        self.kept_v: list[Tensor | None] = [None] * len(mask.offsets)
        self.grad_weight_p: Tensor | None = None

    def _rows(self, t: int) -> slice:
        start = self.mask.offsets[t]
        return slice(start, start + self.mask.kept)

    def project_all(self, v: Tensor, out: Tensor) -> None:
        for t in range(v.shape[0]):
            self.project_step(t, v[t], out[t])

    def project_step(self, t: int, v: Tensor, out: Tensor) -> None:
        rows = self._rows(t)
        vk = v.index_select(1, self.order[rows]).mul_(self.mask.scale)
        self.kept_v[t] = vk
        out.addmm_(vk, self.weight_p[:, rows].t())

    def backward_step(self, t: int, d_out: Tensor) -> Tensor:
        dv = self._backward_kept(t, d_out, need_input=True)
        assert dv is not None
        return dv

    def _backward_kept(self, t: int, d_out: Tensor, need_input: bool) -> Tensor | None:
        rows, vk = self._rows(t), self.kept_v[t]
        assert vk is not None, "backward before a forward pass"
        if self.grad_weight_p is None:
            self.grad_weight_p = self.weight_p.new_zeros(self.weight_p.shape[::-1])
        self.grad_weight_p[rows].addmm_(vk.t(), d_out)  # contiguous rows: no scatter
        if not need_input:
            return None
        dv = d_out.new_zeros(d_out.shape[0], self.mask.size)
        dvk = torch.mm(d_out, self.weight_p[:, rows]).mul_(self.mask.scale)
        return dv.index_copy_(1, self.order[rows], dvk)

    def backward_all(self, d_out: Tensor, need_input: bool) -> Tensor | None:
        grads = [self._backward_kept(t, d_out[t], need_input) for t in range(d_out.shape[0])]
        if not need_input:
            return None
        return torch.stack([g for g in grads if g is not None])

    def grad_weight(self, d_out: Tensor) -> Tensor:
        grad_t = self.weight_p.new_zeros(self.mask.size, self.weight_p.shape[0])
        if self.grad_weight_p is not None:
            grad_t.index_add_(0, self.order, self.grad_weight_p)  # folds the doubled rows back
        return grad_t.t()

    def begin_backward(self) -> None:
        self.grad_weight_p = None


def single_cpu_thread(weight: Tensor) -> bool:
    """Whether ``weight``'s products run on one CPU thread: where chunks and column tiles pay
    (a GPU's kernels are many-threaded: the whole gather and one product each are its shape)."""
    return weight.device.type == "cpu" and torch.get_num_threads() == 1


def structured_projection(
    weight: Tensor, mask: StructuredMask
) -> CompactProjection | TiledCompactProjection:
    """Compact products; in column tiles for a vocabulary-wide output when single-threaded (with
    more threads the tiles' small products split badly across them, as the chunks do)."""
    if single_cpu_thread(weight) and weight.shape[0] >= TILED_MIN_COLUMNS:
        return TiledCompactProjection(weight, mask)
    return CompactProjection(weight, mask)


ProjectionFactory: TypeAlias = Callable[[Tensor, Any, int], Projection]

# Which projection computes a masked product, by the kind of mask (None means no dropout).
PROJECTIONS: dict[type, ProjectionFactory] = {
    type(None): lambda w, m, steps: DenseProjection(w, None, steps),
    DenseMask: lambda w, m, steps: DenseProjection(w, m, steps),
    StructuredMask: lambda w, m, steps: structured_projection(w, m),
    WindowMask: lambda w, m, steps: WindowProjection(w, m),
}


def make_projection(weight: Tensor, mask: Mask, steps: int) -> Projection:
    """The projection that fits the mask's kind: compact for structured masks, dense otherwise."""
    return PROJECTIONS[type(mask)](weight, mask, steps)
