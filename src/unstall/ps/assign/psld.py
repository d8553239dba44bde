"""PSLD's starting point: fine chunks, spread evenly by bytes; the controller places them by
the servers' probed speeds before the first iteration (its warm start) and moves them after.

Rule: every tensor is cut into pieces of at most a chunk's bytes (so that a big tensor can be
split between servers and load moved in small steps), and each piece, in creation order, goes to
the server with the fewest bytes so far. A split of the load is exact to a chunk, so a chunk is
at most ``1 / CHUNKS_PER_SERVER`` of a server's even share (the slowest server of a balanced
split carries at most that much too many), within ``[MIN_CHUNK_BYTES, CHUNK_BYTES]``: each
chunk costs a slice and a copy per push-pull and a step of the controller's rebalancing. This
placement knows nothing of the servers' speeds: the controller learns them from probes and the
workers' transfer timings (:mod:`unstall.ps.psld`).
"""

from __future__ import annotations

from collections.abc import Sequence

from unstall.ps.assign.base import CostPhase, check_inputs
from unstall.ps.chunks import Assignment, ChunkList, TensorInfo

NAME = "psld"
CHUNK_BYTES = 65_536  # the largest chunk: 64 KiB
MIN_CHUNK_BYTES = 4_096
# 64: on 4 servers the presets' 3.7-4.5 MB models are cut into 14-18 KB chunks, ~250 in all;
# 64 KiB chunks (60-70) left the slowest server of the bandwidth preset's balanced split 3%
# over its share, 3% of every iteration.
CHUNKS_PER_SERVER = 64


def chunk_size(tensors: Sequence[TensorInfo], servers: int) -> int:
    """The chunk bytes of the rule (see the module docstring), a multiple of 4 bytes."""
    share = sum(t.numel * t.itemsize for t in tensors) / servers
    size = int(share // CHUNKS_PER_SERVER) // 4 * 4
    return min(CHUNK_BYTES, max(MIN_CHUNK_BYTES, size))


def assign(
    tensors: Sequence[TensorInfo],
    servers: int,
    costs: Sequence[CostPhase] = (),
    *,
    chunk_bytes: int | None = None,
) -> Assignment:
    """The even split of chunks of ``chunk_bytes`` (None: :func:`chunk_size`'s)."""
    check_inputs(NAME, tensors, servers)
    if chunk_bytes is None:
        chunk_bytes = chunk_size(tensors, servers)
    out = ChunkList()
    loads = [0] * servers
    for t in tensors:
        step = max(1, chunk_bytes // t.itemsize)
        for start in range(0, t.numel, step):
            stop = min(start + step, t.numel)
            server = min(range(servers), key=lambda s: loads[s])
            loads[server] += (stop - start) * t.itemsize
            out.add(t, start, stop, server)
    return out.assignment(servers, NAME, chunk_bytes=chunk_bytes)
