"""The best static assignment, knowing every server's true cost (the scenario's links).

Parameters are treated as one flat byte vector (tensors in creation order) that may be cut
anywhere, so the best split is a linear programme: shares ``x_s >= 0`` of the bytes, summing to
1, minimising the run's predicted time ``sum_k w_k t_k`` where, in phase ``k``, ``t_k`` is at
least every server's predicted time for its share (an iteration waits for the slowest server).
Then the flat vector is cut into contiguous runs, server 0 first, each run split at tensor
boundaries. With one phase this is the water-filling split: every used server is predicted to
finish at the same time.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.optimize import linprog

from unstall.config import check
from unstall.errors import ConfigError
from unstall.ps.assign.base import CostPhase, check_inputs
from unstall.ps.chunks import Assignment, ChunkList, TensorInfo

NAME = "oracle"


def best_shares(total_bytes: int, costs: Sequence[CostPhase]) -> np.ndarray:
    """Each server's share of ``total_bytes`` minimising the weighted predicted time."""
    n = len(costs[0].servers)
    p = len(costs)
    # Variables: x_0..x_{n-1}, then the slowest server's time t_k of every phase k.
    objective = np.concatenate([np.zeros(n), [c.weight for c in costs]])
    rows, rhs = [], []
    for k, phase in enumerate(costs):
        check(len(phase.servers) == n, NAME, "costs", "every phase must list every server")
        for s, cost in enumerate(phase.servers):
            row = np.zeros(n + p)  # fixed + per_byte * B * x_s - t_k <= 0
            row[s] = cost.per_byte_s * total_bytes
            row[n + k] = -1.0
            rows.append(row)
            rhs.append(-cost.fixed_s)
    equal = np.concatenate([np.ones(n), np.zeros(p)])[None, :]
    solved = linprog(
        objective, A_ub=np.array(rows), b_ub=rhs, A_eq=equal, b_eq=[1.0], method="highs"
    )
    if not solved.success:
        raise ConfigError(NAME, "costs", f"no optimal split: {solved.message}")
    shares = np.clip(solved.x[:n], 0.0, None)
    return np.asarray(shares / shares.sum())


def cut_flat(tensors: Sequence[TensorInfo], shares: np.ndarray, out: ChunkList) -> None:
    """Cut the flat element vector into one contiguous run per server, in server order."""
    total = sum(t.numel for t in tensors)
    ends = np.rint(np.cumsum(shares) * total).astype(np.int64)
    ends[-1] = total
    offset, server = 0, 0  # offset: flat index of the current tensor's first element
    for t in tensors:
        pos = 0
        while pos < t.numel:
            while ends[server] <= offset + pos:  # this server's run is full (or empty)
                server += 1
            stop = min(t.numel, int(ends[server]) - offset)
            out.add(t, pos, stop, server)
            pos = stop
        offset += t.numel


def assign(
    tensors: Sequence[TensorInfo], servers: int, costs: Sequence[CostPhase] = ()
) -> Assignment:
    check_inputs(NAME, tensors, servers)
    check(bool(costs), NAME, "costs", "the oracle needs the servers' true costs")
    check(len(costs[0].servers) == servers, NAME, "costs", f"must list {servers} servers")
    shares = best_shares(sum(t.nbytes for t in tensors), costs)
    out = ChunkList()
    cut_flat(tensors, shares, out)
    return out.assignment(servers, NAME, shares=[float(x) for x in shares])
