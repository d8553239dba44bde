"""A forecast of a cluster as it is: when each waiting job will start and each job will end under
a policy, simulated by this package's engine from the jobs there now (running ones where they
run, with the work they have left; waiting ones with theirs) and the jobs expected to come.

What the forecast knows of a job's work is what its caller tells it (``remaining_s``: an
estimate, never the job's true run time where that is unknown); the rest is the simulator's own
model (the perf model's speeds, the start-up model's set-ups). Times are seconds from the
forecast's instant (0): submit times before it are negative. The scheduler service makes its
start estimates and its what-if with it (:mod:`unstall.service.estimates`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from unstall.loop.jobs import Job, JobState
from unstall.sched.base import (
    ClusterLayout,
    ClusterSnapshot,
    Decision,
    Placement,
    Policy,
    Start,
    policy_capabilities,
)
from unstall.sim.congestion import CongestionSchedule
from unstall.sim.engine import Engine, EngineSettings
from unstall.sim.jobs import build_jobs
from unstall.sim.speed import SpeedModel
from unstall.sim.startup import SetupCharges, StartupModel

# A forecast stops this long (seconds) after its instant: a job not started by then has no
# estimate (a queue of weeks is past what an estimate can mean).
HORIZON_S = 30 * 86400.0
# The least work a job is given (seconds): an estimate past its end still leaves it some.
MIN_REMAINING_S = 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ForecastJob:
    """One job of a forecast. ``remaining_s``: its work left, in run seconds at its consolidated
    placement (an estimate); ``submit_s``: when it was submitted (relative: negative for a job
    there now); ``placement``: where it runs now (it keeps it), () for a waiting job;
    ``arrive_s``: for a job yet to come, when (> 0); None for a job there now."""

    job_id: str
    num_gpus: int
    model: str
    remaining_s: float
    submit_s: float = 0.0
    priority: int = 0
    placement: Placement = ()
    attained_gpu_s: float = 0.0
    preemptions: int = 0
    queued_since_s: float | None = None  # a waiting job's (relative); None: its submit time
    arrive_s: float | None = None
    pause_s: float = 0.0  # a running job's start-up or restore still to finish

    @property
    def present(self) -> bool:
        return self.arrive_s is None

    @property
    def waiting(self) -> bool:
        return self.present and not self.placement


@dataclass(frozen=True)
class Forecast:
    """What the forecast predicts (seconds from its instant). ``starts``: each waiting job that
    starts within the horizon; ``ends``: each job there now that ends within it. The figures
    are over the jobs there now: ``avg_jct_s`` from their submit to their end, ``avg_wait_s``
    the waiting ones' from their submit to their start, ``makespan_s`` when the last ends
    (inf where some job does not end within the horizon)."""

    policy: str
    starts: dict[str, float] = field(default_factory=dict)
    ends: dict[str, float] = field(default_factory=dict)
    avg_jct_s: float = math.nan
    avg_wait_s: float = math.nan
    makespan_s: float = math.nan
    moves: int = 0  # preemptions and migrations it predicts
    jobs: int = 0  # jobs there now
    rounds: int = 0


class Pinned:
    """A policy for a simulation that starts from a cluster as it is: its first round restarts
    the running jobs where they run (``starts``), then ``inner`` decides as it would. Its
    ``reset`` resets ``inner``, or calls ``reset`` instead (the look-ahead's Dally starts from
    what the real one learnt)."""

    def __init__(
        self,
        inner: Policy,
        starts: tuple[Start, ...],
        reset: Callable[[], None] | None = None,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        capabilities = policy_capabilities(inner)
        self.needs_oracle = capabilities.needs_oracle
        self.tick_s = capabilities.tick_s
        self._starts = starts
        self._reset = reset if reset is not None else inner.reset
        self._first = True

    def reset(self) -> None:
        self._reset()
        self._first = True

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        if self._first:
            self._first = False
            return Decision(starts=self._starts)
        return self.inner.decide(snapshot, rng)


def forecast(
    jobs: Sequence[ForecastJob],
    *,
    layout: ClusterLayout,
    speed: SpeedModel,
    policy: Policy,
    startup: StartupModel | None = None,
    restore_s: float = 0.0,
    horizon_s: float = HORIZON_S,
    seed: int = 0,
    next_tick_s: float | None = None,
) -> Forecast:
    """The forecast of ``jobs`` under ``policy`` (a fresh instance: it is reset and then learns
    only what the forecast shows it) on ``layout`` (see the module docstring). ``startup``:
    what each start and restore costs (None: starts are free, restores ``restore_s``); the
    running jobs pay nothing to go on. ``next_tick_s``: when the run forecast has its next tick
    round due (a policy with ``tick_s``), so that the forecast's ticks keep its phase."""
    ordered = sorted(jobs, key=lambda j: (not j.placement, j.arrive_s or 0.0))
    sim_jobs = build_jobs(
        job_ids=[j.job_id for j in ordered],
        # The engine's own arrival (below) queues them; submit times are the jobs' own.
        submit_s=[min(j.submit_s, _arrival(j)) for j in ordered],
        num_gpus=[j.num_gpus for j in ordered],
        duration_s=[max(j.remaining_s, MIN_REMAINING_S) for j in ordered],
        models=[j.model for j in ordered],
        speed=speed,
    )
    for job, plan in zip(sim_jobs, ordered, strict=True):
        job.priority = plan.priority
        job.attained_gpu_s = plan.attained_gpu_s
        if plan.placement:
            # It runs already: what is left of its start-up or restore, nothing more.
            job.startup_s = plan.pause_s
        else:
            job.preemptions = plan.preemptions  # a preempted job restores at its restart
            if plan.present:
                job.changed_s = (
                    plan.queued_since_s if plan.queued_since_s is not None else plan.submit_s
                )
    pinned = [j for j in ordered if j.placement]
    engine = Engine(
        layout=layout,
        speed=speed,
        policy=Pinned(policy, tuple(Start(j.job_id, j.placement) for j in pinned)),
        jobs=sim_jobs,
        congestion=CongestionSchedule(times_s=(0.0,), fractions=(0.0,)),
        settings=EngineSettings(
            restore_s=restore_s,
            tick_s=policy_capabilities(policy).tick_s,
            seed=seed,
            charges=None
            if startup is None
            else SetupCharges(model=startup, node_rack=layout.node_rack),
        ),
        arrivals_s=[_arrival(j) for j in ordered],
    )
    if next_tick_s is not None and math.isfinite(next_tick_s):
        engine.core.next_tick_s = max(next_tick_s, 0.0)
    outcome = engine.run(until_s=horizon_s)
    return _summary(policy.name, sim_jobs, ordered, outcome.rounds)


