"""The service's start and end estimates, and its what-if: forecasts of the cluster as it is
(:mod:`unstall.sim.forecast`) under the serving policy or another.

A forecast starts from what the scheduler holds: the running jobs where they run with the work
they have left, the queue in its order (the first ``max_jobs``), and the arrivals of the last
``replay_window_s`` over again as the next ones' (their sizes and models). What a job's work is
comes from what is known before it ends, never from its true run time:

1. the user's ``expected_duration_s`` (as Slurm's time limit);
2. else its ``iterations`` at the perf model's speed (the work it declared);
3. else the mean run time of the finished jobs of the same model and size (then size, then
   any), those longer than what it has run already (:class:`RunTimes`); before any job
   finished, ``prior_runtime_s``.

In emulated compute a job's ``duration_s`` stands for the run time a real job does not declare:
estimates never read it. The scheduler thread takes a :class:`ForecastInput` when jobs changed
(at most every ``period_s``, and every ``refresh_s`` while jobs wait); the :class:`Estimator`'s
thread runs the forecast and publishes :class:`Estimates` in wall time.

:func:`backfill_starts` is the yardstick of ``benchmarks/service_eta.py``: the estimates a
Slurm-style backfill planner makes from the same durations (first fit in time over a GPU count).
"""

from __future__ import annotations

import bisect
import copy
import math
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from unstall.loop import Job
from unstall.sched.base import ClusterLayout, Policy
from unstall.sim.forecast import Forecast, ForecastJob, forecast
from unstall.sim.speed import SpeedModel
from unstall.sim.startup import StartupModel


@dataclass(frozen=True, kw_only=True)
class EstimateSettings:
    """How the service makes its estimates (see the module docstring)."""

    period_s: float = 2.0  # wall seconds between two forecasts at least
    # ... and at least this many times the latest forecast's own time: the forecasts take at
    # most a share of a core from the API and the scheduler, whatever the queue's length.
    spacing: float = 5.0
    refresh_s: float = 30.0  # wall seconds between forecasts at most, while jobs wait
    max_jobs: int = 2000  # waiting jobs forecast, in queue order; later ones get none
    prior_runtime_s: float = 3600.0  # a job's run time before any job of the service finished
    replay_window_s: float = 3600.0  # the service's seconds of arrivals replayed; 0: none


class RunTimes:
    """Run times (seconds at the consolidated placement) of finished jobs, by model and GPUs:
    what a job that did not say how long it runs is expected to (see the module docstring).
    A kind (model and size, or size) counts once ``min_samples`` of its jobs finished: the
    mean of one or two run times says less than the mean of all."""

    def __init__(self, prior_s: float, min_samples: int = 3) -> None:
        self.prior_s = prior_s
        self.min_samples = min_samples
        self._by_key: dict[tuple[str, int], list[float]] = {}
        self._by_gpus: dict[int, list[float]] = {}
        self._all: list[float] = []

    def __len__(self) -> int:
        return len(self._all)

    def add(self, model: str, gpus: int, run_s: float) -> None:
        for runs in (
            self._by_key.setdefault((model, gpus), []),
            self._by_gpus.setdefault(gpus, []),
            self._all,
        ):
            bisect.insort(runs, run_s)

    def total_s(self, model: str, gpus: int, ran_s: float = 0.0) -> float:
        """The run time expected of a job that has run ``ran_s``: the mean of its kind's
        finished jobs that ran longer (its model and size, else its size, else any, each with
        ``min_samples`` finished); past all of
        them, twice what it has run; before any finished, the prior (or twice what it ran).
        The mean, not the median: a waiting job's start is a sum of the run times ahead of it,
        and run times are skewed (a median would put every start too early)."""
        for runs in (self._by_key.get((model, gpus)), self._by_gpus.get(gpus), self._all):
            if runs and (len(runs) >= self.min_samples or runs is self._all):
                longer = runs[bisect.bisect_right(runs, ran_s) :]
                return statistics.fmean(longer) if longer else 2.0 * ran_s
        return max(self.prior_s, 2.0 * ran_s)


