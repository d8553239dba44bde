"""The scheduling core: one run's jobs and rounds, shared by the simulator, the live backend and
the service.

The core is the only writer of a job's lifecycle: the state machine (arrive, start, preempt,
migrate, finish, fail, requeue, cancel) with its guards, the views policies read, the GPUs held.
It runs the rounds: the policy's reset and its crash wrapping, one frozen snapshot per round,
the decision's checks, timers, ticks and telemetry, and emits each transition as a
:class:`~unstall.loop.events.JobEvent` to whoever listens (the service stores them).

Time and progress come from a :class:`~unstall.loop.driver.Driver`; :meth:`SchedulingCore.step`
is one instant: the driver says when it is, the core queues the arrivals due, the driver
reports what ended, the core fires the timers due and, when anything calls for it, runs a round.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from unstall.errors import UnstallError
from unstall.loop.checks import PolicyError, check_decision_shape, check_placement
from unstall.loop.driver import Driver, StopOutcome
from unstall.loop.events import JobEvent, RoundRecord
from unstall.loop.failures import PolicyCrashError, policy_crash
from unstall.loop.jobs import STATE_WORDS, ClusterState, Job, JobState, SimInvariantError
from unstall.loop.timeline import Timeline
from unstall.loop.views import RoundView, SpreadViews
from unstall.sched.base import (
    ClusterLayout,
    ClusterSnapshot,
    Decision,
    JobView,
    Placement,
    Policy,
    policy_capabilities,
)

# Rounds at one instant before the policy is stopped as stuck: only timers set for the instant
# itself call it again without time moving on, and a policy that keeps setting them would
# loop there for ever (a handful is normal: a timer that falls due as it is set).
MAX_ROUNDS_AT_ONE_INSTANT = 1000


@dataclass(frozen=True, kw_only=True)
class CoreSettings:
    """How the core runs: extra rounds while jobs wait (``tick_s``; None: only on events), the
    seed of the policy's generator, how many failures in a row without progress give a job up
    (None: never), and whether each round's timing is kept (live runs and the service)."""

    tick_s: float | None = None
    seed: int = 0
    max_failures: int | None = None
    record_rounds: bool = False


@dataclass(slots=True)
class RunOutcome:
    """What a run hands to the metrics: the jobs as they ended, the timeline, counts."""

    jobs: list[Job]
    timeline: Timeline
    events: int
    rounds: int
    preemptions: int
    migrations: int
    failures: int = 0


