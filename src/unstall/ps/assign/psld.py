"""PSLD's starting point: fine chunks, spread evenly by bytes; the controller moves them after.

Rule: every tensor is cut into pieces of at most ``CHUNK_BYTES`` (so that a big tensor can be
split between servers and load moved in small steps), and each piece, in creation order, goes to
the server with the fewest bytes so far. PSLD knows nothing of the servers' speeds at the start:
it learns them from the workers' transfer timings (:mod:`unstall.ps.psld`).
"""

from __future__ import annotations

from collections.abc import Sequence

from unstall.ps.assign.base import CostPhase, check_inputs
from unstall.ps.chunks import Assignment, ChunkList, TensorInfo

NAME = "psld"
# 64 KiB: the presets' 4 MB models become ~60-70 chunks, 1.5% of the model each.
CHUNK_BYTES = 65_536


def assign(
    tensors: Sequence[TensorInfo],
    servers: int,
    costs: Sequence[CostPhase] = (),
    *,
    chunk_bytes: int = CHUNK_BYTES,
) -> Assignment:
    check_inputs(NAME, tensors, servers)
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
