"""The jobs of a simulated run built from a trace: each with its consolidated iteration time,
network sensitivity and speed on each GPU type, from the speed model."""

from __future__ import annotations

import math
from collections.abc import Sequence

from unstall.loop.jobs import Job
from unstall.sched.base import Sensitivity
from unstall.sim.speed import SpeedModel


def build_jobs(
    *,
    job_ids: Sequence[str],
    submit_s: Sequence[float],
    num_gpus: Sequence[int],
    duration_s: Sequence[float],
    models: Sequence[str],
    speed: SpeedModel,
    duration_gpus: Sequence[str] | None = None,
) -> list[Job]:
    """Jobs with their consolidated iteration time, sensitivity and speed on each GPU type,
    cached per (model, GPUs, duration GPU). ``duration_gpus``: the GPU type each job's duration
    was measured on, where jobs differ (None: the speed model's ``duration_gpu`` for all; only
    a speed model with ``reference_iter_s`` can tell them apart)."""
    cache: dict[tuple[str, int, str | None], _Facts] = {}
    jobs: list[Job] = []
    gpus: Sequence[str | None] = (
        duration_gpus if duration_gpus is not None else [None] * len(job_ids)
    )
    for i, (jid, sub, n, dur, model, gpu) in enumerate(
        zip(job_ids, submit_s, num_gpus, duration_s, models, gpus, strict=True)
    ):
        key = (model, int(n), gpu)
        facts = cache.get(key)
        if facts is None:
            facts = cache[key] = _facts(speed, model, int(n), gpu)
        jobs.append(
            Job(
                index=i,
                job_id=str(jid),
                submit_s=float(sub),
                num_gpus=int(n),
                duration_s=float(dur),
                model=model,
                cons_iter_s=facts[0],
                sensitivity=facts[1],
                type_speeds=facts[2],
            )
        )
    return jobs


_Facts = tuple[float, Sensitivity, tuple[tuple[str, float], ...]]


def _facts(speed: SpeedModel, model: str, num_gpus: int, gpu: str | None) -> _Facts:
    """A job's consolidated iteration time on its duration GPU, its network sensitivity and its
    speed on each GPU type (work done per second there over work done per second on the
    duration GPU, both consolidated; empty when the speed model cannot tell)."""
    reference = getattr(speed, "reference_iter_s", None)
    if gpu is not None and reference is not None:
        cons = float(reference(model, num_gpus, gpu))
    else:
        cons = speed.consolidated_iter_s(model, num_gpus)
    by_type = getattr(speed, "type_iter_s", None)
    speeds: tuple[tuple[str, float], ...] = ()
    if by_type is not None:
        speeds = tuple(
            (t, cons / it if it < math.inf else 0.0) for t, it in by_type(model, num_gpus).items()
        )
    return cons, speed.sensitivity(model, num_gpus), speeds
