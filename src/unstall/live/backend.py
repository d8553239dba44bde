"""The live backend: the scheduling core on a Ray cluster.

A live run is the core (:mod:`unstall.loop`: jobs' lifecycle, rounds, the policy, its checks,
timers and telemetry) with a wall clock (:mod:`unstall.live.clock`) and real processes: an
executor per GPU (:mod:`unstall.live.pool`) driven by :class:`~unstall.live.driver.LiveDriver`.
This module puts them together and hands the results over in the simulator's types. The time
``decide`` takes and the time carrying the decision out takes are measured per round: the
cluster waits for both.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from unstall.live.clock import WallClock
from unstall.live.cluster import LiveCluster
from unstall.live.config import LiveConfig
from unstall.live.driver import JobRecord, LiveDriver
from unstall.live.pool import ExecutorPool, LiveRunError
from unstall.live.status import LiveStatus, live_status
from unstall.live.training import JobWork
from unstall.loop import (
    CoreSettings,
    Job,
    JobEvent,
    JobState,
    RoundRecord,
    RunOutcome,
    SchedulingCore,
)
from unstall.sched.base import Policy, policy_capabilities
from unstall.sim import PerfSpeedModel, layout_of

__all__ = ["JobRecord", "LiveBackend", "LiveInterrupted", "LiveOutcome", "LiveRunError"]

# Wall seconds between two statuses handed to ``on_status``: a table on a terminal refreshes a
# few times a second at most, and a large trace's rows are not built at every instant.
STATUS_EVERY_S = 0.25


@dataclass
class LiveOutcome:
    """What the loop hands to the results: the core's outcome, plus what only it knows."""

    engine: RunOutcome
    records: dict[str, JobRecord]
    rounds: list[RoundRecord]
    executor_start_wall_s: float
    failures: int
    nodes_lost: list[int]
    interrupted: bool


class LiveInterrupted(KeyboardInterrupt):
    """A Ctrl-C stopped the live run after its jobs' processes were stopped; ``outcome`` holds
    what finished."""

    def __init__(self, outcome: LiveOutcome) -> None:
        self.outcome = outcome
        # The results of what finished, in run_live's types, once run_live has built them.
        self.run: object | None = None
        done = sum(1 for job in outcome.engine.jobs if job.state == JobState.DONE)
        super().__init__(f"{done} of {len(outcome.engine.jobs)} jobs finished")


class LiveBackend:
    """Runs ``jobs`` on ``cluster`` under ``policy`` (see the module docstring)."""

    def __init__(
        self,
        *,
        cluster: LiveCluster,
        speed: PerfSpeedModel,
        policy: Policy,
        jobs: list[Job],
        works: dict[str, JobWork],
        config: LiveConfig,
        log: Callable[[str], None] | None = None,
        on_finish: Callable[[int], None] | None = None,
        on_event: Callable[[JobEvent], None] | None = None,
        on_status: Callable[[LiveStatus], None] | None = None,
    ) -> None:
        self.log = log or (lambda _text: None)
        self._on_event = on_event
        self._on_status = on_status
        self._status_due = 0.0  # monotonic time of the next status
        self.core = SchedulingCore(
            layout=layout_of(cluster.topology),
            policy=policy,
            jobs=jobs,
            settings=CoreSettings(
                # Extra rounds while jobs wait, for policies that ask for them (as simulated).
                tick_s=policy_capabilities(policy).tick_s,
                seed=config.seed,
                max_failures=config.max_failures,
                record_rounds=True,
            ),
            on_event=self._event,
        )
        records = {}
        for job in jobs:
            work = works[job.job_id]
            scale = job.work_iters / work.iterations if work.iterations > 0 else 1.0
            records[job.job_id] = JobRecord(work=work, scale=scale)
        # Iterations in the table as the job's processes count them.
        self._scales = {job_id: record.scale for job_id, record in records.items()}
        self.pool = ExecutorPool(cluster)
        self.driver = LiveDriver(
            self.core,
            pool=self.pool,
            clock=WallClock(config.speedup),
            speed=speed,
            config=config,
            records=records,
            on_finish=on_finish,
            log=self.log,
        )
        self.core.attach(self.driver)

    def _event(self, event: JobEvent) -> None:
        """Failures are logged as they happen; every transition goes to ``on_event``."""
        if event.kind == "failed":
            self.log(f"job {event.job_id}: a process failed ({event.detail}); back to the queue")
        elif event.kind == "gave_up":
            job = self.core.by_id[event.job_id]
            self.log(
                f"job {event.job_id}: gave up after {job.failed_in_a_row} failures in a row "
                f"({event.detail})"
            )
        if self._on_event is not None:
            self._on_event(event)

    def now(self) -> float:
        """Trace seconds since the run began."""
        return self.driver.clock.now()

    @property
    def executors(self) -> dict[tuple[int, int], object]:
        return self.pool.executors

    @property
    def executor_start_wall_s(self) -> float:
        return self.pool.start_wall_s

    def start_executors(self) -> None:
        """One executor per GPU, pinned to its node; returns when all of them answer."""
        self.pool.start()

    def run(self) -> LiveOutcome:
        self.core.reset_policy()
        self.driver.clock.start()
        try:
            # The core's run, an instant at a time, with a status between instants (the
            # driver waits half a second at most for the next one).
            self._report(force=True)
            while self.core.step():
                self._report(force=False)
            self._report(force=True)  # the last state: every job ended
        except KeyboardInterrupt:
            self.driver.stop_everything()
            raise LiveInterrupted(self._outcome(interrupted=True)) from None
        return self._outcome(interrupted=False)

    def status(self) -> LiveStatus:
        """The run now: running jobs, the queue, the totals (:func:`live_status`)."""
        return live_status(self.core, self.now(), scales=self._scales)

    def _report(self, *, force: bool) -> None:
        """A status for ``on_status``, at most every :data:`STATUS_EVERY_S` wall seconds."""
        if self._on_status is None:
            return
        wall = time.monotonic()
        if not force and wall < self._status_due:
            return
        self._status_due = wall + STATUS_EVERY_S
        self._on_status(self.status())

    def _outcome(self, *, interrupted: bool) -> LiveOutcome:
        return LiveOutcome(
            engine=self.core.outcome(),
            records=self.driver.records,
            rounds=self.core.round_records,
            executor_start_wall_s=self.pool.start_wall_s,
            failures=self.core.failures,
            nodes_lost=list(self.driver.nodes_lost),
            interrupted=interrupted,
        )

    def final_checkpoint(self, job_id: str) -> bytes | None:
        """The checkpoint a finished job left (its final state), if the store still holds it."""
        return self.pool.final_checkpoint(job_id)

    def shutdown(self) -> None:
        self.pool.shutdown()
