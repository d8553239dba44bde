"""The look-ahead tuner's backtest (``rank_by=backtest`` or ``both``): it replays the recent past
from the cluster as a snapshot showed it, with the real arrivals since and the real run times of
the jobs that have finished since (as the snapshots showed them), draws only the others, at
least what they have run by now, and keeps no more than a window back."""

from __future__ import annotations

import dataclasses
import random

import pytest

from snapshots import job_view
from unstall.errors import ConfigError
from unstall.sched.base import ClusterLayout, ClusterSnapshot, JobView, Sensitivity
from unstall.sched.dally.history import RunHistory
from unstall.sched.dally.lookahead_config import LookaheadConfig
from unstall.sim import simulate
from unstall.sim.lookahead import LookaheadDally
from unstall.sim.lookahead_backtest import PastRecord
from unstall.sim.lookahead_plan import Arrival
from unstall.traces import SyntheticTraceConfig, generate

LAYOUT = ClusterLayout.regular(racks=1, nodes_per_rack=1, gpus_per_node=4)
FLAT = Sensitivity.flat(1.0, 1.0)


def snap(
    now: float,
    running: tuple[JobView, ...] = (),
    queued: tuple[JobView, ...] = (),
    finished: tuple[JobView, ...] = (),
) -> ClusterSnapshot:
    return ClusterSnapshot(
        now=now,
        layout=LAYOUT,
        free_by_node=(0,),
        free_by_rack=(0,),
        queued=queued,
        running=running,
        finished=finished,
    )


def arrival(view: JobView) -> Arrival:
    return Arrival(view.submit_s, view.num_gpus, view.model, view.sensitivity)


def test_the_past_is_replayed_with_the_real_run_times_of_the_jobs_that_finished() -> None:
    """At 0 a 3-GPU job runs and a 2-GPU one waits; a 1-GPU job arrives at 100 and finishes
    at 400 (300 s run); at 4000 the first still runs and the second still waits."""
    record = PastRecord(window_s=3600.0, every_s=900.0, max_jobs=150)
    big = job_view("j0", 3, sensitivity=FLAT, placement=((0, 3),), changed_s=0.0)
    waiting = job_view("j1", 2, sensitivity=FLAT, submit_s=0.0, changed_s=0.0)
    small = job_view("j2", 1, sensitivity=FLAT, submit_s=100.0, changed_s=100.0)
    record.note_arrival("j1", arrival(waiting))
    record.observe(snap(0.0, running=(big,), queued=(waiting,)))
    record.note_arrival("j2", arrival(small))
    record.observe(snap(100.0, running=(big,), queued=(waiting, small)))
    ran = dataclasses.replace(small, running=True, placement=((0, 1),), changed_s=100.0)
    record.observe(snap(400.0, running=(big,), queued=(waiting,), finished=(ran,)))
    now = snap(4000.0, running=(big,), queued=(waiting,))
    record.observe(now)
    start = record.start(4000.0)
    assert start is not None and start.at_s == 0.0
    history = RunHistory(prior_runtime_s=600.0)
    for runtime in (50.0, 200.0, 5000.0, 9000.0):
        history.observe_finish(runtime, 1)
    jobs = {j.job_id: j for j in record.plan(start, now, history, random.Random(1))}
    assert list(jobs) == ["j0", "j1", "j2"]
    # The finished one: its real run time, arriving when it did (relative to the start).
    assert jobs["j2"].remaining_s == 300.0 and jobs["j2"].arrive_s == 100.0
    # The running one: placed where it ran, drawn at least as long as it has run by now.
    assert jobs["j0"].placement == ((0, 3),)
    for seed in range(20):
        drawn = {j.job_id: j for j in record.plan(start, now, history, random.Random(seed))}
        assert drawn["j0"].remaining_s >= 4000.0
        assert drawn["j1"].remaining_s >= 1.0 and drawn["j1"].arrive_s == 0.0


def test_it_starts_a_window_back_and_forgets_what_is_older() -> None:
    record = PastRecord(window_s=3600.0, every_s=900.0, max_jobs=150)
    for i in range(12):  # a state every 900 s, one arrival each, finished at once
        view = job_view(f"j{i}", 1, sensitivity=FLAT, submit_s=i * 900.0, changed_s=i * 900.0)
        record.note_arrival(view.job_id, arrival(view))
        done = dataclasses.replace(view, running=True, placement=((0, 1),))
        record.observe(snap(i * 900.0 + 1.0, queued=(view,), finished=(done,)))
    now = 11 * 900.0 + 1.0
    start = record.start(now)
    assert start is not None and start.at_s == now - 3600.0  # the latest a window back
    assert record.states[0] is start  # nothing older kept
    assert all(a.submit_s >= start.at_s - 1.0 for _, a in record.arrivals)
    assert set(record.runtimes) == {f"j{i}" for i in range(7, 12)}
    # Before any state, no backtest.
    assert PastRecord(window_s=3600.0, every_s=900.0, max_jobs=5).start(10.0) is None


def test_its_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="rank_by"):
        LookaheadConfig(rank_by="hindsight")
    with pytest.raises(ConfigError, match="rank_by"):
        LookaheadConfig(rank_by="backtest", target="makespan")
    with pytest.raises(ConfigError, match="backtest_s"):
        LookaheadConfig(backtest_s=0.0)


def _trace():  # type: ignore[no-untyped-def]
    return generate(
        SyntheticTraceConfig(
            jobs=80, seed=3, load=1.4, cluster_gpus=32, multi_gpu_share=0.3, max_gpus=8
        )
    )


@pytest.mark.parametrize("rank_by", ["backtest", "both"])
def test_a_run_ranked_by_the_backtest_is_deterministic(rank_by: str) -> None:
    def run():  # type: ignore[no-untyped-def]
        config = LookaheadConfig(period_s=1800.0, horizon_s=3600.0, rank_by=rank_by)
        policy = LookaheadDally(config)
        return policy, simulate(_trace(), "small", policy)

    policy, result = run()
    assert policy.history and any(
        h.scores != tuple((n, 1.0) for n, _ in h.scores) for h in policy.history
    )
    again, result_again = run()
    assert again.history == policy.history
    assert result_again.jobs.equals(result.jobs)
    assert result.result.jobs_finished == len(result.jobs)


def test_the_backtest_never_reads_true_durations() -> None:
    """Jobs not finished at the first tuning run 10 times longer in a second trace: up to that
    tuning both runs are the same, so a backtest that read no duration (only what finished
    jobs ran, from the snapshots) tunes the same there."""
    config = LookaheadConfig(period_s=1800.0, horizon_s=3600.0, rank_by="backtest")
    trace = _trace()
    policy = LookaheadDally(config)
    run = simulate(trace, "small", policy)
    first = policy.history[0]
    later = run.jobs.set_index("job_id")["finish_s"] > first.at_s
    frame = trace.jobs.copy()
    longer = frame["job_id"].map(later).fillna(False).astype(bool)
    assert longer.any()
    frame.loc[longer, "duration_s"] *= 10
    changed = LookaheadDally(config)
    simulate(dataclasses.replace(trace, jobs=frame), "small", changed)
    assert changed.history[0] == first
