from __future__ import annotations

import inspect
import math
import pickle
import random
from dataclasses import dataclass, field, replace

import pytest

from sim_fakes import FakeSpeed
from unstall.loop.checks import PolicyError
from unstall.loop.failures import PolicyCrashError
from unstall.loop.jobs import JobState, SimInvariantError
from unstall.net import small
from unstall.sched.base import (
    ClusterLayout,
    ClusterSnapshot,
    Decision,
    Migrate,
    Placement,
    Preempt,
    SetTimer,
    Start,
)
from unstall.sched.fifo import Fifo
from unstall.sim.congestion import CongestionSchedule
from unstall.sim.engine import Engine, EngineSettings
from unstall.sim.jobs import build_jobs
from unstall.sim.run import simulate
from unstall.traces import default_trace

NO_CONGESTION = CongestionSchedule(times_s=(0.0,), fractions=(0.0,))


def run(
    layout: ClusterLayout,
    jobs: list[tuple[str, float, int, float]],
    policy: object,
    *,
    restore_s: float = 0.0,
    congestion: CongestionSchedule = NO_CONGESTION,
    speed: FakeSpeed | None = None,
) -> dict[str, tuple[float, float]]:
    """Run and return job_id -> (first start, finish)."""
    speed = speed or FakeSpeed(layout)
    sim_jobs = build_jobs(
        job_ids=[j[0] for j in jobs],
        submit_s=[j[1] for j in jobs],
        num_gpus=[j[2] for j in jobs],
        duration_s=[j[3] for j in jobs],
        models=["m"] * len(jobs),
        speed=speed,
    )
    engine = Engine(
        layout=layout,
        speed=speed,
        policy=policy,  # type: ignore[arg-type]
        jobs=sim_jobs,
        congestion=congestion,
        settings=EngineSettings(restore_s=restore_s, tick_s=None, seed=0),
    )
    out = engine.run()
    assert all(j.state == JobState.DONE for j in out.jobs)
    return {j.job_id: (j.first_start_s, j.finish_s) for j in out.jobs}


@dataclass
class Scripted:
    """A policy that plays back decisions by round number, and records what it was shown."""

    script: dict[int, Decision]
    name: str = "scripted"
    needs_oracle: bool = False
    seen: list[ClusterSnapshot] = field(default_factory=list)

    def reset(self) -> None:
        self.seen.clear()

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        # The engine's collections are valid for this round only: keep copies.
        self.seen.append(
            replace(
                snapshot,
                queued=tuple(snapshot.queued),
                running=tuple(snapshot.running),
                spread_running=tuple(snapshot.spread_running),
            )
        )
        return self.script.get(len(self.seen) - 1, Decision())


ONE_GPU = ClusterLayout.regular(racks=1, nodes_per_rack=1, gpus_per_node=1)
TWO_NODES = ClusterLayout.regular(racks=1, nodes_per_rack=2, gpus_per_node=2)


def test_fifo_runs_jobs_back_to_back_on_one_gpu() -> None:
    times = run(ONE_GPU, [("a", 0.0, 1, 10.0), ("b", 1.0, 1, 5.0)], Fifo())
    assert times == {"a": (0.0, 10.0), "b": (10.0, 15.0)}


def test_spread_job_runs_at_the_speed_of_its_link() -> None:
    # A 2-GPU job forced onto two nodes: 1 s compute + 8 Gbit over an 8 Gbps NIC = 2 s/iter.
    policy = Scripted({0: Decision(starts=(Start("a", ((0, 1), (1, 1))),))})
    times = run(TWO_NODES, [("a", 0.0, 2, 10.0)], policy)
    assert times["a"] == (0.0, pytest.approx(20.0))


def test_contention_slows_both_jobs_and_finish_is_replanned_when_one_leaves() -> None:
    # Both jobs cross both NICs: each gets 4 Gbps -> 3 s/iter. Job b has 2 iterations: done at 6.
    # Job a then has 10 - 2 = 8 iterations left at 2 s/iter: finishes at 6 + 16 = 22.
    both = Decision(starts=(Start("a", ((0, 1), (1, 1))), Start("b", ((0, 1), (1, 1)))))
    times = run(TWO_NODES, [("a", 0.0, 2, 10.0), ("b", 0.0, 2, 2.0)], Scripted({0: both}))
    assert times["b"] == (0.0, pytest.approx(6.0))
    assert times["a"] == (0.0, pytest.approx(22.0))


