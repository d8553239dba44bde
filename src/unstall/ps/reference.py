"""The invariant's other side: single-process SGD with momentum over the same global batches.

Each iteration computes every worker's shard gradient in rank order with the same code the
workers run (:class:`~unstall.ps.replica.ModelReplica`, one thread), and applies
:func:`~unstall.ps.optim.sgd_momentum_step` to whole tensors. The parameters a parameter-server
run ends with must equal these within ``REL_TOL`` (relative, per tensor).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from unstall.ps.data import Dataset
from unstall.ps.optim import SGDConfig, sgd_momentum_step
from unstall.ps.replica import ModelJob, ModelReplica, initial_params, one_thread

REL_TOL = 1e-6


def reference_params(
    job: ModelJob,
    sgd: SGDConfig,
    iterations: int,
    dataset: Dataset | None,
    advance: Callable[[int], None] | None = None,
) -> list[np.ndarray]:
    """Parameters after ``iterations`` steps of single-process synchronous SGD."""
    _, params = initial_params(job)
    momentum = [np.zeros_like(p) for p in params]
    replica = ModelReplica(job, dataset)
    with one_thread():
        for iteration in range(iterations):
            replica.load_all(params)
            by_rank = []
            for rank in range(job.workers):
                _, grads = replica.gradients(iteration, rank)
                by_rank.append([g.copy() for g in grads])  # the next backward reuses storage
            for t, (param, buf) in enumerate(zip(params, momentum, strict=True)):
                sgd_momentum_step(param, buf, [g[t] for g in by_rank], sgd)
            if advance is not None:
                advance(1)
    return params


@dataclass(frozen=True, kw_only=True)
class ReferenceCheck:
    """Largest per-tensor relative error ``||actual - expected|| / ||expected||``."""

    max_rel_err: float
    worst_tensor: int
    matches: bool


def compare(actual: Sequence[np.ndarray], expected: Sequence[np.ndarray]) -> ReferenceCheck:
    errors = []
    for a, e in zip(actual, expected, strict=True):
        scale = float(np.linalg.norm(e.astype(np.float64)))
        diff = float(np.linalg.norm(a.astype(np.float64) - e.astype(np.float64)))
        errors.append(diff / scale if scale > 0 else diff)
    worst = int(np.argmax(errors))
    return ReferenceCheck(
        max_rel_err=errors[worst], worst_tensor=worst, matches=errors[worst] <= REL_TOL
    )
