"""The simulator: the scheduling core driven by a simulated clock and the perf model's progress.

:class:`Engine` is the core (:mod:`unstall.loop`) with :class:`SimDriver`, whose clock jumps to
the next event: a finish, a congestion change, or the core's own arrivals, timers and ticks.
After all events of one instant are handled, the core runs one round; then the driver re-shares
the network links that changed and re-plans the finish of every job whose iteration time changed.

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
import time
from collections.abc import Callable, Generator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from unstall.loop import (
    NOTHING,
    Collected,
    CoreSettings,
    Job,
    JobState,
    RunOutcome,
    SchedulingCore,
    StopOutcome,
)
from unstall.loop.driver import StopVerb
from unstall.sched.base import ClusterLayout, Placement, Policy
from unstall.sim.congestion import CongestionSchedule
from unstall.sim.events import EventKind, EventQueue
from unstall.sim.network import NetworkState
from unstall.sim.network_jobs import NetworkJobs
from unstall.sim.speed import RateTiming, SpeedModel, speed_capabilities

# Compact the event queue once this many superseded finish events wait in it (and they are half
# of it): popping them one by one costs more than one pass that drops them all.
COMPACT_FROM = 4096


@dataclass(frozen=True, kw_only=True)
class EngineSettings:
    """What the event loop needs beyond the cluster, the jobs and the policy."""

    restore_s: float  # checkpoint + restore time paid by every preemption or migration
    tick_s: float | None  # extra scheduling rounds while jobs wait (None: only on events)
    seed: int
    # Set-up paid by a job's first start (joining its group, building its model): what a live
    # run measures and hands back; 0 for the simulator's own runs.
    startup_s: float = 0.0
    # What each start costs instead, by job, placement and whether it restores a checkpoint
    # (a start-up model's charges, :class:`~unstall.sim.startup.SetupCharges`); None: the two
    # fixed times above.
    charges: Callable[[Job, Placement, bool], float] | None = None


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


class SimDriver:
    """The simulator's clock and progress model (a :class:`~unstall.loop.Driver`): finish
    events in a heap, running jobs on shared links re-planned in bulk, congestion changes known
    in advance; a job's progress is arithmetic at its iteration time."""

    def __init__(
        self,
        core: SchedulingCore,
        *,
        speed: SpeedModel,
        congestion: CongestionSchedule,
        settings: EngineSettings,
        on_finish: Callable[[int], None] | None = None,
    ) -> None:
        self.core = core
        self.jobs = core.jobs
        self.speed = speed
        self.congestion_schedule = congestion
        self.settings = settings
        self.on_finish = on_finish
        self.net = NetworkState(speed.capacity)
        self.queue = EventQueue()
        # Only a speed model of several GPU types measures overhead per placement; a speed model
        # may time placements on shared links as a function of the rate alone (the fast path).
        capabilities = speed_capabilities(speed)
        self._base_iter_s = capabilities.base_iter_s
        self._timing_by_rate = capabilities.rate_timing
        # Running jobs on shared links: their progress and finish times, re-planned in bulk
        # (they have no finish events in the queue).
        self.network_jobs = NetworkJobs()
        self._finish_queued = 0  # finish events in the queue, superseded ones included
        self._next_change = 0
        self._now = 0.0
        self._network_finish = math.inf

    # --- the clock -----------------------------------------------------------------------------

    def next_instant(self, due_s: float, until_s: float) -> float:
        q = self.queue
        now = q.peek_time() if q else math.inf
        network_finish = self._network_finish = self.network_jobs.next_finish_s()
        if network_finish < now:
            now = network_finish
        if due_s < now:
            now = due_s
        changes, change = self.congestion_schedule.times_s, self._next_change
        if change < len(changes) and changes[change] < now:
            now = changes[change]
        self._now = now
        return now

    def now(self) -> float:
        return self._now

    def congestion(self) -> float:
        return self.net.congestion

    def before_round(self, now: float) -> None:
        pass

    # --- what happens at an instant ------------------------------------------------------------

    def collect(self, now: float) -> Collected:
        """Congestion changes and finishes at ``now``."""
        changed = False
        events = 0
        schedule = self.congestion_schedule
        changes = schedule.times_s
        while self._next_change < len(changes) and changes[self._next_change] == now:
            self.net.set_congestion(schedule.fractions[self._next_change])
            self._next_change += 1
            events += 1
            changed = True
        finished = 0
        if self._network_finish == now:
            for idx in self.network_jobs.finishing_at(now):
                self._finish(self.jobs[idx], now)
                finished += 1
        q = self.queue
        while q and q.peek_time() == now:
            _, _, _, idx, version = q.pop()
            self._finish_queued -= 1
            job = self.jobs[idx]
            if job.version == version and job.state == JobState.RUNNING:
                self._finish(job, now)
                finished += 1
        if not (finished or changed):
            return NOTHING
        return Collected(wake=finished > 0, changed=changed, events=events + finished)

    def _finish(self, job: Job, now: float) -> None:
        self._halt(job, now)
        self.core.finish(job, now)
        if self.on_finish is not None:
            self.on_finish(1)

    def close_instant(self, now: float) -> None:
        """Re-share the links; drop superseded finish events when they crowd the queue."""
        self._reshare(now)
        # Every running job off shared links has exactly one live finish event once the
        # instant is done.
        q = self.queue
        live = len(self.core.running) - len(self.network_jobs)
        superseded = self._finish_queued - live
        if superseded > COMPACT_FROM and 2 * superseded > len(q):
            q.compact(self._is_live)
            self._finish_queued = live

    def _is_live(self, event: tuple[float, int, int, int, int]) -> bool:
        """False for a finish event that re-planning or a stop has superseded."""
        job = self.jobs[event[3]]
        return job.version == event[4] and job.state == JobState.RUNNING

    # --- the executor ----------------------------------------------------------------------------

    def launch(self, job: Job, placement: Placement, now: float, *, migrating: bool) -> None:
        job.last_update_s = now
        # A job moved or restarting after a preemption first restores its checkpoint.
        restoring = migrating or job.preemptions > 0
        charges = self.settings.charges
        if charges is not None:
            pause = charges(job, placement, restoring)
        elif restoring:
            pause = self.settings.restore_s
        else:
            pause = self.settings.startup_s if job.startup_s is None else job.startup_s
        job.paused_until_s = now + pause
        if self._base_iter_s is not None:
            job.base_iter_s = self._base_iter_s(job.model, job.num_gpus, placement)
        flow = self.speed.flow(job.model, job.num_gpus, placement)
        if flow is not None:
            # The finish is planned once the links are re-shared (the rate is then known).
            self.net.add(job.index, flow)
            self.network_jobs.add(job, self._rate_timing(job.model, job.num_gpus, placement))
        else:
            self._set_iter_s(job, self.speed.iter_s(job.model, job.num_gpus, placement, None), now)

    def stopping(self, jobs: Sequence[Job]) -> None:
        pass  # a simulated stop takes no time

    def stop(self, job: Job, now: float, verb: StopVerb) -> StopOutcome:
        self._halt(job, now)
        return StopOutcome(kind="stopped", at_s=now)

    def _halt(self, job: Job, now: float) -> None:
        """The job's progress up to ``now``; it leaves the links and its planned finish."""
        if job.index in self.network_jobs:
            self.network_jobs.remove(job)
        job.advance(now)
        job.version += 1  # invalidates the planned finish event
        self.net.remove(job.index)

    def _set_iter_s(self, job: Job, iter_s: float, now: float) -> None:
        job.advance(now)
        job.iter_s = iter_s
        job.version += 1
        self.core.refresh_view(job)  # an oracle's view carries the rate at which work runs down
        self.queue.push(job.finish_time(now), EventKind.FINISH, job.index, job.version)
        self._finish_queued += 1

    def _reshare(self, now: float) -> None:
        changed = self.net.recompute()
        if not changed:
            return
        # A new share that leaves the iteration time as it was (communication hidden behind
        # compute, or another link the bottleneck) keeps the planned finish.
        replanned = self.network_jobs.replan(changed, now)
        if self.core.oracle:  # an oracle's view carries the rate at which work runs down
            for index in replanned:
                job = self.jobs[index]
                self.network_jobs.sync(job)
                self.core.refresh_view(job)

    def _rate_timing(
        self, model: str, num_gpus: int, placement: Placement
    ) -> RateTiming | Callable[[float], float]:
        fast = self._timing_by_rate
        if fast is not None:
            return fast(model, num_gpus, placement)
        speed = self.speed
        return lambda rate: speed.iter_s(model, num_gpus, placement, rate)