def _arrival(job: ForecastJob) -> float:
    """When the engine queues it: the running jobs at 0 (to be restarted where they run), the
    waiting ones just after (so that the first round holds the running ones alone)."""
    if job.arrive_s is not None:
        return job.arrive_s
    return 0.0 if job.placement else 1e-6


def _summary(name: str, sim_jobs: list[Job], plans: list[ForecastJob], rounds: int) -> Forecast:
    starts: dict[str, float] = {}
    ends: dict[str, float] = {}
    jcts: list[float] = []
    waits: list[float] = []
    last = 0.0
    moves = 0
    present = 0
    for job, plan in zip(sim_jobs, plans, strict=True):
        moves += job.migrations + job.preemptions - (0 if plan.placement else plan.preemptions)
        if not plan.present:
            continue
        present += 1
        if plan.waiting and job.first_start_s >= 0:
            starts[plan.job_id] = job.first_start_s
            waits.append(job.first_start_s - plan.submit_s)
        if job.state == JobState.DONE:
            ends[plan.job_id] = job.finish_s
            jcts.append(job.finish_s - plan.submit_s)
            last = max(last, job.finish_s)
        else:
            last = math.inf
    return Forecast(
        policy=name,
        starts=starts,
        ends=ends,
        avg_jct_s=sum(jcts) / len(jcts) if jcts and last < math.inf else math.nan,
        avg_wait_s=sum(waits) / len(waits) if waits else math.nan,
        makespan_s=last if present else 0.0,
        moves=moves,
        jobs=present,
        rounds=rounds,
    )
