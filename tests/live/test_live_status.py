"""The live run's status (`unstall.live.status`) on a scripted scheduling core.

The core here has a hand-driven driver: the test calls the core's transitions (arrive, start,
preempt, fail, settle) at the times it chooses, as the live driver would, and reads the status
without Ray or a terminal (tests/cli/test_cli_live_board.py draws it).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from unstall.live.status import (
    QueuedRow,
    RunningRow,
    estimated_done_iters,
    live_status,
)
from unstall.loop import (
    CoreSettings,
    Job,
    JobState,
    SchedulingCore,
    StopOutcome,
)
from unstall.loop.driver import StopVerb
from unstall.sched.base import (
    ClusterLayout,
    ClusterSnapshot,
    Decision,
    Placement,
    PolicyBase,
    Sensitivity,
)

# Two nodes of four GPUs, one rack.
LAYOUT = ClusterLayout.from_nodes(node_rack=(0, 0), node_gpus=(4, 4), node_type=("", ""))


class Idle(PolicyBase):
    """Never called: the test places jobs itself."""

    name = "idle"

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        return Decision()


class HandDriver:
    """The driver of a core whose transitions the test calls: launches and stops succeed."""

    def __init__(self) -> None:
        self.at = 0.0

    def now(self) -> float:
        return self.at

    def launch(self, job: Job, placement: Placement, now: float, *, migrating: bool) -> None:
        pass

    def stopping(self, jobs: Sequence[Job]) -> None:
        pass

    def stop(self, job: Job, now: float, verb: StopVerb) -> StopOutcome:
        return StopOutcome(kind="stopped", at_s=now)


def _job(index: int, *, gpus: int = 1, model: str = "resnet50", iter_s: float = 0.5) -> Job:
    job = Job(
        index=index,
        job_id=f"job{index}",
        submit_s=0.0,
        num_gpus=gpus,
        duration_s=100.0,  # 200 iterations at 0.5 s each
        model=model,
        cons_iter_s=0.5,
        sensitivity=Sensitivity.flat(1.0, 1.0),
    )
    job.iter_s = iter_s
    return job


def _core(jobs: list[Job]) -> SchedulingCore:
    core = SchedulingCore(
        layout=LAYOUT, policy=Idle(), jobs=jobs, settings=CoreSettings(max_failures=1)
    )
    core.attach(HandDriver())  # type: ignore[arg-type]
    return core


def test_a_running_job_shows_its_placement_and_its_progress_since_its_segment_began() -> None:
    spread = _job(0, gpus=2, iter_s=1.0)  # runs at half its consolidated speed (spread)
    core = _core([spread])
    core.arrive(spread, 0.0)
    core.start(spread, ((0, 1), (1, 1)), 10.0)
    status = live_status(core, 60.0)
    # 50 trace seconds at 1 s an iteration: 50 of its 200 iterations.
    assert status.running == (
        RunningRow(
            job_id="job0",
            model="resnet50",
            gpus=2,
            placement="0:1+1:1",
            progress=0.25,
            iterations_done=50.0,
            iterations_total=200.0,
            restarts=0,
        ),
    )
    assert (status.gpus_busy, status.gpus_total) == (2, 8)
    assert (status.running_total, status.queued_total, status.queued) == (1, 0, ())
    assert status.time_s == 60.0 and status.jobs_total == 1 and status.jobs_finished == 0


def test_progress_resumes_from_what_the_job_had_and_counts_its_restarts() -> None:
    job = _job(0)
    core = _core([job])
    core.arrive(job, 0.0)
    core.start(job, ((0, 1),), 0.0)
    core.preempt(job, 20.0)
    job.done_iters = 40.0  # what its processes reported as the segment ended (the driver's)
    core.start(job, ((1, 1),), 30.0)
    row = live_status(core, 40.0).running[0]
    # 40 iterations when it began again, then 10 s at 0.5 s an iteration.
    assert row.iterations_done == 60.0 and row.progress == pytest.approx(0.3)
    assert row.placement == "1:1" and row.restarts == 1
    # Never more than its work, however late its segment's end is seen.
    assert estimated_done_iters(job, 1e6) == job.work_iters == 200.0
    assert live_status(core, 1e6).running[0].progress == 1.0


def test_iterations_read_as_the_job_processes_count_them() -> None:
    job = _job(0)
    core = _core([job])
    core.arrive(job, 0.0)
    core.start(job, ((0, 1),), 0.0)
    # Real compute at speedup 10: a process iteration stands for 10 of the job's work.
    row = live_status(core, 50.0, scales={"job0": 10.0}).running[0]
    assert (row.iterations_done, row.iterations_total, row.progress) == (10.0, 20.0, 0.5)


def test_the_queue_lists_jobs_in_the_order_they_were_queued_then_how_many_more() -> None:
    jobs = [_job(i, gpus=4) for i in range(20)]
    core = _core(jobs)
    for job in jobs:
        core.arrive(job, float(job.index))  # job0 first
    core.start(jobs[0], ((0, 4),), 30.0)
    core.preempt(jobs[0], 40.0)  # back at the end of the queue
    status = live_status(core, 50.0, queued_rows=3)
    assert status.queued == (
        QueuedRow(job_id="job1", gpus=4, queued_since_s=1.0, waited_s=49.0, position=1),
        QueuedRow(job_id="job2", gpus=4, queued_since_s=2.0, waited_s=48.0, position=2),
        QueuedRow(job_id="job3", gpus=4, queued_since_s=3.0, waited_s=47.0, position=3),
    )
    assert (status.queued_total, status.queued_more) == (20, 17)
    whole = live_status(core, 50.0, queued_rows=100).queued
    assert [row.job_id for row in whole] == [f"job{i}" for i in range(1, 20)] + ["job0"]
    assert [row.position for row in whole] == list(range(1, 21))
    assert len(live_status(core, 50.0).queued) == 15  # the default: a screenful


def test_running_rows_keep_the_trace_order_up_to_their_limit() -> None:
    jobs = [_job(i) for i in range(6)]
    core = _core(jobs)
    for job in reversed(jobs):
        core.arrive(job, 0.0)
        core.start(job, ((job.index % 2, 1),), 0.0)  # started last first
    status = live_status(core, 1.0, running_rows=4)
    assert [row.job_id for row in status.running] == ["job0", "job1", "job2", "job3"]
    assert (status.running_total, status.running_more, status.gpus_busy) == (6, 2, 6)


def test_finished_failed_and_lost_gpus_are_counted() -> None:
    done, gave_up, waiting = _job(0), _job(1), _job(2)
    core = _core([done, gave_up, waiting])
    for job in (done, gave_up, waiting):
        core.arrive(job, 0.0)
    core.start(done, ((0, 1),), 0.0)
    core.settle(done, StopOutcome(kind="finished", at_s=5.0))
    core.fail(gave_up, 6.0, "out of memory", progressed=False, own=True)  # max_failures 1
    core.withdraw_node(1)
    status = live_status(core, 10.0)
    assert done.state == JobState.DONE and gave_up.state == JobState.FAILED
    assert (status.jobs_finished, status.jobs_failed, status.jobs_total) == (1, 1, 3)
    assert (status.gpus_busy, status.gpus_total) == (0, 4)
    assert [row.job_id for row in status.queued] == ["job2"]