def test_background_congestion_takes_its_share_of_the_link() -> None:
    # Half the NIC taken from t=0: 4 Gbps -> 3 s/iter; from t=30 none: 2 s/iter.
    sched = CongestionSchedule(times_s=(0.0, 30.0), fractions=(0.5, 0.0))
    policy = Scripted({0: Decision(starts=(Start("a", ((0, 1), (1, 1))),))})
    times = run(TWO_NODES, [("a", 0.0, 2, 20.0)], policy, congestion=sched)
    # 10 iterations by t=30, 10 left at 2 s each.
    assert times["a"][1] == pytest.approx(50.0)


def test_preemption_pays_restore_and_keeps_progress() -> None:
    script = {
        0: Decision(starts=(Start("a", ((0, 1),)),)),
        1: Decision(preemptions=(Preempt("a"),), starts=(Start("b", ((0, 1),)),)),
        2: Decision(starts=(Start("a", ((0, 1),)),)),
    }
    times = run(ONE_GPU, [("a", 0.0, 1, 10.0), ("b", 4.0, 1, 3.0)], Scripted(script), restore_s=2)
    assert times["b"] == (4.0, 7.0)
    # a ran 4 s, restarts at 7, restores for 2 s, then 6 s of work left.
    assert times["a"] == (0.0, pytest.approx(15.0))


def test_migration_onto_one_node_speeds_a_job_up() -> None:
    script = {
        0: Decision(starts=(Start("a", ((0, 1), (1, 1))),)),
        1: Decision(migrations=(Migrate("a", ((1, 2),)),), starts=(Start("z", ((2, 1),)),)),
    }
    # The arrival of z at t=4 gives the policy its second round.
    layout = ClusterLayout.regular(racks=1, nodes_per_rack=3, gpus_per_node=2)
    times = run(layout, [("a", 0.0, 2, 10.0), ("z", 4.0, 1, 1.0)], Scripted(script))
    # 2 iterations spread by t=4 (2 s each), 8 left at 1 s each.
    assert times["a"][1] == pytest.approx(12.0)


def test_a_placement_written_with_lists_is_kept_as_tuples() -> None:
    """A user's ``Start(job, [(0, 1), (1, 1)])`` or ``[[1, 2]]`` is the placement it spells:
    it runs as the tuple form would, and every later view shows (hashable) tuples."""
    script = {
        0: Decision(starts=(Start("a", [(0, 1), (1, 1)]),)),  # type: ignore[arg-type]
        1: Decision(
            migrations=(Migrate("a", [[1, 2]]),),  # type: ignore[arg-type]
            starts=(Start("z", [[2, 1]]),),  # type: ignore[arg-type]
        ),
    }
    layout = ClusterLayout.regular(racks=1, nodes_per_rack=3, gpus_per_node=2)
    policy = Scripted(script)
    times = run(layout, [("a", 0.0, 2, 10.0), ("z", 4.0, 1, 10.0)], policy)
    assert times["a"][1] == pytest.approx(12.0)  # as test_migration_onto_one_node_speeds_a_job_up
    views = [v for snap in policy.seen for v in (*snap.running, *snap.finished)]
    seen = {(v.job_id, v.placement) for v in views}
    assert seen == {("a", ((0, 1), (1, 1))), ("a", ((1, 2),)), ("z", ((2, 1),))}
    assert all(type(share) is tuple for _, placement in seen for share in placement)


def test_a_placement_of_lists_runs_on_the_perf_model_too() -> None:
    """The perf model keys its caches by placement: a list there was a bare
    ``TypeError: unhashable type: 'list'`` from perf_speed.py."""

    class ListFifo(Fifo):
        def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
            starts = super().decide(snapshot, rng).starts
            as_lists = [Start(s.job_id, [list(share) for share in s.placement]) for s in starts]
            return Decision(starts=tuple(as_lists))  # type: ignore[arg-type]

    trace = default_trace()
    lists = simulate(trace, small(), ListFifo(), max_jobs=30).result
    tuples = simulate(trace, small(), Fifo(), max_jobs=30).result
    assert lists.jobs_finished == 30 and lists.avg_jct_s == tuples.avg_jct_s


