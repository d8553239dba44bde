"""The event loop: arrivals, completions, timers and congestion changes drive scheduling rounds.

After all events of one instant are handled, the policy sees one snapshot and returns one
decision; the engine checks and applies it, re-shares the network links that changed and
re-plans the finish of every job whose iteration time changed.

Jobs off shared links have one finish event each in the queue. Jobs on shared links, whose
speeds change with every congestion change and every start or finish on their links, are
re-planned in bulk over arrays (:class:`~unstall.sim.network_jobs.NetworkJobs`), and the earliest
of their finish times competes with the queue's next event.

``events`` counts what happened: arrivals, finishes, congestion changes, timer expiries and ticks.
Finish events superseded by a stop or a migration are not events (they are skipped, or dropped in
bulk when they crowd the queue).
"""

from __future__ import annotations

import gc
import math
import random
import time
from collections.abc import Callable, Generator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from unstall.errors import UnstallError
from unstall.sched.base import (
    ClusterLayout,
    ClusterSnapshot,
    Decision,
    JobView,
    Placement,
    Policy,
    policy_capabilities,
)
from unstall.sim.congestion import CongestionSchedule
from unstall.sim.decision_checks import PolicyError, check_decision_shape, check_placement
from unstall.sim.events import EventKind, EventQueue
from unstall.sim.failures import PolicyCrashError, policy_crash
from unstall.sim.network import NetworkState
from unstall.sim.network_jobs import NetworkJobs
from unstall.sim.round_views import RoundView, SpreadViews
from unstall.sim.speed import RateTiming, SpeedModel, speed_capabilities
from unstall.sim.state import ClusterState, JobState, SimInvariantError, SimJob
from unstall.sim.timeline import Timeline

# How a job's state reads in a PolicyError ("cannot start it: the job is running").
_STATE_WORDS = {
    JobState.PENDING: "not yet submitted",
    JobState.QUEUED: "queued",
    JobState.RUNNING: "running",
    JobState.DONE: "finished",
}

# Compact the event queue once this many superseded finish events wait in it (and they are half
# of it): popping them one by one costs more than one pass that drops them all.
COMPACT_FROM = 4096
# Rounds at one instant before the policy is stopped as stuck: only timers set for the instant
# itself call it again without time moving on, and a policy that keeps setting them would
# loop there for ever (a handful is normal: a timer that falls due as it is set).
MAX_ROUNDS_AT_ONE_INSTANT = 1000


@dataclass(frozen=True, kw_only=True)
class EngineSettings:
    """What the event loop needs beyond the cluster, the jobs and the policy."""

    restore_s: float  # checkpoint + restore time paid by every preemption or migration
    tick_s: float | None  # extra scheduling rounds while jobs wait (None: only on events)
    seed: int
    # Set-up paid by a job's first start (joining its group, building its model): what a live
    # run measures and hands back; 0 for the simulator's own runs.
    startup_s: float = 0.0


class SimInterrupted(KeyboardInterrupt):
    """A Ctrl-C (or SIGTERM turned into one) stopped the simulation: how far it got. Being a
    KeyboardInterrupt, it stops whatever does not look for it as an interrupt does."""

    def __init__(
        self,
        *,
        simulated_s: float,
        jobs_finished: int,
        jobs_total: int,
        deciding: tuple[str, float] | None = None,
    ) -> None:
        self.simulated_s = simulated_s
        self.jobs_finished = jobs_finished
        self.jobs_total = jobs_total
        # The policy whose decide() was running, and for how many wall seconds, when the
        # interrupt came (a second or more): a policy stuck in a loop of its own is only ever
        # stopped this way.
        self.deciding = deciding
        super().__init__(self.progress())

    def progress(self) -> str:
        """``simulated time 3.2 h, 40 of 120 jobs finished`` (and, when the interrupt came
        during a round, ``, in policy P's decide() for 12.3 s``)."""
        text = (
            f"simulated time {self.simulated_s / 3600:.3g} h, {self.jobs_finished} of "
            f"{self.jobs_total} jobs finished"
        )
        if self.deciding is not None:
            name, wall_s = self.deciding
            text += f", in policy {name}'s decide() for {wall_s:.1f} s"
        return text


