"""Zero skipping on a systolic array, measured at the granularity the array can exploit.

A GEMM ``C[m, n] = A[m, k] @ B[k, n]`` runs on the array fold by fold (see
:mod:`unstall.sparse.scalesim_adapter`): each fold pins a block of ``rows x cols`` of the two
spatial dimensions and streams the third through the array, one step a cycle. A step of a fold
does useful work when some processing element sees a multiply-accumulate
``A[m, k] * B[k, n]`` with both operands non-zero *and* an output ``C[m, n]`` that is needed
(outputs known in advance to be thrown away, such as input gradients at positions the forward
ReLU zeroed, need not be computed).

The array moves in lockstep: a step can only be skipped when *every* element of the fold would
idle on it. ``skip_rows`` relaxes this: the array's rows are split into groups of ``skip_rows``
that skip independently (each with its own operand queue), and the fold lasts as long as its
busiest group. ``skip_rows = rows`` is the plain systolic array (a whole row vector of the tile
must be zero to skip); ``skip_rows = 1`` lets every array row skip its own zeros. Columns always
move together.

The masks are the real operands of a training step, so the clustering of zeros (a ReLU channel
that is dead over a whole region, a max-pool that routes gradient to one pixel in four) is
measured, not assumed: nothing here treats zeros as independent.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from unstall.config import check
from unstall.sparse.scalesim_adapter import ArrayConfig

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
    masks: GemmMasks, m: int, n: int, k: int, groups: int, array: ArrayConfig, skip_rows: int
) -> int:
    """Sum, over the convolution groups and the folds of each, of the streamed steps the fold
    cannot skip. With no masks this is ``groups * folds * stream``."""
    check(
        1 <= skip_rows <= array.rows and array.rows % skip_rows == 0,
        "busy_steps",
        "skip_rows",
        f"must divide the array's {array.rows} rows, got {skip_rows}",
    )
    named = (("a", masks.a, (m, k)), ("b", masks.b, (k, n)), ("need", masks.need, (m, n)))
    for name, t, shape in named:
        ok = t is None or tuple(t.shape) == (groups, *shape)
        check(ok, "GemmMasks", name, f"must have shape {(groups, *shape)}, got {_shape(t)}")
    x_rs, x_cs, x_rc, (size_r, size_c, size_s) = _roles(masks, m, n, k, array.dataflow)
    per_group = _group_busy(x_rs, x_cs, x_rc, size_r, size_c, size_s, groups, array, skip_rows)
    # A fold lasts as long as its busiest group of rows.
    g, n_groups, n_col_blocks = per_group.shape
    per_fold = per_group.reshape(g, n_groups // (array.rows // skip_rows), -1, n_col_blocks)
    return int(per_fold.amax(dim=2).sum().item())


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


def _group_busy(
    x_rs: Masks,
    x_cs: Masks,
    x_rc: Masks,
    size_r: int,
    size_c: int,
    size_s: int,
    groups: int,
    array: ArrayConfig,
    skip_rows: int,
) -> torch.Tensor:
    """Busy steps of each row group in each column block: ``(groups, row_groups, col_blocks)``."""
    rows_padded = size_r + (-size_r % array.rows)
    n_row_groups = rows_padded // skip_rows
    n_col_blocks = -(-size_c // array.cols)
    if x_rs is not None:
        x_rs = _pad(x_rs, 1, array.rows)
    if x_rc is not None:
        x_rc = _pad(_pad(x_rc, 1, array.rows), 2, array.cols)
    if x_cs is not None:
        x_cs = _pad(x_cs, 1, array.cols)
    real_rows = torch.zeros(groups, rows_padded, 1, dtype=torch.bool)
    real_rows[:, :size_r] = True

    def row_any(x: torch.Tensor) -> torch.Tensor:  # (g, rows, X) -> (g, row_groups, X)
        return x.reshape(groups, n_row_groups, skip_rows, -1).any(dim=2)

    def col_any(x: torch.Tensor) -> torch.Tensor:  # (g, cols, X) -> (g, col_blocks, X)
        return x.reshape(groups, n_col_blocks, array.cols, -1).any(dim=2)

    if x_cs is None and x_rc is None:
        live = row_any(x_rs if x_rs is not None else real_rows.expand(-1, -1, size_s))
        return live.sum(dim=2, keepdim=True).expand(-1, -1, n_col_blocks).to(torch.int64)
    if x_rc is None:
        assert x_cs is not None
        rows_live = row_any(x_rs if x_rs is not None else real_rows.expand(-1, -1, size_s))
        cols_live = col_any(x_cs)  # (g, col_blocks, s)
        return torch.bmm(rows_live.float(), cols_live.float().transpose(1, 2)).round().long()
    if x_cs is None:
        reach = col_any(x_rc.transpose(1, 2)).transpose(1, 2)  # (g, rows, col_blocks)
        return _busy_row_reach(x_rs, reach, groups, n_row_groups, skip_rows, size_s)
    return _busy_general(x_rs, x_cs, x_rc, groups, n_row_groups, n_col_blocks, array, skip_rows)


def _busy_row_reach(
    x_rs: Masks,
    reach: torch.Tensor,
    groups: int,
    n_row_groups: int,
    skip_rows: int,
    size_s: int,
) -> torch.Tensor:
    """Busy steps when whether a row works depends on the row and the column block, not on the
    step: a step is busy for a row group when some row of it has a non-zero operand there and
    an output to compute in the block."""
    reach_g = reach.reshape(groups, n_row_groups, skip_rows, -1)
    if x_rs is None:
        return reach_g.any(dim=2).long() * size_s
    if skip_rows == 1:
        return x_rs.sum(dim=2, keepdim=True) * reach.long()
    ops = x_rs.reshape(groups, n_row_groups, skip_rows, -1).float()  # (g, G, rows, s)
    out = torch.empty(groups, n_row_groups, reach.shape[2], dtype=torch.int64)
    step = max(1, _CHUNK_ELEMENTS // max(1, ops.shape[3] * reach.shape[2]))
    for lo in range(0, n_row_groups, step):
        hi = min(n_row_groups, lo + step)
        counts = ops[:, lo:hi].transpose(2, 3) @ reach_g[:, lo:hi].float()  # (g, G', s, cb)
        out[:, lo:hi] = (counts > 0).sum(dim=2)
    return out


def _busy_general(
    x_rs: Masks,
    x_cs: torch.Tensor,
    x_rc: torch.Tensor,
    groups: int,
    n_row_groups: int,
    n_col_blocks: int,
    array: ArrayConfig,
    skip_rows: int,
) -> torch.Tensor:
    """Busy steps when every operand has zeros: one product per column block."""
    out = torch.empty(groups, n_row_groups, n_col_blocks, dtype=torch.int64)
    for cb in range(n_col_blocks):
        cols = slice(cb * array.cols, (cb + 1) * array.cols)
        live = torch.bmm(x_rc[:, :, cols].float(), x_cs[:, cols].float()) > 0  # (g, rows, s)
        if x_rs is not None:
            live &= x_rs
        grouped = live.reshape(groups, n_row_groups, skip_rows, -1).any(dim=2)
        out[:, :, cb] = grouped.sum(dim=2)
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