@pytest.mark.parametrize("placement", [[(0,)], [(0, 1, 2)], "ab", [5], None])
def test_a_placement_that_is_no_pairs_is_named(placement: object) -> None:
    policy = Scripted({0: Decision(starts=(Start("a", placement),))})  # type: ignore[arg-type]
    with pytest.raises(PolicyError, match=r"job 'a': a placement is \(node, GPUs\) pairs, got"):
        run(TWO_NODES, [("a", 0.0, 1, 1.0)], policy)


def test_policy_errors_are_caught() -> None:
    bad_start = Scripted({0: Decision(starts=(Start("a", ((0, 2),)),))})
    with pytest.raises(PolicyError, match="job 'a': asks 2 GPUs of node 0, which has only 1"):
        run(ONE_GPU, [("a", 0.0, 2, 1.0)], bad_start)
    unknown = Scripted({0: Decision(preemptions=(Preempt("nope"),))})
    with pytest.raises(PolicyError, match="job 'nope': cannot preempt it: the job is not in the"):
        run(ONE_GPU, [("a", 0.0, 1, 1.0)], unknown)
    twice = Scripted({0: Decision(starts=(Start("a", ((0, 1),)), Start("a", ((0, 1),))))})
    with pytest.raises(PolicyError, match="job 'a': the decision starts it twice"):
        run(TWO_NODES, [("a", 0.0, 1, 1.0)], twice)


def test_snapshot_shows_attained_service_and_queue() -> None:
    policy = Scripted(
        {0: Decision(starts=(Start("a", ((0, 2),)),)), 1: Decision(starts=(Start("b", ((1, 2),)),))}
    )
    run(TWO_NODES, [("a", 0.0, 2, 10.0), ("b", 3.0, 2, 1.0)], policy)
    # Round 1 happens at b's arrival (t=3): a ran 3 s on 2 GPUs.
    snap = policy.seen[1]
    assert snap.now == 3.0
    (a,) = snap.running
    assert a.attained_gpu_s(snap.now) == pytest.approx(6.0)
    assert [j.job_id for j in snap.queued] == ["b"]
    assert snap.free_by_node == (0, 2)
    placement: Placement = a.placement
    assert placement == ((0, 2),)


def test_snapshot_reports_finished_jobs_once_and_the_spread_ones() -> None:
    script = {
        0: Decision(starts=(Start("a", ((0, 1), (1, 1))), Start("b", ((0, 1),)))),
        2: Decision(starts=(Start("c", ((0, 1),)),)),
    }
    policy = Scripted(script)
    run(TWO_NODES, [("a", 0.0, 2, 10.0), ("b", 0.0, 1, 3.0), ("c", 5.0, 1, 1.0)], policy)
    first = policy.seen[0]
    assert first.finished == () and first.spread_running == ()
    # Round 1 comes at b's finish (t=3): b is reported finished, a is the spread running job.
    second = policy.seen[1]
    assert second.now == 3.0
    assert [j.job_id for j in second.finished] == ["b"]
    assert [j.job_id for j in second.spread_running] == ["a"]
    assert second.spread_jobs_by_node == (1, 1)
    third = policy.seen[2]  # c arrives at t=5: nothing new has finished
    assert third.finished == ()


def test_a_snapshot_kept_past_its_round_refuses_to_be_read() -> None:
    @dataclass
    class Keeper(Fifo):
        kept: list[ClusterSnapshot] = field(default_factory=list)

        def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
            assert len(snapshot.queued) <= 1  # readable during the round
            self.kept.append(snapshot)
            return super().decide(snapshot, rng)

    keeper = Keeper()
    layout = ClusterLayout.regular(racks=1, nodes_per_rack=1, gpus_per_node=4)
    run(layout, [("a", 0.0, 1, 10.0)], keeper)
    first = keeper.kept[0]
    with pytest.raises(SimInvariantError, match=r"snapshot\.queued was read after its round"):
        list(first.queued)
    with pytest.raises(SimInvariantError, match=r"snapshot\.running was read after its round"):
        len(first.running)


