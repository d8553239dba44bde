"""MXNet's KVStore placement (``kvstore_dist``): big arrays sliced over every server, small ones
hashed.

Rule: an array of at least ``MXNET_KVSTORE_BIGARRAY_BOUND`` = 1,000,000 elements is cut into one
contiguous slice per server, slice ``i`` on server ``i``, with boundaries at
``round(numel * i / n)``; a smaller array goes whole to server ``(key * 9973) % n``, ``key``
being its creation-order index.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from unstall.ps.assign.base import CostPhase, check_inputs
from unstall.ps.chunks import Assignment, ChunkList, TensorInfo

NAME = "mxnet"
BIGARRAY_BOUND = 1_000_000
KEY_MULTIPLIER = 9973


def _round_half_up(x: float) -> int:
    """C's ``round`` for the non-negative values here (Python's rounds half to even)."""
    return math.floor(x + 0.5)


def slice_bounds(numel: int, servers: int) -> list[tuple[int, int]]:
    """MXNet's slices of a big array: ``[round(numel*i/n), round(numel*(i+1)/n))``."""
    cuts = [_round_half_up(numel / servers * i) for i in range(servers + 1)]
    return list(itertools.pairwise(cuts))


def small_array_server(key: int, servers: int) -> int:
    return (key * KEY_MULTIPLIER) % servers


def assign(
    tensors: Sequence[TensorInfo], servers: int, costs: Sequence[CostPhase] = ()
) -> Assignment:
    check_inputs(NAME, tensors, servers)
    out = ChunkList()
    for t in tensors:
        if t.numel >= BIGARRAY_BOUND:
            for server, (start, stop) in enumerate(slice_bounds(t.numel, servers)):
                if stop > start:
                    out.add(t, start, stop, server)
        else:
            out.add(t, 0, t.numel, small_array_server(t.key, servers))
    return out.assignment(servers, NAME)
