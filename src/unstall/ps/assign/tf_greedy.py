"""TensorFlow's ``GreedyLoadBalancingStrategy`` with the byte-size load function.

Rule: each variable, whole, in creation order, goes to the server with the fewest bytes so far
(the lowest index among equals).
"""

from __future__ import annotations

from collections.abc import Sequence

from unstall.ps.assign.base import CostPhase, check_inputs
from unstall.ps.chunks import Assignment, ChunkList, TensorInfo

NAME = "tf-greedy"


def assign(
    tensors: Sequence[TensorInfo], servers: int, costs: Sequence[CostPhase] = ()
) -> Assignment:
    check_inputs(NAME, tensors, servers)
    out = ChunkList()
    loads = [0] * servers
    for t in tensors:
        server = min(range(servers), key=lambda s: loads[s])  # first of the least loaded
        loads[server] += t.nbytes
        out.add(t, 0, t.numel, server)
    return out.assignment(servers, NAME)
