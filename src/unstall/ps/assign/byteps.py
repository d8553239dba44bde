"""BytePS's placement: tensors cut into 4,096,000-byte partitions, each partition's server chosen
by the djb2 hash of its key.

Rule: tensor ``key`` is cut into partitions of ``BYTEPS_PARTITION_BYTES`` = 4,096,000 bytes (the
last one shorter); partition ``i`` has the key ``(key << 16) + i``, and goes to server
``djb2(decimal string of that key) % n``, with djb2 ``h = 5381; h = h * 33 + c`` in unsigned
64-bit arithmetic over the characters ``c``.
"""

from __future__ import annotations

from collections.abc import Sequence

from unstall.ps.assign.base import CostPhase, check_inputs
from unstall.ps.chunks import Assignment, ChunkList, TensorInfo

NAME = "byteps"
PARTITION_BYTES = 4_096_000
KEY_SHIFT = 16
_U64 = (1 << 64) - 1


def djb2(text: str) -> int:
    """Bernstein's djb2 string hash, unsigned 64-bit."""
    h = 5381
    for ch in text.encode("ascii"):
        h = (h * 33 + ch) & _U64
    return h


def partition_key(tensor_key: int, index: int) -> int:
    return (tensor_key << KEY_SHIFT) + index


def partition_server(tensor_key: int, index: int, servers: int) -> int:
    return djb2(str(partition_key(tensor_key, index))) % servers


def assign(
    tensors: Sequence[TensorInfo],
    servers: int,
    costs: Sequence[CostPhase] = (),
    *,
    partition_bytes: int = PARTITION_BYTES,
) -> Assignment:
    check_inputs(NAME, tensors, servers)
    out = ChunkList()
    for t in tensors:
        step = max(1, partition_bytes // t.itemsize)
        for index, start in enumerate(range(0, t.numel, step)):
            out.add(t, start, min(start + step, t.numel), partition_server(t.key, index, servers))
    return out.assignment(servers, NAME, partition_bytes=partition_bytes)
