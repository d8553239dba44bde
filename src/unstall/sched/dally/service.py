"""Preemption for service (Tiresias-like): a waiting job that finds too few GPUs free may take
them from running jobs that rank strictly below it in the queue order (``las``: a higher
attained-service level; ``gittins``: expected to hold their GPUs ``preempt_ratio`` times longer),
the lowest-ranked first, so that a new short job need not wait behind long ones. It is off by
default (``DallyConfig.service_preemption``); the look-ahead tuner
(:mod:`unstall.sim.lookahead`) turns it on where its look-ahead says it pays.

Unlike the priority preemption (for jobs larger than a node) it weighs no cost: as in Tiresias,
rank alone decides, and the victims go back to the queue at their rank.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from unstall.sched.base import JobView, Placement
from unstall.sched.free import FreeGpus


def service_room(
    job: JobView,
    running: Iterable[JobView],
    free: FreeGpus,
    *,
    outranks: Callable[[JobView, JobView], bool],
    rank: Callable[[JobView], float],
    taken: set[str],
    max_victims: int,
    types: Sequence[str] | None = None,
) -> tuple[list[JobView], Placement] | None:
    """The running jobs ``job`` outranks to preempt (lowest ``rank`` first, at most
    ``max_victims``, none in ``taken``) so that it starts now, and its placement on the GPUs
    then free (``types``: on the first of these GPU types that holds it, see
    :meth:`FreeGpus.best`); None when that is not enough. ``free`` is left with the victims'
    GPUs given back when it succeeds (the caller takes the job's), unchanged otherwise."""
    need = job.num_gpus - free.total
    if need <= 0:
        return None
    candidates = [v for v in running if v.job_id not in taken and outranks(job, v)]
    candidates.sort(key=rank, reverse=True)
    chosen: list[JobView] = []
    freed = 0
    for victim in candidates[:max_victims]:
        if freed >= need:
            break
        chosen.append(victim)
        freed += victim.num_gpus
    if freed < need:
        return None
    for victim in chosen:
        free.give(victim.placement)
    placement = free.best(job.num_gpus, types)
    if placement is None:
        for victim in chosen:
            free.take(victim.placement)
        return None
    return chosen, placement