@dataclass(frozen=True, kw_only=True)
class ForecastInput:
    """The scheduler's state as a forecast takes it: its jobs, its time (``now_s``, the core's
    seconds) and the wall time then, and each job's expected run time."""

    now_s: float
    wall_at_now: float
    speedup: float
    jobs: tuple[ForecastJob, ...]
    run_s: Mapping[str, float]  # expected run time of each job there now (consolidated s)
    next_tick_s: float = math.inf  # the serving policy's next tick round, from now

    def wall(self, seconds: float) -> float | None:
        """Wall time (seconds since the epoch) of a forecast's time (seconds from its instant,
        the core's); None for one that never comes (inf)."""
        return self.wall_at_now + seconds / self.speedup if math.isfinite(seconds) else None

    def walls(self, times: Mapping[str, float]) -> dict[str, float]:
        """:meth:`wall` of each job's time (a forecast's starts or ends: all finite)."""
        return {job_id: self.wall_at_now + s / self.speedup for job_id, s in times.items()}


@dataclass(frozen=True)
class Estimates:
    """The latest forecast's answers in wall time (seconds since the epoch): ``starts`` of
    waiting jobs, ``ends`` of every job there then; ``run_s``: each job's expected run time."""

    made_at: float = 0.0
    starts: Mapping[str, float] = field(default_factory=dict)
    ends: Mapping[str, float] = field(default_factory=dict)
    run_s: Mapping[str, float] = field(default_factory=dict)
    seconds: float = 0.0  # wall seconds the forecast took


def expected_run_s(job: Job, declared_s: float | None, runtimes: RunTimes, ran_s: float) -> float:
    """A job's whole run time as the estimates expect it (see the module docstring)."""
    if declared_s is not None:
        return declared_s
    return runtimes.total_s(job.model, job.num_gpus, ran_s)


def capture(
    *,
    now_s: float,
    running: Iterable[Job],
    queued: Sequence[Job],
    done_iters: Callable[[Job], float],
    declared_s: Mapping[str, float | None],
    runtimes: RunTimes,
    arrivals: Iterable[tuple[float, int, str, int]],
    settings: EstimateSettings,
) -> tuple[list[ForecastJob], dict[str, float]]:
    """The forecast's jobs (relative to ``now_s``) and each present one's expected run time:
    the running jobs, the first ``max_jobs`` of ``queued`` (in queue order), and the arrivals
    ``(submit_s, gpus, model, priority)`` of the last window shifted one window on (the latest
    ``max_jobs``)."""
    jobs: list[ForecastJob] = []
    run_s: dict[str, float] = {}
    for job in (*running, *queued[: settings.max_jobs]):
        ran_s = done_iters(job) * job.cons_iter_s
        total = expected_run_s(job, declared_s.get(job.job_id), runtimes, ran_s)
        run_s[job.job_id] = total
        jobs.append(
            ForecastJob(
                job_id=job.job_id,
                num_gpus=job.num_gpus,
                model=job.model,
                remaining_s=max(total - ran_s, 0.0),
                submit_s=job.submit_s - now_s,
                priority=job.priority,
                placement=job.placement,
                attained_gpu_s=job.attained_gpu_s,
                preemptions=job.preemptions,
                queued_since_s=None if job.placement else job.changed_s - now_s,
                pause_s=max(0.0, job.paused_until_s - now_s) if job.placement else 0.0,
            )
        )
    window = settings.replay_window_s
    if window > 0:
        # The latest ``max_jobs`` of them at most: a burst of thousands says no more of the next
        # hour than its last ones, and each costs the forecast as a waiting job does.
        recent = list(arrivals)[-settings.max_jobs :]
        for i, (submit_s, gpus, model, priority) in enumerate(recent):
            at = submit_s + window - now_s
            if 0.0 < at <= window:
                jobs.append(
                    ForecastJob(
                        job_id=f"forecast-arrival-{i}",
                        num_gpus=gpus,
                        model=model,
                        remaining_s=runtimes.total_s(model, gpus),
                        submit_s=at,
                        priority=priority,
                        arrive_s=at,
                    )
                )
    return jobs, run_s


def forecast_policy(policy: Policy, template: Policy | None) -> Policy:
    """A fresh policy to forecast ``policy`` with: its ``forecast_policy()`` where it has one (a
    cheaper stand-in: the look-ahead Dally forecasts with the setting it uses now), else a copy
    of ``template`` (``policy`` as it was before it ran: a running policy is not copied while
    its thread changes it; a policy not yet run is its own); the forecast resets it. A
    TypeError where there is no template (the policy could not be copied)."""
    stand_in = getattr(policy, "forecast_policy", None)
    if callable(stand_in):
        return stand_in()
    if template is None:
        raise TypeError(f"policy {policy.name!r} cannot be copied for a forecast")
    return copy.deepcopy(template)