class Engine:
    """The simulator as a backend of the Policy protocol: the scheduling core with the
    simulated clock and progress of :class:`SimDriver` (see the module docstring)."""

    def __init__(
        self,
        *,
        layout: ClusterLayout,
        speed: SpeedModel,
        policy: Policy,
        jobs: list[Job],
        congestion: CongestionSchedule,
        settings: EngineSettings,
        arrivals_s: Sequence[float] | None = None,
    ) -> None:
        self.policy = policy
        self.core = SchedulingCore(
            layout=layout,
            policy=policy,
            jobs=jobs,
            settings=CoreSettings(tick_s=settings.tick_s, seed=settings.seed),
            arrivals_s=arrivals_s,
        )
        self.driver = SimDriver(self.core, speed=speed, congestion=congestion, settings=settings)
        self.core.attach(self.driver)

    def run(
        self, on_finish: Callable[[int], None] | None = None, *, until_s: float = math.inf
    ) -> RunOutcome:
        """The whole loop, or up to ``until_s``; a Ctrl-C inside it becomes
        :class:`SimInterrupted`, which says how far the simulation got."""
        self.driver.on_finish = on_finish
        with _collector_paused():
            try:
                return self.core.run(until_s)
            except KeyboardInterrupt:
                raise self._interrupted() from None

    def _interrupted(self) -> SimInterrupted:
        """How far the loop got: the last instant it completed, the jobs finished by then."""
        times = self.core.timeline.time_s
        deciding = None
        since = self.core.deciding_since
        if since is not None:
            running_s = time.monotonic() - since
            # Named when its round had taken a second or more: a slow policy is not a stuck one.
            if running_s >= 1.0:
                name = str(getattr(self.policy, "name", type(self.policy).__name__))
                deciding = (name, running_s)
        jobs = self.core.jobs
        return SimInterrupted(
            simulated_s=times[-1] if times else 0.0,
            jobs_finished=sum(1 for job in jobs if job.state == JobState.DONE),
            jobs_total=len(jobs),
            deciding=deciding,
        )


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
