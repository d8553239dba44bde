"""The jobs of a look-ahead (:mod:`unstall.sim.lookahead`): what the snapshots showed of each,
and a remaining run time drawn from the run times of the jobs that have finished (never from
the trace)."""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass

from unstall.sched.base import ClusterSnapshot, JobView, Placement, Sensitivity
from unstall.sched.dally.history import RunHistory
from unstall.sched.dally.lookahead_config import LookaheadConfig


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannedJob:
    """One job of a look-ahead: what the snapshots showed of it, and its drawn remaining run
    time (``remaining_s``, consolidated). ``arrive_s`` is relative to the tuning instant (0 for
    the jobs there now); ``placement`` is set for a running job (it keeps it)."""

    job_id: str
    num_gpus: int
    model: str
    sensitivity: Sensitivity
    arrive_s: float
    remaining_s: float
    attained_gpu_s: float = 0.0
    placement: Placement = ()
    submit_rel_s: float = 0.0  # the real submit time, relative to the tuning instant
    changed_rel_s: float = 0.0
    preemptions: int = 0
    type_speeds: tuple[tuple[str, float], ...] = ()  # as its view says (JobView.type_speeds)

    @classmethod
    def there(cls, view: JobView, at_s: float, remaining_s: float) -> PlannedJob:
        """A job there at ``at_s`` (the look-ahead's start), as ``view`` shows it then: a
        running one keeps its placement, a waiting one its submit time and preemptions."""
        return cls(
            job_id=view.job_id,
            num_gpus=view.num_gpus,
            model=view.model,
            sensitivity=view.sensitivity,
            arrive_s=0.0,
            remaining_s=remaining_s,
            attained_gpu_s=view.attained_gpu_s(at_s),
            placement=view.placement if view.running else (),
            submit_rel_s=view.submit_s - at_s,
            changed_rel_s=view.changed_s - at_s,
            preemptions=0 if view.running else view.preemptions,
            type_speeds=view.type_speeds,
        )

    @classmethod
    def arriving(
        cls, job_id: str, arrival: Arrival, arrive_s: float, remaining_s: float
    ) -> PlannedJob:
        """``arrival`` arriving ``arrive_s`` after the look-ahead's start."""
        return cls(
            job_id=job_id,
            num_gpus=arrival.num_gpus,
            model=arrival.model,
            sensitivity=arrival.sensitivity,
            arrive_s=arrive_s,
            remaining_s=remaining_s,
            submit_rel_s=arrive_s,
            changed_rel_s=arrive_s,
            type_speeds=arrival.type_speeds,
        )


@dataclass(frozen=True, slots=True)
class Arrival:
    """A job as it arrived (what the look-ahead replays as the next horizon's arrivals)."""

    submit_s: float
    num_gpus: int
    model: str
    sensitivity: Sensitivity
    type_speeds: tuple[tuple[str, float], ...] = ()


def draw_remaining_s(
    runtimes: list[float], ran_s: float, prior_s: float, rng: random.Random
) -> float:
    """A remaining run time for a job that has run ``ran_s``: a finished job's run time drawn
    among those longer than ``ran_s`` (sorted ``runtimes``), less ``ran_s``; past all of them
    (or before any finished) an exponential draw with mean ``ran_s`` (or ``prior_s``)."""
    at = bisect.bisect_right(runtimes, ran_s)
    if at < len(runtimes):
        return max(runtimes[at + int(rng.random() * (len(runtimes) - at))] - ran_s, 1.0)
    mean = max(ran_s, 60.0) if runtimes else max(prior_s - ran_s, ran_s, 60.0)
    return max(rng.expovariate(1.0 / mean), 1.0)


def plan_jobs(
    snapshot: ClusterSnapshot,
    history: RunHistory,
    arrivals: list[Arrival],
    config: LookaheadConfig,
    rng: random.Random,
) -> list[PlannedJob]:
    """The jobs of one look-ahead from ``snapshot`` (running ones first, then the oldest
    ``max_jobs`` waiting), with remaining run times drawn from ``history``'s learnt run times,
    then ``arrivals`` of the last horizon shifted one horizon on (makespan: none)."""
    now = snapshot.now
    jobs: list[PlannedJob] = []
    queued = list(snapshot.queued)[: config.max_jobs]
    for view in (*snapshot.running, *queued):
        ran_s = view.attained_gpu_s(now) / view.num_gpus
        runtimes = history.runtimes_for(view.num_gpus)
        remaining = draw_remaining_s(runtimes, ran_s, history.prior_runtime_s, rng)
        jobs.append(PlannedJob.there(view, now, remaining))
    if config.target == "makespan":
        return jobs
    for i, arrival in enumerate(arrivals):
        at = arrival.submit_s + config.horizon_s - now
        if at <= 0.0 or at > config.horizon_s:
            continue
        runtimes = history.runtimes_for(arrival.num_gpus)
        remaining = draw_remaining_s(runtimes, 0.0, history.prior_runtime_s, rng)
        jobs.append(PlannedJob.arriving(f"lookahead-{i}", arrival, at, remaining))
    return jobs