class SchedulingCore:
    """A run's jobs and rounds under one policy (see the module docstring)."""

    def __init__(
        self,
        *,
        layout: ClusterLayout,
        policy: Policy,
        jobs: list[Job],
        settings: CoreSettings,
        on_event: Callable[[JobEvent], None] | None = None,
        arrivals_s: Sequence[float] | None = None,
    ) -> None:
        self.layout = layout
        self.policy = policy
        self.jobs = jobs
        self.by_id = {job.job_id: job for job in jobs}
        if len(self.by_id) != len(jobs):
            raise SimInvariantError("job ids must be unique")
        self.settings = settings
        self.on_event = on_event
        self.driver: Driver | None = None
        self.cluster = ClusterState(layout)
        self.queued: dict[int, Job] = {}
        self.running: dict[int, Job] = {}
        self.queued_views: dict[int, JobView] = {}
        self.running_views: dict[int, JobView] = {}
        self.spread_running: set[int] = set()  # running jobs placed over several nodes
        self.spread_views = SpreadViews(self.spread_running, self.running_views)
        self.timeline = Timeline()
        self.round_records: list[RoundRecord] = []
        self.rng = random.Random(settings.seed)
        self.oracle = policy_capabilities(policy).needs_oracle
        # Arrivals: (time, job index), ascending; the service adds submissions as they come. A
        # job arrives at its submit time unless ``arrivals_s`` says otherwise (a look-ahead
        # queues jobs submitted before it began, with their own submit times).
        times = [job.submit_s for job in jobs] if arrivals_s is None else list(arrivals_s)
        if len(times) != len(jobs):
            raise SimInvariantError(f"{len(times)} arrival times for {len(jobs)} jobs")
        order = sorted(range(len(jobs)), key=times.__getitem__)
        self._arrivals: list[tuple[float, int]] = [(times[i], i) for i in order]
        self._next_arrival = 0
        self._timers: list[tuple[float, int, str]] = []
        self._timer_seq = 0
        self._tick_at = math.inf
        self._telemetry_last: dict[str, float] = {}
        self._finished_since_round: list[JobView] = []
        self._round_at = -math.inf  # the instant of the latest round, and its rounds so far
        self._rounds_at_instant = 0
        self._reset_done = False
        self.deciding_since: float | None = None  # monotonic start of a running decide()
        self.rounds = 0
        self.events = 0
        self.preemptions = 0
        self.migrations = 0
        self.failures = 0

    # --- the loop --------------------------------------------------------------------------------

    def attach(self, driver: Driver) -> None:
        self.driver = driver

    def run(self, until_s: float = math.inf) -> RunOutcome:
        """Instants until the driver has none left or the next one is after ``until_s``."""
        self.reset_policy()
        while self.step(until_s):
            pass
        return self.outcome()

    def reset_policy(self) -> None:
        """The policy's ``reset``, once a run; an exception of its own is a crash of it."""
        if self._reset_done:
            return
        self._reset_done = True
        try:
            self.policy.reset()
        except UnstallError:
            raise
        except Exception as exc:
            raise self._policy_failed(exc) from exc

    def step(self, until_s: float = math.inf) -> bool:
        """One instant (see the module docstring); False when the run is over or the next
        instant is after ``until_s``."""
        driver = self._driver()
        now = driver.next_instant(self.due_s(), until_s)
        if now == math.inf or now > until_s:
            return False
        wake = self._arrivals_due(now)
        found = driver.collect(now)
        self.events += found.events
        fired = self._timers_due(now)
        if fired:
            wake = True
        if self._tick_at <= now:
            self._tick_at = math.inf
            self.events += 1
            wake = True
        wake = wake or found.wake
        if not (wake or found.changed):
            return True  # only superseded events: nothing changed at this instant
        if wake:
            self.round(now, tuple(fired))
        driver.close_instant(now)
        self._sample(driver.now())
        tick = self.settings.tick_s
        if tick and self.queued and self._tick_at == math.inf:
            self._tick_at = now + tick
        return True

    def due_s(self) -> float:
        """When the core next needs a round of its own: an arrival, a timer or a tick."""
        due = self._tick_at
        if self._timers and self._timers[0][0] < due:
            due = self._timers[0][0]
        if self._next_arrival < len(self._arrivals):
            at = self._arrivals[self._next_arrival][0]
            if at < due:
                due = at
        return due

    @property
    def next_tick_s(self) -> float:
        """When the next tick round is due (inf: none is)."""
        return self._tick_at

    @next_tick_s.setter
    def next_tick_s(self, at_s: float) -> None:
        # A simulation that goes on from another run's state (a forecast) keeps its ticks'
        # phase: a policy that acts on ticks (Tiresias) acts when the real one would.
        self._tick_at = at_s

    @property
    def arrivals_left(self) -> int:
        return len(self._arrivals) - self._next_arrival

    def add_job(self, job: Job, at_s: float) -> None:
        """A job that arrives at ``at_s`` (a submission to a running service, or a job found
        again after a restart): it joins the run's jobs and is queued when its time comes."""
        if job.job_id in self.by_id:
            raise SimInvariantError(f"job {job.job_id} is already in the run")
        if job.index != len(self.jobs):
            raise SimInvariantError(f"job {job.job_id}: index {job.index}, not {len(self.jobs)}")
        self.jobs.append(job)
        self.by_id[job.job_id] = job
        bisect.insort(self._arrivals, (at_s, job.index), lo=self._next_arrival)

    def _arrivals_due(self, now: float) -> bool:
        arrivals = self._arrivals
        arrived = False
        while self._next_arrival < len(arrivals) and arrivals[self._next_arrival][0] <= now:
            at, index = arrivals[self._next_arrival]
            self._next_arrival += 1
            self.events += 1
            self.arrive(self.jobs[index], at)
            arrived = True
        return arrived

    def _timers_due(self, now: float) -> list[str]:
        fired: list[str] = []
        timers = self._timers
        while timers and timers[0][0] <= now:
            fired.append(heapq.heappop(timers)[2])
            self.events += 1
        return fired

    def _driver(self) -> Driver:
        if self.driver is None:
            raise SimInvariantError("the scheduling core has no driver: attach() one first")
        return self.driver

    # --- one scheduling round --------------------------------------------------------------------

    def round(self, now: float, fired: tuple[str, ...]) -> None:
        """Snapshot, decide, check and apply: one scheduling round at ``now``."""
        self.rounds += 1
        if now != self._round_at or self._finished_since_round:
            # Time moved on, or jobs finished (very short ones may finish at the instant they
            # start, round after round): only rounds that timers alone asked for count.
            self._round_at, self._rounds_at_instant = now, 0
        self._rounds_at_instant += 1
        if self._rounds_at_instant > MAX_ROUNDS_AT_ONE_INSTANT:
            raise PolicyError(
                self.policy.name,
                None,
                f"decide() was called {MAX_ROUNDS_AT_ONE_INSTANT} times at {now} s without time "
                f"moving on: a timer set for now (SetTimer at_s == snapshot.now, here "
                f"{fired[0] if fired else ''!r}) calls it again at once; set timers for a later "
                "time",
            )
        driver = self._driver()
        driver.before_round(now)
        # Views change only when their job does; the transitions keep them up to date. Live
        # views, not copies (see ClusterSnapshot), valid until ``decide`` returns.
        queued = RoundView(self.queued_views.values(), "queued")
        running = RoundView(self.running_views.values(), "running")
        spread = RoundView(self.spread_views, "spread_running")
        snapshot = ClusterSnapshot(
            now=now,
            layout=self.layout,
            free_by_node=tuple(self.cluster.free_by_node),
            free_by_rack=tuple(self.cluster.free_by_rack),
            queued=queued,
            running=running,
            congestion=driver.congestion(),
            spread_jobs_by_node=tuple(self.cluster.spread_by_node),
            spread_running=spread,
            finished=tuple(self._finished_since_round),
            fired_timers=fired,
        )
        self._finished_since_round.clear()
        began = self.deciding_since = time.monotonic()
        try:
            decision = self.policy.decide(snapshot, self.rng)
            self.deciding_since = None
        except UnstallError:
            raise  # already one line naming what was wrong (a PolicyError, a config's field)
        except Exception as exc:
            raise self._policy_failed(exc) from exc
        finally:
            for view in (queued, running, spread):
                view.expire()
        decided = time.monotonic()
        decision = self.apply(decision, now)
        if self.settings.record_rounds:
            self.round_records.append(
                RoundRecord(
                    time_s=now,
                    decide_wall_s=decided - began,
                    apply_wall_s=time.monotonic() - decided,
                    starts=len(decision.starts),
                    preemptions=len(decision.preemptions),
                    migrations=len(decision.migrations),
                )
            )

    def snapshot(self, now: float) -> ClusterSnapshot:
        """The cluster as a round at ``now`` would show it, with copies of the views (kept
        past a round: what a backend asks a policy between rounds, e.g. its wait reasons)."""
        driver = self._driver()
        return ClusterSnapshot(
            now=now,
            layout=self.layout,
            free_by_node=tuple(self.cluster.free_by_node),
            free_by_rack=tuple(self.cluster.free_by_rack),
            queued=tuple(self.queued_views.values()),
            running=tuple(self.running_views.values()),
            congestion=driver.congestion(),
            spread_jobs_by_node=tuple(self.cluster.spread_by_node),
            spread_running=tuple(self.spread_views),
        )

    def _policy_failed(self, exc: Exception) -> PolicyCrashError:
        return policy_crash(self.policy, exc)

    def apply(self, decision: object, decided_at: float) -> Decision:
        """Check ``decision`` and carry it out: preemptions, then migrations, then starts (so
        that starts may use the GPUs the others free), then timers and telemetry. Returns the
        decision as checked."""
        name = self.policy.name
        checked = check_decision_shape(name, decision)
        at = self._driver().now()
        preempting = [
            self._lookup(p.job_id, JobState.RUNNING, "preempt") for p in checked.preemptions
        ]
        moving = set(job.index for job in preempting)
        migrating = []
        for m in checked.migrations:
            job = self._lookup(m.job_id, JobState.RUNNING, "migrate")
            if job.index in moving:  # preempted by the same decision: queued by then
                raise PolicyError(
                    name, job.job_id, _cannot("migrate", JobState.QUEUED, JobState.RUNNING)
                )
            migrating.append((job, m.placement))
        if preempting or migrating:
            self._driver().stopping([*preempting, *(job for job, _ in migrating)])
        for job in preempting:
            self.preempt(job, at)
        for job, placement in migrating:
            self.migrate(job, placement, at)
        for s in checked.starts:
            self.start(self._lookup(s.job_id, JobState.QUEUED, "start"), s.placement, at)
        for timer in checked.timers:
            if timer.at_s < decided_at:
                raise PolicyError(
                    name,
                    None,
                    f"timer {timer.key!r} set for {timer.at_s} s, before now ({decided_at} s)",
                )
            self._timer_seq += 1
            heapq.heappush(self._timers, (float(timer.at_s), self._timer_seq, timer.key))
        for key, value in checked.telemetry:
            if self._telemetry_last.get(key) != value:  # a step function: record changes only
                self._telemetry_last[key] = value
                self.timeline.telemetry.append((decided_at, key, value))
        return checked

    def _lookup(self, job_id: str, state: JobState, verb: str) -> Job:
        job = self.by_id.get(job_id)
        if job is None or job.state != state:
            found = "not in the trace" if job is None else STATE_WORDS[job.state]
            raise PolicyError(self.policy.name, job_id, _cannot_text(verb, found, state))
        return job

    # --- transitions (the only writers of a job's lifecycle) -------------------------------------

    def arrive(self, job: Job, now: float) -> None:
        if job.state != JobState.PENDING:
            raise SimInvariantError(f"job {job.job_id} arrived twice")
        job.state = JobState.QUEUED
        job.queued_since_s = now
        self._queue(job)
        self._emit(now, job, "arrived")

    def start(self, job: Job, placement: Placement, now: float) -> None:
        if now < job.submit_s:
            raise SimInvariantError(f"job {job.job_id} started before it arrived")
        placement = check_placement(self.policy.name, job, placement, self.cluster)
        self.cluster.allocate(job, placement)
        del self.queued[job.index]
        del self.queued_views[job.index]
        self.running[job.index] = job
        job.state = JobState.RUNNING
        job.placement = placement
        if job.first_start_s < 0:
            job.first_start_s = now
        job.queued_total_s += now - job.queued_since_s
        job.changed_s = now
        self._emit(now, job, "started", placement_text(placement))
        self._run_on(job, placement, now, migrating=False)

    def migrate(self, job: Job, placement: Placement, now: float) -> None:
        if self.running.get(job.index) is not job:
            return  # it ended (a node's loss) while the decision was carried out
        outcome = self._driver().stop(job, now, "migrate")
        self._release(job, outcome.at_s)
        if outcome.kind != "stopped":
            self._settle(job, outcome, "migrate")
            return  # it finished or failed before it could be moved
        at = outcome.at_s
        placement = check_placement(self.policy.name, job, placement, self.cluster)
        self.cluster.allocate(job, placement)
        self.running[job.index] = job
        job.placement = placement
        job.migrations += 1
        self.migrations += 1
        self._emit(at, job, "migrated", placement_text(placement))
        self._run_on(job, placement, at, migrating=True)

    def preempt(self, job: Job, now: float) -> None:
        if self.running.get(job.index) is not job:
            return  # it ended (a node's loss) while the decision was carried out
        outcome = self._driver().stop(job, now, "preempt")
        self._release(job, outcome.at_s)
        self._settle(job, outcome, "preempt")

    def cancel(self, job: Job, now: float) -> None:
        """Cancel a queued or running job (a running one is stopped first; one that finished
        meanwhile stays finished)."""
        if job.state == JobState.QUEUED:
            del self.queued[job.index]
            del self.queued_views[job.index]
        elif job.state == JobState.RUNNING:
            driver = self._driver()
            driver.stopping([job])
            outcome = driver.stop(job, now, "cancel")
            self._release(job, outcome.at_s)
            if outcome.kind == "finished":
                self.finish(job, outcome.at_s)
                return
            now = outcome.at_s
        elif job.state == JobState.PENDING:
            self._arrivals.remove(next(a for a in self._arrivals if a[1] == job.index))
        else:
            raise SimInvariantError(f"job {job.job_id} is {STATE_WORDS[job.state]}: not cancelled")
        job.state = JobState.CANCELLED
        job.placement = ()
        self._emit(now, job, "cancelled")

    def finish(self, job: Job, now: float) -> None:
        """The job's work is done (its driver saw the segment end); it leaves its GPUs."""
        view = self.running_views.get(job.index)
        self._finished_since_round.append(view if view is not None else job.make_view(False))
        if job.index in self.running:
            self._release(job, now)
        job.done_iters = job.work_iters
        job.state = JobState.DONE
        job.finish_s = now
        self._emit(now, job, "finished")

    def fail(self, job: Job, now: float, reason: str, *, progressed: bool, own: bool) -> None:
        """A segment of the job failed: back to the queue from its last checkpoint, or out of
        the run (FAILED) after ``max_failures`` failures of its own in a row with no checkpoint
        gained (a job that cannot run must not hold GPUs in a loop of restarts)."""
        if job.index in self.running:
            self._release(job, now)
        elif job.index in self.queued:  # failed as it was being started
            del self.queued[job.index]
            del self.queued_views[job.index]
        self.failures += 1
        job.failures += 1
        job.error = reason
        job.failed_in_a_row = 0 if progressed else job.failed_in_a_row + int(own)
        limit = self.settings.max_failures
        if limit is not None and job.failed_in_a_row >= limit:
            job.state = JobState.FAILED
            job.placement = ()
            self._emit(now, job, "gave_up", reason)
            return
        self._emit(now, job, "failed", reason)
        self._requeue(job, now, preempted=False)

    def withdraw_node(self, node: int) -> None:
        """A node left the cluster: its GPUs are lost to the policies for good."""
        self.cluster.withdraw(node)

    def _settle(self, job: Job, outcome: StopOutcome, verb: str | None) -> None:
        """A released job's end as its driver saw it."""
        at = outcome.at_s
        if outcome.kind == "finished":
            self.finish(job, at)
        elif outcome.kind == "failed":
            self.fail(job, at, outcome.reason, progressed=outcome.progressed, own=outcome.own)
        else:
            self._requeue(job, at, preempted=verb == "preempt")

    def settle(self, job: Job, outcome: StopOutcome) -> None:
        """A running job whose segment ended by itself (a driver's ``collect``)."""
        self._release(job, outcome.at_s)
        self._settle(job, outcome, None)

    def _release(self, job: Job, now: float) -> None:
        """The job leaves its GPUs: its service so far is counted with its placement."""
        self.spread_running.discard(job.index)
        job.attained_gpu_s += (now - job.changed_s) * job.num_gpus
        job.changed_s = now
        self.cluster.release(job.placement)
        del self.running[job.index]
        self.running_views.pop(job.index, None)

    def _requeue(self, job: Job, now: float, *, preempted: bool) -> None:
        job.state = JobState.QUEUED
        job.placement = ()
        job.queued_since_s = now
        if preempted:
            job.preemptions += 1
            self.preemptions += 1
            self._emit(now, job, "preempted")
        self._queue(job)

    def _queue(self, job: Job) -> None:
        self.queued[job.index] = job
        self.queued_views[job.index] = job.make_view(self.oracle)

    def _run_on(self, job: Job, placement: Placement, now: float, *, migrating: bool) -> None:
        """The driver begins the job's segment; its view follows unless that failed at once."""
        self._driver().launch(job, placement, now, migrating=migrating)
        if job.state == JobState.RUNNING and self.running.get(job.index) is job:
            if len(placement) > 1:
                self.spread_running.add(job.index)
            self.running_views[job.index] = job.make_view(self.oracle)

    def refresh_view(self, job: Job) -> None:
        """A running job's progress rate changed: an oracle's view carries it."""
        if self.oracle:
            self.running_views[job.index] = job.make_view(True)

    def set_view(self, job: Job, view: JobView) -> None:
        """A driver's own view of a queued or running job (a wall clock's estimate of an
        oracle's)."""
        if job.index in self.running_views:
            self.running_views[job.index] = view
        elif job.index in self.queued_views:
            self.queued_views[job.index] = view

    def _emit(self, now: float, job: Job, kind: str, detail: str = "") -> None:
        if self.on_event is not None:
            self.on_event(JobEvent(time_s=now, job_id=job.job_id, kind=kind, detail=detail))

    # --- results -------------------------------------------------------------------------------

    def _sample(self, now: float) -> None:
        tl = self.timeline
        congestion = self._driver().congestion()
        if tl.time_s and tl.time_s[-1] == now:
            tl.busy_gpus[-1] = self.cluster.used_gpus
            tl.queued[-1] = len(self.queued)
            tl.congestion[-1] = congestion
            return
        tl.time_s.append(now)
        tl.busy_gpus.append(self.cluster.used_gpus)
        tl.queued.append(len(self.queued))
        tl.congestion.append(congestion)

    def outcome(self) -> RunOutcome:
        return RunOutcome(
            jobs=self.jobs,
            timeline=self.timeline,
            events=self.events,
            rounds=self.rounds,
            preemptions=self.preemptions,
            migrations=self.migrations,
            failures=self.failures,
        )


def _cannot(verb: str, found: JobState, needed: JobState) -> str:
    return _cannot_text(verb, STATE_WORDS[found], needed)


def _cannot_text(verb: str, found: str, needed: JobState) -> str:
    return f"cannot {verb} it: the job is {found}, only a {STATE_WORDS[needed]} job can"


def placement_text(placement: Placement) -> str:
    """``0:4`` or ``0:2+1:2``: node and GPUs of each part of a placement."""
    return "+".join(f"{node}:{gpus}" for node, gpus in placement)