@dataclass(slots=True)
class _KnownInAdvance:
    """Arrivals and congestion changes are known up front: they stay in two sorted lists, read
    in order, instead of the heap, which then holds only finish events, timers and ticks."""

    order: list[int]  # job indices by submit time
    submit_s: list[float]  # their submit times
    changes_s: Sequence[float]  # congestion change times, ascending
    next_arrival: int = 0
    next_change: int = 0

    @classmethod
    def of(cls, jobs: list[SimJob], changes_s: Sequence[float]) -> _KnownInAdvance:
        order = sorted(range(len(jobs)), key=lambda i: jobs[i].submit_s)
        return cls(order=order, submit_s=[jobs[i].submit_s for i in order], changes_s=changes_s)


@dataclass(slots=True)
class EngineOutcome:
    """What a finished loop hands to the metrics: the jobs as they ended, the timeline, counts."""

    jobs: list[SimJob]
    timeline: Timeline
    events: int
    rounds: int
    preemptions: int
    migrations: int


class Engine:
    """The simulator as a backend of the Policy protocol: it builds each round's snapshot,
    carries the policy's decision out and advances the jobs (see the module docstring)."""

    def __init__(
        self,
        *,
        layout: ClusterLayout,
        speed: SpeedModel,
        policy: Policy,
        jobs: list[SimJob],
        congestion: CongestionSchedule,
        settings: EngineSettings,
    ) -> None:
        self.layout = layout
        self.speed = speed
        self.policy = policy
        self.jobs = jobs
        self.by_id = {job.job_id: job for job in jobs}
        if len(self.by_id) != len(jobs):
            raise SimInvariantError("job ids must be unique")
        self.congestion = congestion
        self.settings = settings
        self.cluster = ClusterState(layout)
        self.net = NetworkState(speed.capacity)
        self.queue = EventQueue()
        self.queued: dict[int, SimJob] = {}
        self.running: dict[int, SimJob] = {}
        self.queued_views: dict[int, JobView] = {}
        self.running_views: dict[int, JobView] = {}
        self.timers: list[str] = []
        self.timeline = Timeline()
        self.rng = random.Random(settings.seed)
        self.oracle = policy_capabilities(policy).needs_oracle
        # Only a speed model of several GPU types measures overhead per placement; a speed model
        # may time placements on shared links as a function of the rate alone (the fast path).
        capabilities = speed_capabilities(speed)
        self._base_iter_s = capabilities.base_iter_s
        self._timing_by_rate = capabilities.rate_timing
        self._telemetry_last: dict[str, float] = {}
        self._finished_since_round: list[JobView] = []
        self.spread_running: set[int] = set()  # running jobs placed over several nodes
        self.spread_views = SpreadViews(self.spread_running, self.running_views)
        # Running jobs on shared links: their progress and finish times, re-planned in bulk
        # (they have no finish events in the queue).
        self.network_jobs = NetworkJobs()
        self._finish_queued = 0  # finish events in the queue, superseded ones included
        self.rounds = 0
        self._round_at = -math.inf  # the instant of the latest round, and its rounds so far
        self._rounds_at_instant = 0
        self.preemptions = 0
        self.migrations = 0
        self._events = 0  # see the module docstring
        self._tick_pending = False  # a tick is in the queue
        self._deciding_since: float | None = None  # monotonic start of a running decide()

    # --- the loop --------------------------------------------------------------------------------

    def run(self, on_finish: Callable[[int], None] | None = None) -> EngineOutcome:
        """The whole loop; a Ctrl-C inside it becomes :class:`SimInterrupted`, which says how
        far the simulation got."""
        with _collector_paused():
            try:
                return self._loop(on_finish)
            except KeyboardInterrupt:
                raise self._interrupted() from None

    def _interrupted(self) -> SimInterrupted:
        """How far the loop got: the last instant it completed, the jobs finished by then."""
        times = self.timeline.time_s
        deciding = None
        if self._deciding_since is not None:
            running_s = time.monotonic() - self._deciding_since
            # Named when its round had taken a second or more: a slow policy is not a stuck one.
            if running_s >= 1.0:
                name = str(getattr(self.policy, "name", type(self.policy).__name__))
                deciding = (name, running_s)
        return SimInterrupted(
            simulated_s=times[-1] if times else 0.0,
            jobs_finished=sum(1 for job in self.jobs if job.state == JobState.DONE),
            jobs_total=len(self.jobs),
            deciding=deciding,
        )

    def _loop(self, on_finish: Callable[[int], None] | None) -> EngineOutcome:
        known = _KnownInAdvance.of(self.jobs, self.congestion.times_s)
        self._reset_policy()
        while True:
            now, network_finish = self._next_instant(known)
            if now == math.inf:
                break
            changed = self._congestion_changes(now, known)
            fired, wake = self._events_at(now, network_finish, known, on_finish)
            if not (wake or changed):
                continue  # only superseded finish events: nothing changed at this instant
            # Shares are re-computed once per instant, after the round: the policy does not see
            # rates, and flows that leave and join at the same instant then cost one sharing step.
            if wake:
                self._round(now, tuple(fired))
            self._close_instant(now)
        return EngineOutcome(
            jobs=self.jobs,
            timeline=self.timeline,
            events=self._events,
            rounds=self.rounds,
            preemptions=self.preemptions,
            migrations=self.migrations,
        )

    def _reset_policy(self) -> None:
        """The policy's ``reset``; an exception of its own stops the run as a crash of it."""
        try:
            self.policy.reset()
        except UnstallError:
            raise
        except Exception as exc:
            raise self._policy_failed(exc) from exc

    def _next_instant(self, known: _KnownInAdvance) -> tuple[float, float]:
        """When the next event happens (``inf``: none is left), and when the first job on
        shared links finishes (those finishes are not in the queue)."""
        q = self.queue
        now = q.peek_time() if q else math.inf
        network_finish = self.network_jobs.next_finish_s()
        if network_finish < now:
            now = network_finish
        submit, arrival = known.submit_s, known.next_arrival
        if arrival < len(submit) and submit[arrival] < now:
            now = submit[arrival]
        changes, change = known.changes_s, known.next_change
        if change < len(changes) and changes[change] < now:
            now = changes[change]
        return now, network_finish

    def _congestion_changes(self, now: float, known: _KnownInAdvance) -> bool:
        """Set the congestion that changes at ``now``; whether it did."""
        changed = False
        changes = known.changes_s
        while known.next_change < len(changes) and changes[known.next_change] == now:
            self.net.set_congestion(self.congestion.fractions[known.next_change])
            known.next_change += 1
            self._events += 1
            changed = True
        return changed

    def _events_at(
        self,
        now: float,
        network_finish: float,
        known: _KnownInAdvance,
        on_finish: Callable[[int], None] | None,
    ) -> tuple[list[str], bool]:
        """Handle the arrivals, finishes, timers and ticks of ``now``: the keys of the timers
        that fired, and whether anything calls for a scheduling round."""
        wake = self._arrivals(now, known)
        if network_finish == now:
            for idx in self.network_jobs.finishing_at(now):
                self._count_finish(self.jobs[idx], now, on_finish)
                wake = True
        fired: list[str] = []
        q = self.queue
        while q and q.peek_time() == now:
            _, kind, _, idx, payload = q.pop()
            if kind == EventKind.FINISH:
                self._finish_queued -= 1
                job = self.jobs[idx]
                if job.version == payload and job.state == JobState.RUNNING:
                    self._count_finish(job, now, on_finish)
                    wake = True
                continue
            self._events += 1
            if kind == EventKind.TIMER:
                fired.append(self.timers[payload])
            else:  # TICK
                self._tick_pending = False
            wake = True
        return fired, wake

    def _arrivals(self, now: float, known: _KnownInAdvance) -> bool:
        """Queue the jobs submitted at ``now``; whether any was."""
        arrived = False
        submit, order = known.submit_s, known.order
        while known.next_arrival < len(submit) and submit[known.next_arrival] == now:
            self._arrive(self.jobs[order[known.next_arrival]])
            known.next_arrival += 1
            self._events += 1
            arrived = True
        return arrived

    def _count_finish(
        self, job: SimJob, now: float, on_finish: Callable[[int], None] | None
    ) -> None:
        self._events += 1
        self._finish(job, now)
        if on_finish is not None:
            on_finish(1)

    def _close_instant(self, now: float) -> None:
        """After the round of ``now``: re-share the links, record the instant, drop superseded
        finish events when they crowd the queue, and ask for the next tick while jobs wait."""
        self._reshare(now)
        self._sample(now)
        # Every running job off shared links has exactly one live finish event once the
        # instant is done.
        q = self.queue
        live = len(self.running) - len(self.network_jobs)
        superseded = self._finish_queued - live
        if superseded > COMPACT_FROM and 2 * superseded > len(q):
            q.compact(self._is_live)
            self._finish_queued = live
        if self.settings.tick_s and self.queued and not self._tick_pending:
            q.push(now + self.settings.tick_s, EventKind.TICK)
            self._tick_pending = True

    def _is_live(self, event: tuple[float, int, int, int, int]) -> bool:
        """False for a finish event that re-planning or a stop has superseded."""
        if event[1] != EventKind.FINISH:
            return True
        job = self.jobs[event[3]]
        return job.version == event[4] and job.state == JobState.RUNNING

    # --- one scheduling round --------------------------------------------------------------------

    def _round(self, now: float, fired: tuple[str, ...]) -> None:
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
        # Views change only when their job does; the state changes keep them up to date.
        # Live views, not copies (see ClusterSnapshot), valid until ``decide`` returns.
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
            congestion=self.net.congestion,
            spread_jobs_by_node=tuple(self.cluster.spread_by_node),
            spread_running=spread,
            finished=tuple(self._finished_since_round),
            fired_timers=fired,
        )
        self._finished_since_round.clear()
        self._deciding_since = time.monotonic()
        try:
            decision = self.policy.decide(snapshot, self.rng)
            self._deciding_since = None
        except UnstallError:
            raise  # already one line naming what was wrong (a PolicyError, a config's field)
        except Exception as exc:
            raise self._policy_failed(exc) from exc
        finally:
            for view in (queued, running, spread):
                view.expire()
        self._apply(decision, now)

    def _policy_failed(self, exc: Exception) -> PolicyCrashError:
        return policy_crash(self.policy, exc)

    def _apply(self, decision: Decision, now: float) -> None:
        name = self.policy.name
        decision = check_decision_shape(name, decision)
        for p in decision.preemptions:
            job = self._lookup(p.job_id, JobState.RUNNING, "preempt")
            self._preempt(job, now)
        for m in decision.migrations:
            job = self._lookup(m.job_id, JobState.RUNNING, "migrate")
            self._migrate(job, m.placement, now)
        for s in decision.starts:
            job = self._lookup(s.job_id, JobState.QUEUED, "start")
            self._start(job, s.placement, now)
        for timer in decision.timers:
            if timer.at_s < now:
                raise PolicyError(
                    name, None, f"timer {timer.key!r} set for {timer.at_s} s, before now ({now} s)"
                )
            self.timers.append(timer.key)
            self.queue.push(timer.at_s, EventKind.TIMER, payload=len(self.timers) - 1)
        for key, value in decision.telemetry:
            if self._telemetry_last.get(key) != value:  # a step function: record changes only
                self._telemetry_last[key] = value
                self.timeline.telemetry.append((now, key, value))

    def _lookup(self, job_id: str, state: JobState, verb: str) -> SimJob:
        job = self.by_id.get(job_id)
        if job is None or job.state != state:
            found = "not in the trace" if job is None else _STATE_WORDS[job.state]
            raise PolicyError(
                self.policy.name,
                job_id,
                f"cannot {verb} it: the job is {found}, only a {_STATE_WORDS[state]} job can",
            )
        return job

    # --- state changes ---------------------------------------------------------------------------

    def _arrive(self, job: SimJob) -> None:
        if job.state != JobState.PENDING:
            raise SimInvariantError(f"job {job.job_id} arrived twice")
        job.state = JobState.QUEUED
        job.queued_since_s = job.submit_s
        job.changed_s = job.submit_s
        self.queued[job.index] = job
        self.queued_views[job.index] = job.make_view(self.oracle)

    def _start(self, job: SimJob, placement: Placement, now: float) -> None:
        if now < job.submit_s:
            raise SimInvariantError(f"job {job.job_id} started before it arrived")
        placement = check_placement(self.policy.name, job, placement, self.cluster)
        self.cluster.allocate(job, placement)
        del self.queued[job.index]
        self.running[job.index] = job
        job.state = JobState.RUNNING
        job.placement = placement
        if job.first_start_s < 0:
            job.first_start_s = now
        job.queued_total_s += now - job.queued_since_s
        job.changed_s = now
        job.last_update_s = now
        # A job restarting after a preemption first restores its checkpoint.
        if job.preemptions:
            pause = self.settings.restore_s
        else:
            pause = self.settings.startup_s if job.startup_s is None else job.startup_s
        job.paused_until_s = now + pause
        del self.queued_views[job.index]
        self.running_views[job.index] = job.make_view(self.oracle)
        self._place_on_links(job, placement, now)

    def _place_on_links(self, job: SimJob, placement: Placement, now: float) -> None:
        if self._base_iter_s is not None:
            job.base_iter_s = self._base_iter_s(job.model, job.num_gpus, placement)
        if len(placement) > 1:
            self.spread_running.add(job.index)
        flow = self.speed.flow(job.model, job.num_gpus, placement)
        if flow is not None:
            # The finish is planned once the links are re-shared (the rate is then known).
            self.net.add(job.index, flow)
            self.network_jobs.add(job, self._rate_timing(job.model, job.num_gpus, placement))
        else:
            self._set_iter_s(job, self.speed.iter_s(job.model, job.num_gpus, placement, None), now)

    def _stop(self, job: SimJob, now: float) -> None:
        self.spread_running.discard(job.index)
        if job.index in self.network_jobs:
            self.network_jobs.remove(job)
        job.advance(now)
        job.attained_gpu_s += (now - job.changed_s) * job.num_gpus
        job.changed_s = now
        job.version += 1  # invalidates the planned finish event
        self.cluster.release(job.placement)
        self.net.remove(job.index)
        del self.running[job.index]
        del self.running_views[job.index]

    def _preempt(self, job: SimJob, now: float) -> None:
        self._stop(job, now)
        job.state = JobState.QUEUED
        job.placement = ()
        job.queued_since_s = now
        job.preemptions += 1
        self.preemptions += 1
        self.queued[job.index] = job
        self.queued_views[job.index] = job.make_view(self.oracle)

    def _migrate(self, job: SimJob, placement: Placement, now: float) -> None:
        self._stop(job, now)
        placement = check_placement(self.policy.name, job, placement, self.cluster)
        self.cluster.allocate(job, placement)
        self.running[job.index] = job
        job.placement = placement
        job.migrations += 1
        self.migrations += 1
        job.last_update_s = now
        job.paused_until_s = now + self.settings.restore_s
        self.running_views[job.index] = job.make_view(self.oracle)
        self._place_on_links(job, placement, now)

    def _finish(self, job: SimJob, now: float) -> None:
        self._finished_since_round.append(self.running_views[job.index])
        self._stop(job, now)
        job.done_iters = job.work_iters
        job.state = JobState.DONE
        job.finish_s = now

    def _set_iter_s(self, job: SimJob, iter_s: float, now: float) -> None:
        job.advance(now)
        job.iter_s = iter_s
        job.version += 1
        if self.oracle:  # an oracle's view carries the rate at which work runs down
            self.running_views[job.index] = job.make_view(True)
        self.queue.push(job.finish_time(now), EventKind.FINISH, job.index, job.version)
        self._finish_queued += 1

    def _reshare(self, now: float) -> None:
        changed = self.net.recompute()
        if not changed:
            return
        # A new share that leaves the iteration time as it was (communication hidden behind
        # compute, or another link the bottleneck) keeps the planned finish.
        replanned = self.network_jobs.replan(changed, now)
        if self.oracle:  # an oracle's view carries the rate at which work runs down
            for index in replanned:
                job = self.jobs[index]
                self.network_jobs.sync(job)
                self.running_views[index] = job.make_view(True)

    def _rate_timing(
        self, model: str, num_gpus: int, placement: Placement
    ) -> RateTiming | Callable[[float], float]:
        fast = self._timing_by_rate
        if fast is not None:
            return fast(model, num_gpus, placement)
        speed = self.speed
        return lambda rate: speed.iter_s(model, num_gpus, placement, rate)

    def _sample(self, now: float) -> None:
        tl = self.timeline
        if tl.time_s and tl.time_s[-1] == now:
            tl.busy_gpus[-1] = self.cluster.used_gpus
            tl.queued[-1] = len(self.queued)
            tl.congestion[-1] = self.net.congestion
            return
        tl.time_s.append(now)
        tl.busy_gpus.append(self.cluster.used_gpus)
        tl.queued.append(len(self.queued))
        tl.congestion.append(self.net.congestion)


@contextmanager
def _collector_paused() -> Generator[None, None, None]:
    """Python's cycle collector off while the loop runs. The loop allocates millions of small
    objects (views, events, rates), and each collection walks every live one, the trace's jobs
    included: 25% of a fifo run on the Philly trace. Neither the loop nor the built-in policies
    make reference cycles (after a whole run a collection finds none), so reference counting
    frees everything; a policy that does make cycles gets them collected when the run ends."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
