"""The invariant's other side: single-process training with the servers' optimizer over the same
global batches.

Each iteration replays every worker's batch (the one the worker recorded, so the check holds for
any data function, deterministic or not), computes its gradient in rank order with the same code
the workers run (:class:`~unstall.ps.replica.ModelReplica`, one thread), and applies the
optimizer's step (:mod:`unstall.ps.optim`) to whole tensors. The parameters a parameter-server
run ends with must equal these within ``REL_TOL`` (relative, per tensor); a run whose workers
computed on a GPU is replayed on the driver's GPU when it has one (else on the CPU) and held to
:data:`~unstall.ps.device.CUDA_REL_TOL`, the bound float32 arithmetic on a GPU allows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from unstall.ps.device import CPU_REL_TOL, reference_device
from unstall.ps.optim import ServerOptimizer
from unstall.ps.replica import ModelReplica, TrainingJob
from unstall.workload.threads import torch_threads
from unstall.workload.zoo_jobs import Batch

REL_TOL = CPU_REL_TOL


def reference_params(
    job: TrainingJob,
    optimizer: ServerOptimizer,
    initial: Sequence[np.ndarray],
    batches: Sequence[Sequence[Batch]],
    advance: Callable[[int], None] | None = None,
    *,
    initial_state: Sequence[Sequence[np.ndarray]] | None = None,
    start_iteration: int = 0,
) -> list[np.ndarray]:
    """Parameters after single-process synchronous training from ``initial`` (and optimizer
    state ``initial_state[slot][tensor]``; None: zeros) over ``batches``
    (``batches[rank][k]``: iteration ``start_iteration + k``, one batch an iteration)."""
    params = [p.copy() for p in initial]
    if initial_state is None:
        state = [[np.zeros_like(p) for p in params] for _ in range(optimizer.slots)]
    else:
        state = [[s.copy() for s in slot] for slot in initial_state]
    replica = ModelReplica(dataclasses.replace(job, device=reference_device(job.device)))
    iterations = min((len(b) for b in batches), default=0)
    with torch_threads(1):  # as the workers run
        for k in range(iterations):
            iteration = start_iteration + k
            replica.load_all(params)
            by_rank = []
            for rank in range(job.workers):
                _, grads = replica.gradients(batches[rank][k], iteration, rank)
                by_rank.append([g.copy() for g in grads])  # the next backward reuses storage
            for t, param in enumerate(params):
                optimizer.step(
                    param, [slot[t] for slot in state], [g[t] for g in by_rank], step=iteration + 1
                )
            if advance is not None:
                advance(1)
    return params


@dataclass(frozen=True, kw_only=True)
class ReferenceCheck:
    """Largest per-tensor relative error ``||actual - expected|| / ||expected||``."""

    max_rel_err: float
    worst_tensor: int
    matches: bool


def compare(
    actual: Sequence[np.ndarray], expected: Sequence[np.ndarray], tolerance: float = REL_TOL
) -> ReferenceCheck:
    """How far ``actual`` is from ``expected``, tensor by tensor; a match within
    ``tolerance``."""
    errors = []
    for a, e in zip(actual, expected, strict=True):
        scale = float(np.linalg.norm(e.astype(np.float64)))
        diff = float(np.linalg.norm(a.astype(np.float64) - e.astype(np.float64)))
        errors.append(diff / scale if scale > 0 else diff)
    worst = int(np.argmax(errors))
    return ReferenceCheck(
        max_rel_err=errors[worst], worst_tensor=worst, matches=errors[worst] <= tolerance
    )