def test_a_policy_indexes_and_slices_the_snapshots_jobs_as_a_tuple_during_its_round() -> None:
    @dataclass
    class OldestFirst(Fifo):
        kept: list[ClusterSnapshot] = field(default_factory=list)

        def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
            self.kept.append(snapshot)
            if not snapshot.queued:
                return Decision()
            oldest = snapshot.queued[0]
            assert snapshot.queued[-1] is tuple(snapshot.queued)[-1]
            assert snapshot.queued[:2] == tuple(snapshot.queued)[:2]
            assert snapshot.running[:] == tuple(snapshot.running)
            free = snapshot.free_by_node.index(max(snapshot.free_by_node))
            if snapshot.free_by_node[free] < oldest.num_gpus:
                return Decision()
            return Decision(starts=(Start(oldest.job_id, ((free, oldest.num_gpus),)),))

    policy = OldestFirst()
    jobs = [("a", 0.0, 2, 5.0), ("b", 0.0, 2, 5.0), ("c", 0.0, 1, 5.0)]
    finished = run(TWO_NODES, jobs, policy)
    assert finished == {"a": (0.0, 5.0), "b": (5.0, 10.0), "c": (10.0, 15.0)}
    with pytest.raises(SimInvariantError, match=r"snapshot\.queued was read after its round"):
        policy.kept[0].queued[0]


@pytest.mark.parametrize(
    ("decision", "rule"),
    [
        (Decision(starts=(Start("a", ((0, 3),)),)), "asks 3 GPUs of node 0, which has only 2"),
        (Decision(starts=(Start("a", ((5, 1),)),)), r"node 5 does not exist \(nodes 0..1\)"),
        (Decision(starts=(Start("a", ((0, 1), (0, 1))),)), "node 0 appears twice"),
        (
            Decision(starts=(Start("a", ((0, 0), (1, 1))),)),
            "asks 0 GPUs of node 0; must be an integer >= 1",
        ),
        (Decision(starts=(Start("a", ((0, 1),)),)), r"needs 2 GPUs, its placement \(\(0, 1\),\)"),
        (
            Decision(starts=(Start("a", ((0, 2),)), Start("b", ((0, 2),)))),
            "GPUs taken twice: node 0 has 0 free GPUs, the placement asks 2",
        ),
        (
            Decision(starts=(Start("a", ((0, 1), (1, 1))), Start("b", ((0, 2),)))),
            "GPUs taken twice: node 0 has 1 free GPUs, the placement asks 2",
        ),
        (
            Decision(starts=(Start("c", ((1, 1),)),)),
            "cannot start it: the job is not yet submitted",
        ),
        (Decision(migrations=(Migrate("a", ((1, 2),)),)), "cannot migrate it: the job is queued"),
        (Decision(timers=(SetTimer(-1.0, "t"),)), r"timer 't' set for -1.0 s, before now"),
        # NaN compares false with now: pushed on the event heap, it looped the run for ever.
        (Decision(timers=(SetTimer(math.nan, "t"),)), "timer 't' set for nan; at_s must be a"),
        (
            Decision(starts=Start("a", ((0, 2),))),  # type: ignore[arg-type]
            r"Decision.starts must be a tuple of Start, got one Start: write starts=\(Start",
        ),
        (
            Decision(preemptions=("a",)),  # type: ignore[arg-type]
            "Decision.preemptions must be a tuple of Preempt, got a str among them",
        ),
        (
            Decision(telemetry=("x", 1.0)),  # type: ignore[arg-type]
            r"telemetry holds \(name, value\) pairs, got 'x' among them",
        ),
    ],
)
def test_an_impossible_decision_names_the_policy_the_job_and_the_rule(
    decision: Decision, rule: str
) -> None:
    jobs = [("a", 0.0, 2, 5.0), ("b", 0.0, 2, 5.0), ("c", 50.0, 1, 5.0)]
    with pytest.raises(PolicyError, match=rf"policy 'scripted' broke a rule.*{rule}"):
        run(TWO_NODES, jobs, Scripted({0: decision}))


