"""Gavel's heterogeneity-aware least-attained-service allocation as a linear program.

Gavel (Narayanan et al., "Heterogeneity-Aware Cluster Scheduling Policies for Deep Learning
Workloads", OSDI'20) writes a policy as an optimisation over an allocation ``X``: ``X[j][t]`` is
the share of time job ``j`` should run on GPU type ``t``. A job's *effective throughput* under
``X`` is ``sum_t X[j][t] * speed[j][t]``. Its LAS policy (max-min fairness) maximises the
smallest effective throughput of any job, each normalised by what the job would get from an
equal share of the cluster (``X_equal``: every job the same share of every type), subject to

- ``0 <= X[j][t] <= 1`` and ``sum_t X[j][t] <= 1`` (a job runs on one type at a time),
- ``sum_j X[j][t] * num_gpus[j] <= gpus[t]`` (no type is over-allocated).

Max-min alone leaves room that no job's minimum needs unused; a small second term (the mean of
the normalised throughputs, weighted :data:`SECONDARY_WEIGHT`) hands it out. The program is
solved with SciPy's HiGHS (``scipy.optimize.linprog(method="highs")``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# Weight of the mean normalised throughput beside the minimum: small enough that the minimum
# is the objective, large enough that HiGHS gives spare capacity away.
SECONDARY_WEIGHT = 1e-3


def equal_share(
    num_gpus: Sequence[int], gpus: Sequence[int], usable: np.ndarray | None = None
) -> np.ndarray:
    """``X_equal``: each job spreads its time over the types it can use (``usable``, default:
    those that hold it) in proportion to their GPUs, and each type's shares are scaled down
    alike when its jobs ask for more GPUs than it has; an equal split of each type among the
    jobs that can use it, which meets every constraint."""
    n = np.asarray(num_gpus, dtype=float)
    cap = np.asarray(gpus, dtype=float)
    fits = n[:, None] <= cap[None, :]
    if usable is not None:
        fits &= usable
    room = np.where(fits, cap[None, :], 0.0)
    total = room.sum(axis=1, keepdims=True)
    shares = np.divide(room, total, out=np.zeros_like(room), where=total > 0)
    asked = (shares * n[:, None]).sum(axis=0)
    scale = np.divide(cap, asked, out=np.ones_like(cap), where=asked > cap)
    return shares * scale[None, :]


def las_allocation(
    num_gpus: Sequence[int], speeds: Sequence[Sequence[float]], gpus: Sequence[int]
) -> np.ndarray:
    """The allocation ``X`` (jobs x types) of Gavel's heterogeneity-aware LAS policy (see the
    module docstring). ``speeds[j][t]``: job ``j``'s throughput on type ``t`` (any unit, the
    same for a job's types; 0 where it cannot run); ``gpus[t]``: GPUs of type ``t``. A job
    that fits no type gets nothing. Should HiGHS fail, the equal share is returned (it also
    meets every constraint)."""
    n = np.asarray(num_gpus, dtype=float)
    cap = np.asarray(gpus, dtype=float)
    s = np.asarray(speeds, dtype=float).reshape(len(n), len(cap))
    jobs, types = s.shape
    if jobs == 0 or types == 0:
        return np.zeros((jobs, types))
    usable = (n[:, None] <= cap[None, :]) & (s > 0)
    fallback = equal_share(num_gpus, gpus, usable)
    reference = (fallback * s).sum(axis=1)
    live = reference > 0
    if not live.any():
        return np.zeros((jobs, types))
    # Normalised throughput per unit of X: speed over the equal share's throughput.
    norm = np.divide(s, reference[:, None], out=np.zeros_like(s), where=live[:, None])
    x = _solve(n, cap, norm, usable, live)
    return fallback if x is None else x


def _solve(
    n: np.ndarray, cap: np.ndarray, norm: np.ndarray, usable: np.ndarray, live: np.ndarray
) -> np.ndarray | None:
    """HiGHS on: maximise z + w * mean_j(norm_j . X_j) subject to z <= norm_j . X_j for each
    job that can run, the per-job and per-type sums, and the bounds. Variables: X row-major,
    then z. SciPy is imported here, not with the module: the command line starts without it."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    jobs, types = norm.shape
    nx = jobs * types
    idx = np.arange(nx).reshape(jobs, types)
    live_jobs = np.flatnonzero(live)
    cost = np.zeros(nx + 1)
    cost[:nx] = -SECONDARY_WEIGHT * norm.ravel() / max(1, len(live_jobs))
    cost[nx] = -1.0
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    # z - norm_j . X_j <= 0, one row per job that can run.
    r = np.repeat(np.arange(len(live_jobs)), types)
    rows += [r, np.arange(len(live_jobs))]
    cols += [idx[live_jobs].ravel(), np.full(len(live_jobs), nx)]
    vals += [-norm[live_jobs].ravel(), np.ones(len(live_jobs))]
    base = len(live_jobs)
    # sum_t X[j][t] <= 1, one row per job.
    rows.append(base + np.repeat(np.arange(jobs), types))
    cols.append(idx.ravel())
    vals.append(np.ones(nx))
    base += jobs
    # sum_j X[j][t] * n_j <= gpus[t], one row per type.
    rows.append(base + np.tile(np.arange(types), jobs))
    cols.append(idx.ravel())
    vals.append(np.repeat(n, types))
    base += types
    a_ub = coo_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
        shape=(base, nx + 1),
    ).tocsr()
    b_ub = np.concatenate([np.zeros(len(live_jobs)), np.ones(jobs), cap])
    upper = np.where(usable, 1.0, 0.0).ravel()
    bounds = np.column_stack([np.zeros(nx + 1), np.append(upper, np.inf)])
    result = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs")
    if result.status != 0 or result.x is None:
        return None
    x = np.where(usable, np.clip(result.x[:nx].reshape(jobs, types), 0.0, 1.0), 0.0)
    return _within_limits(x, n, cap)


def _within_limits(x: np.ndarray, n: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """``x`` scaled down where the solver's tolerance left a job's shares above 1 or a type's
    GPUs above its count, so that the constraints hold exactly as written."""
    per_job = x.sum(axis=1, keepdims=True)
    x = np.divide(x, per_job, out=x.copy(), where=per_job > 1.0)
    used = (x * n[:, None]).sum(axis=0)
    over = used > cap
    if over.any():
        x[:, over] *= cap[over] / used[over]
    return x
