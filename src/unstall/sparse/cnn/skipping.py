"""Zero skipping on a systolic array, measured at the granularity the array can exploit.

A GEMM ``C[m, n] = A[m, k] @ B[k, n]`` runs on the array fold by fold (see
:mod:`unstall.sparse.cnn.scalesim_adapter`): each fold pins a block of ``rows x cols`` of the
two spatial dimensions and streams the third through the array, one step a cycle. A step of a fold
does useful work when some processing element sees a multiply-accumulate
``A[m, k] * B[k, n]`` with both operands non-zero *and* an output ``C[m, n]`` that is needed
(outputs known in advance to be thrown away, such as input gradients at positions the forward
ReLU zeroed, need not be computed).

Two skipping models (``accelerator.SKIPPING_MODELS`` names them):

``lockstep``
    the plain systolic array: a step is skipped only when *every* element of the fold would idle
    on it (``skip_rows = rows``): a whole operand vector of the tile must be zero.
``per-row``
    each array row (``skip_rows = 1``; or each group of ``skip_rows`` rows) has its own operand
    queue and skips its own zero steps; the operands the rows share (the other streamed
    operand) wait in a buffer of ``lookahead`` steps. The stream is cut into windows of
    ``lookahead`` steps: inside a window every row group runs ahead on its own, and the groups
    meet at the window's end (the buffer is refilled for the next window), so a window lasts as
    long as its busiest group's work in it. ``lookahead = None`` is an unbounded buffer: the
    fold lasts as long as its densest row group, the bound on row-level skipping.
    ``lookahead = 1`` is lockstep again.

Columns always move together. Meeting at window ends is stricter than a sliding window of the
same depth (where a row may run ahead as soon as the slowest row has moved), so the bounded
model slightly under-states what a sliding buffer of that depth gets.

The masks are the real operands of a training step, so the clustering of zeros (a ReLU channel
that is dead over a whole region, a max-pool that routes gradient to one pixel in four) is
measured, not assumed: nothing here treats zeros as independent.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from unstall.config import check
from unstall.sparse.cnn.scalesim_adapter import ArrayConfig

# Work on at most about this many elements at once when a product has to be materialised.
_CHUNK_ELEMENTS = 1 << 24


@dataclass(frozen=True)
class GemmMasks:
    """Which operands of a GEMM are non-zero, batched over convolution groups.

    ``a``: ``(groups, m, k)``; ``b``: ``(groups, k, n)``; ``need``: ``(groups, m, n)``, the outputs
    that must be computed. ``None`` means dense (every element non-zero, every output needed).
    """

    a: torch.Tensor | None = None
    b: torch.Tensor | None = None
    need: torch.Tensor | None = None


def busy_steps(
    masks: GemmMasks,
    m: int,
    n: int,
    k: int,
    groups: int,
    array: ArrayConfig,
    skip_rows: int,
    lookahead: int | None = None,
) -> int:
    """Sum, over the convolution groups and the folds of each, of the streamed steps the fold
    cannot skip. With no masks this is ``groups * folds * stream``."""
    check(
        1 <= skip_rows <= array.rows and array.rows % skip_rows == 0,
        "busy_steps",
        "skip_rows",
        f"must divide the array's {array.rows} rows, got {skip_rows}",
    )
    check(lookahead is None or lookahead >= 1, "busy_steps", "lookahead", "must be >= 1 or None")
    named = (("a", masks.a, (m, k)), ("b", masks.b, (k, n)), ("need", masks.need, (m, n)))
    for name, t, shape in named:
        ok = t is None or tuple(t.shape) == (groups, *shape)
        check(ok, "GemmMasks", name, f"must have shape {(groups, *shape)}, got {_shape(t)}")
    x_rs, x_cs, x_rc, (size_r, size_c, size_s) = _roles(masks, m, n, k, array.dataflow)
    window = size_s if lookahead is None else min(lookahead, size_s)
    if skip_rows == array.rows:
        window = size_s  # one group per fold: nothing to meet, windows change nothing
    sizes = _Shape(groups, size_r, size_c, size_s, array, skip_rows, window)
    per_group = _group_busy(x_rs, x_cs, x_rc, sizes)  # (g, row groups, col blocks, windows)
    # A window of a fold lasts as long as its busiest group of rows.
    g, n_groups, n_col_blocks, n_windows = per_group.shape
    per_fold = per_group.reshape(
        g, n_groups // (array.rows // skip_rows), -1, n_col_blocks, n_windows
    )
    return int(per_fold.amax(dim=2).sum().item())


@dataclass(frozen=True)
class _Shape:
    """The sizes one busy-step count works with."""

    groups: int
    size_r: int  # GEMM size along the array's rows
    size_c: int  # ... along its columns
    size_s: int  # streamed length
    array: ArrayConfig
    skip_rows: int
    window: int  # streamed steps between two meetings of the row groups

    @property
    def rows_padded(self) -> int:
        return self.size_r + (-self.size_r % self.array.rows)

    @property
    def n_row_groups(self) -> int:
        return self.rows_padded // self.skip_rows

    @property
    def n_col_blocks(self) -> int:
        return -(-self.size_c // self.array.cols)


def _windows(x: torch.Tensor, window: int) -> torch.Tensor:
    """Sum the last (streamed) dimension of ``x`` over consecutive windows: ``(..., windows)``."""
    x = x.long()
    extra = -x.shape[-1] % window
    if extra:
        x = F.pad(x, (0, extra))
    return x.reshape(*x.shape[:-1], -1, window).sum(dim=-1)


def _shape(t: torch.Tensor | None) -> tuple[int, ...] | None:
    return None if t is None else tuple(t.shape)


Masks = torch.Tensor | None


def _roles(
    masks: GemmMasks, m: int, n: int, k: int, dataflow: str
) -> tuple[Masks, Masks, Masks, tuple[int, int, int]]:
    """The three masks by their place on the array: (array rows x stream), (array columns x
    stream), (array rows x array columns), and the sizes along rows, columns and stream."""
    a, b, need = masks.a, masks.b, masks.need
    if dataflow == "os":  # rows m, columns n, stream k
        return a, _t(b), need, (m, n, k)
    if dataflow == "ws":  # rows k, columns n, stream m
        return _t(a), _t(need), b, (k, n, m)
    # "is": rows k, columns m, stream n
    return b, need, _t(a), (k, m, n)


def _t(x: Masks) -> Masks:
    return None if x is None else x.transpose(1, 2)


def _pad(x: torch.Tensor, dim: int, multiple: int) -> torch.Tensor:
    """Pad dimension ``dim`` of a (g, ., .) mask with False up to a multiple of ``multiple``."""
    extra = -x.shape[dim] % multiple
    if extra == 0:
        return x
    # F.pad lists (left, right) pairs from the last dimension backwards.
    pad = (0, extra) if dim == 2 else (0, 0, 0, extra)
    return F.pad(x, pad)


def _group_busy(x_rs: Masks, x_cs: Masks, x_rc: Masks, sh: _Shape) -> torch.Tensor:
    """Busy steps of each row group in each column block and stream window:
    ``(groups, row_groups, col_blocks, windows)``."""
    array, groups = sh.array, sh.groups
    if x_rs is not None:
        x_rs = _pad(x_rs, 1, array.rows)
    if x_rc is not None:
        x_rc = _pad(_pad(x_rc, 1, array.rows), 2, array.cols)
    if x_cs is not None:
        x_cs = _pad(x_cs, 1, array.cols)
    real_rows = torch.zeros(groups, sh.rows_padded, 1, dtype=torch.bool)
    real_rows[:, : sh.size_r] = True

    def row_any(x: torch.Tensor) -> torch.Tensor:  # (g, rows, X) -> (g, row_groups, X)
        return x.reshape(groups, sh.n_row_groups, sh.skip_rows, -1).any(dim=2)

    def col_any(x: torch.Tensor) -> torch.Tensor:  # (g, cols, X) -> (g, col_blocks, X)
        return x.reshape(groups, sh.n_col_blocks, array.cols, -1).any(dim=2)

    if x_cs is None and x_rc is None:
        live = row_any(x_rs if x_rs is not None else real_rows.expand(-1, -1, sh.size_s))
        return _windows(live, sh.window)[:, :, None, :].expand(-1, -1, sh.n_col_blocks, -1)
    if x_rc is None:
        assert x_cs is not None
        rows_live = row_any(x_rs if x_rs is not None else real_rows.expand(-1, -1, sh.size_s))
        return _busy_rows_cols(rows_live, col_any(x_cs), sh.window)
    if x_cs is None:
        reach = col_any(x_rc.transpose(1, 2)).transpose(1, 2)  # (g, rows, col_blocks)
        return _busy_row_reach(x_rs, reach, sh)
    return _busy_general(x_rs, x_cs, x_rc, sh)


def _busy_rows_cols(rows_live: torch.Tensor, cols_live: torch.Tensor, window: int) -> torch.Tensor:
    """Busy steps when a step is busy for a row group and a column block exactly when both have
    work on it: ``rows_live`` ``(g, G, s)``, ``cols_live`` ``(g, col_blocks, s)``."""
    g, n_groups, size_s = rows_live.shape
    pad = -size_s % window
    r = F.pad(rows_live.float(), (0, pad)).reshape(g, n_groups, -1, window).transpose(1, 2)
    c = F.pad(cols_live.float(), (0, pad)).reshape(g, cols_live.shape[1], -1, window)
    counts = r @ c.transpose(1, 2).transpose(2, 3)  # (g, windows, G, col_blocks)
    return counts.round().long().permute(0, 2, 3, 1)


def _busy_row_reach(x_rs: Masks, reach: torch.Tensor, sh: _Shape) -> torch.Tensor:
    """Busy steps when whether a row works depends on the row and the column block, not on the
    step: a step is busy for a row group when some row of it has a non-zero operand there and
    an output to compute in the block."""
    groups, n_row_groups, skip_rows = sh.groups, sh.n_row_groups, sh.skip_rows
    reach_g = reach.reshape(groups, n_row_groups, skip_rows, -1)
    n_windows = -(-sh.size_s // sh.window)
    if x_rs is None:
        steps = _windows(torch.ones(1, sh.size_s, dtype=torch.bool), sh.window)[0]  # (windows,)
        return reach_g.any(dim=2).long()[..., None] * steps
    if skip_rows == 1:
        return _windows(x_rs, sh.window)[:, :, None, :] * reach.long()[..., None]
    ops = x_rs.reshape(groups, n_row_groups, skip_rows, -1).float()  # (g, G, rows, s)
    out = torch.empty(groups, n_row_groups, reach.shape[2], n_windows, dtype=torch.int64)
    step = max(1, _CHUNK_ELEMENTS // max(1, ops.shape[3] * reach.shape[2]))
    for lo in range(0, n_row_groups, step):
        hi = min(n_row_groups, lo + step)
        counts = ops[:, lo:hi].transpose(2, 3) @ reach_g[:, lo:hi].float()  # (g, G', s, cb)
        out[:, lo:hi] = _windows((counts > 0).transpose(2, 3), sh.window)
    return out


def _busy_general(x_rs: Masks, x_cs: torch.Tensor, x_rc: torch.Tensor, sh: _Shape) -> torch.Tensor:
    """Busy steps when every operand has zeros: one product per column block."""
    groups, cols = sh.groups, sh.array.cols
    n_windows = -(-sh.size_s // sh.window)
    out = torch.empty(groups, sh.n_row_groups, sh.n_col_blocks, n_windows, dtype=torch.int64)
    for cb in range(sh.n_col_blocks):
        block = slice(cb * cols, (cb + 1) * cols)
        live = torch.bmm(x_rc[:, :, block].float(), x_cs[:, block].float()) > 0  # (g, rows, s)
        if x_rs is not None:
            live &= x_rs
        grouped = live.reshape(groups, sh.n_row_groups, sh.skip_rows, -1).any(dim=2)
        out[:, :, cb] = _windows(grouped, sh.window)
    return out


def effectual_macs(masks: GemmMasks, m: int, n: int, k: int, groups: int) -> int:
    """Multiply-accumulates with both operands non-zero and a needed output: the work of an
    ideal machine that skips every zero at element granularity with perfect load balance."""

    def ones(rows: int, cols: int) -> torch.Tensor:
        return torch.ones(groups, rows, cols)

    a = masks.a.float() if masks.a is not None else None
    b = masks.b.float() if masks.b is not None else None
    if masks.need is None:
        col_a = a.sum(dim=1) if a is not None else torch.full((groups, k), float(m))
        row_b = b.sum(dim=2) if b is not None else torch.full((groups, k), float(n))
        return int((col_a.double() * row_b.double()).sum().item())
    need = masks.need.float()
    if b is None:
        row_a = a.sum(dim=2) if a is not None else torch.full((groups, m), float(k))
        return int((row_a.double() * need.sum(dim=2).double()).sum().item())
    products = torch.bmm(a if a is not None else ones(m, k), b)  # (g, m, n) counts
    return int((products.double() * need.double()).sum().item())
