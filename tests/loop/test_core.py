"""The scheduling core on a driver of its own: the job state machine, its guards and its events.

The driver here is a script: its clock jumps to the core's next due time or to the finishes it
was told of, a stop ends as the test says. So each transition the simulator and the live backend
rely on is checked without either of them.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import pytest

from unstall.loop import (
    NOTHING,
    Collected,
    CoreSettings,
    Job,
    JobEvent,
    JobState,
    PolicyError,
    SchedulingCore,
    SimInvariantError,
    StopOutcome,
)
from unstall.loop.driver import StopVerb
from unstall.sched.base import (
    ClusterLayout,
    ClusterSnapshot,
    Decision,
    Migrate,
    Placement,
    PolicyBase,
    Preempt,
    Sensitivity,
    SetTimer,
    Start,
)


def _job(index: int, submit_s: float = 0.0, gpus: int = 1) -> Job:
    return Job(
        index=index,
        job_id=f"j{index}",
        submit_s=submit_s,
        num_gpus=gpus,
        duration_s=10.0,
        model="m",
        cons_iter_s=1.0,
        sensitivity=Sensitivity.flat(1.0, 1.0),
    )


class ScriptedDriver:
    """Finishes happen when the test says (``finish_at``); stops end as ``stop_kind`` says."""

    def __init__(self, core: SchedulingCore) -> None:
        self.core = core
        self.finish_at: dict[str, float] = {}
        self.stop_kind = "stopped"
        self.launched: list[tuple[str, Placement, bool]] = []
        self.stopped: list[tuple[str, StopVerb]] = []
        self.fail_launch: set[str] = set()
        self._now = 0.0

    def next_instant(self, due_s: float, until_s: float) -> float:
        running = {j.job_id for j in self.core.running.values()}
        finishes = [t for jid, t in self.finish_at.items() if jid in running]
        self._now = min([due_s, *finishes])
        return self._now

    def now(self) -> float:
        return self._now

    def collect(self, now: float) -> Collected:
        done = [
            self.core.by_id[jid]
            for jid, t in self.finish_at.items()
            if t <= now and self.core.by_id[jid].state == JobState.RUNNING
        ]
        for job in done:
            del self.finish_at[job.job_id]
            self.core.settle(job, StopOutcome(kind="finished", at_s=now))
        return Collected(wake=True, events=len(done)) if done else NOTHING

    def close_instant(self, now: float) -> None:
        pass

    def before_round(self, now: float) -> None:
        pass

    def congestion(self) -> float:
        return 0.0

    def launch(self, job: Job, placement: Placement, now: float, *, migrating: bool) -> None:
        self.launched.append((job.job_id, placement, migrating))
        if job.job_id in self.fail_launch:
            self.core.fail(job, now, "could not start", progressed=False, own=False)

    def stopping(self, jobs: Sequence[Job]) -> None:
        pass

    def stop(self, job: Job, now: float, verb: StopVerb) -> StopOutcome:
        self.stopped.append((job.job_id, verb))
        if self.stop_kind == "failed":
            return StopOutcome(kind="failed", at_s=now, reason="boom", own=True)
        return StopOutcome(kind=self.stop_kind, at_s=now)  # type: ignore[arg-type]


class Script(PolicyBase):
    """Returns the decisions it is given, one a round (then empty ones)."""

    name = "script"

    def __init__(self, decisions: list[Decision]) -> None:
        self.decisions = decisions
        self.seen: list[ClusterSnapshot] = []

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        self.seen.append(snapshot)
        return self.decisions.pop(0) if self.decisions else Decision()


LAYOUT = ClusterLayout.from_nodes(node_rack=(0, 0), node_gpus=(2, 2), node_type=("v100", "v100"))


def _core(
    jobs: list[Job], decisions: list[Decision], **settings: object
) -> tuple[SchedulingCore, ScriptedDriver, list[JobEvent]]:
    events: list[JobEvent] = []
    core = SchedulingCore(
        layout=LAYOUT,
        policy=Script(decisions),
        jobs=jobs,
        settings=CoreSettings(**settings),  # type: ignore[arg-type]
        on_event=events.append,
    )
    driver = ScriptedDriver(core)
    core.attach(driver)
    return core, driver, events


def test_a_job_arrives_starts_and_finishes_once_with_its_events() -> None:
    job = _job(0, submit_s=5.0)
    core, driver, events = _core([job], [Decision(starts=(Start("j0", ((0, 1),)),))])
    driver.finish_at["j0"] = 15.0
    core.run()
    assert job.state == JobState.DONE and job.finish_s == 15.0 and job.first_start_s == 5.0
    assert job.done_iters == job.work_iters
    assert [(e.time_s, e.kind, e.detail) for e in events] == [
        (5.0, "arrived", ""),
        (5.0, "started", "0:1"),
        (15.0, "finished", ""),
    ]
    assert core.cluster.used_gpus == 0 and core.cluster.free_by_node == [2, 2]
    assert job.attained_gpu_s == 10.0


def test_preempt_requeues_and_migrate_moves_counting_each() -> None:
    a, b = _job(0), _job(1)
    decisions = [
        Decision(
            starts=(Start("j0", ((0, 1),)), Start("j1", ((0, 1),))),
            timers=(SetTimer(at_s=3.0, key="move"),),
        ),
        Decision(preemptions=(Preempt("j0"),), migrations=(Migrate("j1", ((1, 1),)),)),
    ]
    core, driver, events = _core([a, b], decisions)
    core.run(until_s=3.0)
    assert a.state == JobState.QUEUED and a.preemptions == 1 and a.placement == ()
    assert a.queued_since_s == 3.0 and a.attained_gpu_s == 3.0
    assert b.state == JobState.RUNNING and b.placement == ((1, 1),) and b.migrations == 1
    assert (core.preemptions, core.migrations) == (1, 1)
    assert driver.stopped == [("j0", "preempt"), ("j1", "migrate")]
    assert driver.launched[-1] == ("j1", ((1, 1),), True)
    assert core.cluster.free_by_node == [2, 1]
    assert [e.kind for e in events if e.job_id == "j1"] == ["arrived", "started", "migrated"]


def test_a_job_that_finished_before_its_stop_finishes_instead_of_moving() -> None:
    a = _job(0)
    decisions = [
        Decision(starts=(Start("j0", ((0, 1),)),)),
        Decision(migrations=(Migrate("j0", ((1, 1),)),)),
    ]
    core, driver, _ = _core([a], decisions, tick_s=1.0)
    driver.stop_kind = "finished"
    core.run(until_s=1.0)
    core.round(1.0, ())
    assert a.state == JobState.DONE and a.migrations == 0 and core.cluster.used_gpus == 0


def test_failures_requeue_until_max_failures_in_a_row_of_its_own() -> None:
    job = _job(0)
    core, _, events = _core([job], [], max_failures=3)
    core.arrive(job, 0.0)
    # A failure of its node is not its own; one that got past a checkpoint starts again.
    core.fail(job, 1.0, "node gone", progressed=False, own=False)
    core.fail(job, 2.0, "loss is nan", progressed=False, own=True)
    core.fail(job, 3.0, "loss is nan", progressed=True, own=True)
    core.fail(job, 4.0, "loss is nan", progressed=False, own=True)
    assert job.state == JobState.QUEUED and job.failed_in_a_row == 1 and job.index in core.queued
    core.fail(job, 5.0, "loss is nan", progressed=False, own=True)
    core.fail(job, 6.0, "CUDA out of memory", progressed=False, own=True)
    assert job.state == JobState.FAILED and job.failures == 6 and core.failures == 6
    assert job.error == "CUDA out of memory" and job.index not in core.queued
    assert events[-1].kind == "gave_up" and events[-1].detail == "CUDA out of memory"


def test_a_launch_that_fails_at_once_leaves_the_job_queued_and_its_gpus_free() -> None:
    job = _job(0, gpus=2)
    core, driver, events = _core([job], [Decision(starts=(Start("j0", ((0, 2),)),))])
    driver.fail_launch.add("j0")
    core.run(until_s=0.0)
    assert job.state == JobState.QUEUED and job.index in core.queued_views
    assert job.index not in core.running_views and core.cluster.free_by_node == [2, 2]
    assert [e.kind for e in events] == ["arrived", "started", "failed"]


def test_cancel_a_pending_a_queued_and_a_running_job() -> None:
    pending, queued, running = _job(0, submit_s=50.0), _job(1), _job(2, gpus=2)
    core, driver, events = _core(
        [pending, queued, running], [Decision(starts=(Start("j2", ((1, 2),)),))]
    )
    core.run(until_s=0.0)
    core.cancel(queued, 1.0)
    core.cancel(running, 2.0)
    core.cancel(pending, 3.0)
    for job in (pending, queued, running):
        assert job.state == JobState.CANCELLED and job.placement == ()
    assert driver.stopped == [("j2", "cancel")] and core.cluster.used_gpus == 0
    assert not core.queued and not core.queued_views and core.arrivals_left == 0
    with pytest.raises(SimInvariantError, match="cancelled"):
        core.cancel(queued, 4.0)
    assert [e.kind for e in events].count("cancelled") == 3


def test_jobs_submitted_to_a_running_core_arrive_in_time_order() -> None:
    core, _, events = _core([], [])
    core.add_job(_job(0, submit_s=20.0), 20.0)
    core.add_job(_job(1, submit_s=10.0), 10.0)
    core.run()
    assert [(e.job_id, e.time_s) for e in events] == [("j1", 10.0), ("j0", 20.0)]
    with pytest.raises(SimInvariantError, match="already"):
        core.add_job(_job(0), 30.0)
    with pytest.raises(SimInvariantError, match="index 5"):
        core.add_job(_job(5), 30.0)


def test_a_lost_node_takes_its_gpus_for_good_and_refuses_placements() -> None:
    job = _job(0)
    core, _, _ = _core([job], [Decision(starts=(Start("j0", ((1, 1),)),))])
    core.run(until_s=0.0)
    core.withdraw_node(1)
    assert core.cluster.free_by_node == [2, 0] and core.cluster.lost_gpus == 2
    core.fail(job, 1.0, "node gone", progressed=False, own=False)
    # Its GPUs stay lost when its job lets go of them.
    assert core.cluster.free_by_node == [2, 0] and core.cluster.used_gpus == 0
    with pytest.raises(PolicyError, match="node 1 has left the cluster"):
        core.start(job, ((1, 1),), 2.0)


def test_guards_name_the_rule_broken() -> None:
    a = _job(0)
    core, _, _ = _core([a], [])
    core.arrive(a, 0.0)
    with pytest.raises(SimInvariantError, match="arrived twice"):
        core.arrive(a, 1.0)
    with pytest.raises(PolicyError, match="only a running job can"):
        core.apply(Decision(preemptions=(Preempt("j0"),)), 1.0)
    with pytest.raises(PolicyError, match="before now"):
        core.apply(Decision(timers=(SetTimer(at_s=0.5, key="k"),)), 1.0)
    late = _job(1, submit_s=9.0)
    core2, _, _ = _core([late], [])
    late.state = JobState.QUEUED  # as if it had arrived early: the core refuses the start
    core2.queued[1] = late
    with pytest.raises(SimInvariantError, match="started before it arrived"):
        core2.start(late, ((0, 1),), 1.0)


def test_preempting_and_migrating_one_job_in_one_decision_is_refused() -> None:
    a = _job(0)
    core, _, _ = _core([a], [Decision(starts=(Start("j0", ((0, 1),)),))])
    core.run(until_s=0.0)
    both = Decision(preemptions=(Preempt("j0"),), migrations=(Migrate("j0", ((1, 1),)),))
    with pytest.raises(PolicyError, match="cannot migrate it: the job is queued"):
        core.apply(both, 1.0)


def test_run_until_stops_before_a_later_instant_and_resumes() -> None:
    jobs = [_job(0, submit_s=1.0), _job(1, submit_s=5.0)]
    core, _, events = _core(jobs, [])
    core.run(until_s=3.0)
    assert [e.job_id for e in events] == ["j0"] and core.due_s() == 5.0
    core.run(until_s=math.inf)
    assert [e.job_id for e in events] == ["j0", "j1"]