class TimerNow(Fifo):
    """FIFO that asks, every round, to be called again now."""

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        decision = super().decide(snapshot, rng)
        return replace(decision, timers=(SetTimer(snapshot.now, "again"),))


def test_a_policy_that_keeps_setting_timers_for_now_is_stopped_naming_them() -> None:
    # Time would never move on: without the stop the run loops at t=0 for ever.
    with pytest.raises(
        PolicyError,
        match=r"policy 'fifo' broke a rule: decide\(\) was called 1000 times at 0.0 s without "
        r"time moving on: a timer set for now \(SetTimer at_s == snapshot.now, here 'again'\)",
    ):
        run(TWO_NODES, [("a", 0.0, 1, 1.0)], TimerNow())


def test_one_timer_for_now_and_jobs_that_finish_as_they_start_are_no_loop() -> None:
    once = Scripted(
        {0: Decision(timers=(SetTimer(0.0, "now"),)), 1: Decision(starts=(Start("a", ((0, 1),)),))}
    )
    assert run(ONE_GPU, [("a", 0.0, 1, 1.0)], once) == {"a": (0.0, 1.0)}
    assert once.seen[1].fired_timers == ("now",) and once.seen[1].now == 0.0
    # 1,500 jobs too short to move the clock at t=1e9 (1e9 + 1e-9 == 1e9), one GPU: each round
    # starts one, which finishes at the same instant and calls the next round there.
    jobs = [(f"j{i}", 1e9, 1, 1e-9) for i in range(1500)]
    finished = run(ONE_GPU, jobs, Fifo())
    assert {finish for _, finish in finished.values()} == {1e9}


def test_a_decide_that_returns_no_decision_is_named() -> None:
    class Lazy(Scripted):
        def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
            return None  # type: ignore[return-value]

    with pytest.raises(PolicyError, match="decide\\(\\) must return a Decision, got NoneType"):
        run(TWO_NODES, [("a", 0.0, 1, 1.0)], Lazy({}))


class Crashing(Scripted):
    """decide() raises on its first round; its line is named in the error."""

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        return self.script[int(1 / 0)]


class CrashingInALibrary(Scripted):
    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        import json

        return json.loads("not json")  # type: ignore[no-any-return]


class CrashingReset(Scripted):
    def reset(self) -> None:
        raise KeyError("state")


def _line_of(cls: type, text: str) -> int:
    lines, first = inspect.getsourcelines(cls)
    return first + next(i for i, line in enumerate(lines) if text in line)


def test_a_policy_that_raises_is_named_with_the_exception_and_the_line_that_raised() -> None:
    line = _line_of(Crashing, "1 / 0")
    with pytest.raises(PolicyCrashError) as caught:
        run(TWO_NODES, [("a", 0.0, 1, 1.0)], Crashing({}))
    assert str(caught.value) == (
        "policy 'scripted' failed: ZeroDivisionError: division by zero "
        f"(test_engine.py:{line}, in decide)"
    )
    assert isinstance(caught.value.__cause__, ZeroDivisionError)  # the traceback, for a debugger
    back = pickle.loads(pickle.dumps(caught.value))  # a sweep's cells run in other processes
    assert type(back) is PolicyCrashError and vars(back) == vars(caught.value)
    with pytest.raises(
        PolicyCrashError, match=r"KeyError: 'state' \(test_engine.py:\d+, in reset\)"
    ):
        run(TWO_NODES, [("a", 0.0, 1, 1.0)], CrashingReset({}))


def test_an_error_raised_in_a_library_the_policy_called_names_the_policy_line_too() -> None:
    line = _line_of(CrashingInALibrary, "json.loads")
    with pytest.raises(PolicyCrashError) as caught:
        run(TWO_NODES, [("a", 0.0, 1, 1.0)], CrashingInALibrary({}))
    assert f"in raw_decode; from test_engine.py:{line}, in decide)" in str(caught.value)
