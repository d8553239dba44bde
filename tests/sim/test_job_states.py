"""The simulator's job state machine: its guards (a job arrives once, never starts before it
arrives), what each transition counts (preemptions, migrations, on the job and the run) and
costs (the restore after a preemption and after a migration), and what a finish leaves behind
(all of the job's work done). The scheduling core that replaces the engine must keep each."""

from __future__ import annotations

import random

import pytest

from sim_fakes import FakeSpeed
from unstall.loop import RunOutcome
from unstall.loop.jobs import JobState, SimInvariantError
from unstall.sched.base import ClusterLayout, ClusterSnapshot, Decision, Migrate, Preempt, Start
from unstall.sched.fifo import Fifo
from unstall.sim.congestion import CongestionSchedule
from unstall.sim.engine import Engine, EngineSettings
from unstall.sim.jobs import build_jobs

from .test_engine import Scripted

NO_CONGESTION = CongestionSchedule(times_s=(0.0,), fractions=(0.0,))
TWO_NODES = ClusterLayout.regular(racks=1, nodes_per_rack=2, gpus_per_node=2)


def _engine(
    jobs: list[tuple[str, float, int, float]],
    policy: object,
    *,
    restore_s: float = 0.0,
    layout: ClusterLayout = TWO_NODES,
) -> Engine:
    speed = FakeSpeed(layout)
    sim_jobs = build_jobs(
        job_ids=[j[0] for j in jobs],
        submit_s=[j[1] for j in jobs],
        num_gpus=[j[2] for j in jobs],
        duration_s=[j[3] for j in jobs],
        models=["m"] * len(jobs),
        speed=speed,
    )
    return Engine(
        layout=layout,
        speed=speed,
        policy=policy,  # type: ignore[arg-type]
        jobs=sim_jobs,
        congestion=NO_CONGESTION,
        settings=EngineSettings(restore_s=restore_s, tick_s=None, seed=0),
    )


def _run(
    jobs: list[tuple[str, float, int, float]], script: dict[int, Decision], **kw: object
) -> RunOutcome:
    return _engine(jobs, Scripted(script), **kw).run()  # type: ignore[arg-type]


def test_a_job_that_arrives_twice_is_refused() -> None:
    engine = _engine([("a", 0.0, 1, 5.0)], Scripted({}))
    job = engine.core.jobs[0]
    engine.core.arrive(job, job.submit_s)
    assert job.state == JobState.QUEUED and job.index in engine.core.queued
    with pytest.raises(SimInvariantError, match="job a arrived twice"):
        engine.core.arrive(job, job.submit_s)


def test_a_job_never_starts_before_it_arrives() -> None:
    engine = _engine([("a", 10.0, 1, 5.0)], Scripted({}))
    job = engine.core.jobs[0]
    engine.core.arrive(job, job.submit_s)
    with pytest.raises(SimInvariantError, match="job a started before it arrived"):
        engine.core.start(job, ((0, 1),), 9.0)
    assert job.state == JobState.QUEUED and engine.core.cluster.free_by_node == [2, 2]


def test_a_preemption_is_counted_on_the_job_and_the_run_and_restores_before_it_resumes() -> None:
    script = {
        0: Decision(starts=(Start("a", ((0, 1),)),)),
        1: Decision(preemptions=(Preempt("a"),), starts=(Start("b", ((0, 1),)),)),
        2: Decision(starts=(Start("a", ((0, 1),)),)),
    }
    one_gpu = ClusterLayout.regular(racks=1, nodes_per_rack=1, gpus_per_node=1)
    out = _run([("a", 0.0, 1, 10.0), ("b", 4.0, 1, 3.0)], script, restore_s=2.0, layout=one_gpu)
    a, b = out.jobs
    assert (a.preemptions, b.preemptions, out.preemptions) == (1, 0, 1)
    assert (a.migrations, out.migrations) == (0, 0)
    # 4 s done, back at 7, 2 s restoring, 6 s left.
    assert a.finish_s == pytest.approx(15.0) and b.finish_s == 7.0


def test_a_migration_is_counted_on_the_job_and_the_run_and_pays_the_restore() -> None:
    script = {
        0: Decision(starts=(Start("a", ((0, 1), (1, 1))),)),
        1: Decision(migrations=(Migrate("a", ((1, 2),)),), starts=(Start("z", ((0, 1),)),)),
    }
    # z's arrival at t=4 calls the second round.
    out = _run([("a", 0.0, 2, 10.0), ("z", 4.0, 1, 1.0)], script, restore_s=3.0)
    a, _ = out.jobs
    assert (a.migrations, out.migrations) == (1, 1)
    assert (a.preemptions, out.preemptions) == (0, 0)
    # 2 iterations spread by t=4 (2 s each), 3 s restoring, 8 left at 1 s each: 4 + 3 + 8.
    assert a.finish_s == pytest.approx(15.0)


class _ScriptThenFifo(Scripted):
    """The script's decisions in its rounds, FIFO's in the others."""

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        scripted = super().decide(snapshot, rng)
        if len(self.seen) - 1 in self.script:
            return scripted
        return Fifo().decide(snapshot, rng)


# Durations that are no sums of whole iterations at the speeds they run at: the progress added
# up along the way is off from the job's work by a rounding error or two.
ODD_JOBS = [("a", 0.0, 2, 0.7), ("b", 0.1, 2, 1.3), ("c", 0.35, 1, 2.9), ("d", 0.45, 1, 0.11)]


def test_a_finished_job_has_done_exactly_its_work_however_its_progress_added_up() -> None:
    script = {
        0: Decision(starts=(Start("a", ((0, 1), (1, 1))),)),
        1: Decision(starts=(Start("b", ((0, 1), (1, 1))),)),
        2: Decision(preemptions=(Preempt("a"),), starts=(Start("c", ((0, 1),)),)),
        3: Decision(migrations=(Migrate("b", ((1, 2),)),)),
    }
    out = _engine(ODD_JOBS, _ScriptThenFifo(script), restore_s=0.05).run()
    assert all(job.state == JobState.DONE for job in out.jobs)
    assert [job.done_iters for job in out.jobs] == [job.work_iters for job in out.jobs]
    assert [(job.preemptions, job.migrations) for job in out.jobs] == [
        (1, 0),
        (0, 1),
        (0, 0),
        (0, 0),
    ]
    assert (out.preemptions, out.migrations) == (1, 1)