class Estimator:
    """Forecasts in a thread of their own (see the module docstring)."""

    def __init__(
        self,
        *,
        layout: ClusterLayout,
        speed: SpeedModel,
        policy: Policy,
        startup: StartupModel | None,
        restore_s: float,
        settings: EstimateSettings,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.layout = layout
        self.speed = speed
        self.policy = policy
        # The policy before it runs (see forecast_policy); None where it cannot be copied (it
        # holds a lock, a file): the service runs it all the same, without estimates.
        self.template: Policy | None = None
        try:
            self.template = copy.deepcopy(policy)
        except Exception as exc:
            (log or (lambda _text: None))(f"estimates: the policy cannot be copied ({exc})")
        self.startup = startup
        self.restore_s = restore_s
        self.settings = settings
        self.log = log or (lambda _text: None)
        self.estimates = Estimates()
        # Each job's first estimated start (wall): kept after it starts, to measure them by.
        self.first_starts: dict[str, float] = {}
        self._input: ForecastInput | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # the speed model's caches are shared with what-ifs
        self.failed = ""  # the latest forecast's error, where it failed

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="unstall-estimates", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def request(self, state: ForecastInput) -> None:
        """Forecast ``state`` next (a newer request replaces one not yet taken)."""
        self._input = state
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            state, self._input = self._input, None
            if state is None or self._stop.is_set():
                continue
            try:
                self.estimates = self.estimate(state)
                self.failed = ""
            except Exception as exc:  # an estimate is advice: the service goes on without it
                if not self.failed:
                    self.log(f"estimates: the forecast failed: {exc}")
                self.failed = str(exc)

    def estimate(self, state: ForecastInput) -> Estimates:
        began = time.perf_counter()
        result = self.run(state, forecast_policy(self.policy, self.template), serving=True)
        starts = state.walls(result.starts)
        for job_id, at in starts.items():
            self.first_starts.setdefault(job_id, at)
        return Estimates(
            made_at=time.time(),
            starts=starts,
            ends=state.walls(result.ends),
            run_s=dict(state.run_s),
            seconds=time.perf_counter() - began,
        )

    def run(self, state: ForecastInput, policy: Policy, *, serving: bool = False) -> Forecast:
        """One forecast of ``state`` under ``policy`` (a fresh one); ``serving``: the serving
        policy's, whose ticks keep their phase."""
        with self._lock:
            return forecast(
                state.jobs,
                layout=self.layout,
                speed=self.speed,
                policy=policy,
                startup=self.startup,
                restore_s=self.restore_s,
                next_tick_s=state.next_tick_s if serving else None,
            )


def arrivals_window(
    arrivals: deque[tuple[float, int, str, int]], now_s: float, window_s: float
) -> None:
    """Drop the arrivals older than one window from ``arrivals`` (oldest first)."""
    while arrivals and arrivals[0][0] < now_s - window_s:
        arrivals.popleft()


def backfill_starts(
    *,
    total_gpus: int,
    running: Iterable[tuple[int, float]],
    queued: Iterable[tuple[str, int, float]],
) -> dict[str, float]:
    """Start times a Slurm-style backfill planner gives the ``queued`` jobs ``(id, GPUs, run
    seconds)`` in order, with the ``running`` ones ``(GPUs, seconds until their end)``: each
    takes the earliest time from now (0) at which its GPUs are free for its whole run, around
    the reservations of the jobs before it (conservative backfill, over a GPU count)."""
    # The free GPUs as a step function: ``times[i]`` on, ``free[i]`` GPUs are free.
    times = [0.0]
    free = [total_gpus]

    def split(at: float) -> int:
        i = bisect.bisect_right(times, at) - 1
        if times[i] != at:
            times.insert(i + 1, at)
            free.insert(i + 1, free[i])
            i += 1
        return i

    def take(start: float, end: float, gpus: int) -> None:
        first = split(start)
        last = split(end) if end < math.inf else len(times)
        for k in range(first, last):
            free[k] -= gpus

    for gpus, left_s in running:
        take(0.0, max(left_s, 0.0), gpus)
    starts: dict[str, float] = {}
    for job_id, gpus, run_s in queued:
        if gpus > total_gpus:
            continue
        for i, at in enumerate(times):
            if free[i] < gpus:
                continue
            end = at + run_s
            # Enough GPUs over [at, end): every step starting before its end has them.
            j = i
            while j < len(times) and times[j] < end and free[j] >= gpus:
                j += 1
            if j == len(times) or times[j] >= end:
                starts[job_id] = at
                take(at, end, gpus)
                break
    return starts
