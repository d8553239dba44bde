"""Round robin (TensorFlow's default ``replica_device_setter`` placement).

Rule: variable ``key`` (creation order), whole, goes to server ``key % n``.
"""

from __future__ import annotations

from collections.abc import Sequence

from unstall.ps.assign.base import CostPhase, check_inputs
from unstall.ps.chunks import Assignment, ChunkList, TensorInfo

NAME = "round-robin"


def assign(
    tensors: Sequence[TensorInfo], servers: int, costs: Sequence[CostPhase] = ()
) -> Assignment:
    check_inputs(NAME, tensors, servers)
    out = ChunkList()
    for t in tensors:
        out.add(t, 0, t.numel, t.key % servers)
    return out.assignment(servers, NAME)
