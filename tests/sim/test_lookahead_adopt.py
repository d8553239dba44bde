"""The look-ahead's adoption rule (issue 49): what it adopts, within bounds on communication and
churn and beyond a margin widened to its own measured prediction error."""

from __future__ import annotations

import pytest

from unstall.sched.base import ClusterLayout, ClusterSnapshot, JobView, Sensitivity
from unstall.sched.dally.lookahead_config import LookaheadConfig
from unstall.sim.lookahead_adopt import (
    MIN_SEEN_SHARE,
    Outcome,
    PredictionChecks,
    choose,
    confident_margin,
    seen_share,
    within_bounds,
)

CONFIG = LookaheadConfig(comm_bound=0.02, churn_bound=0.05, churn_per_gain=0.0, confidence=False)
LAYOUT = ClusterLayout.regular(racks=1, nodes_per_rack=1, gpus_per_node=4)


def outcome(
    score: float, comm_s: float = 100.0, moves: int = 0, seen: tuple[int, int] = (0, 0)
) -> Outcome:
    """``seen``: (present jobs done within the horizon, present jobs)."""
    return Outcome(
        score=score,
        present=score,
        comm_s=comm_s,
        moves=moves,
        rounds=1,
        present_done=seen[0],
        present_jobs=seen[1],
    )


def test_the_best_candidate_within_the_bounds_is_adopted_past_the_margin() -> None:
    outcomes = {
        "default": outcome(100.0),
        "las-service": outcome(80.0, comm_s=150.0),  # best, but communicates much more
        "gittins-service": outcome(90.0, moves=2),  # within the churn bound of 40 jobs
    }
    assert choose(outcomes, "default", 40, 1, 0.02, CONFIG) == ("gittins-service", 0.1, 0.02)
    # Beyond the margin only: a predicted 10% is not enough against a 12% error.
    assert choose(outcomes, "default", 40, 1, 0.12, CONFIG) == ("default", 0.0, 0.12)


def test_the_margin_is_widened_to_the_share_of_jobs_the_look_ahead_sees_finish() -> None:
    """A look-ahead that sees few of the jobs there now finish (jobs that run for days, a
    horizon of hours) predicts a reshuffle of waits: its margin is divided by the larger share
    seen finishing under the current setting or the candidate (at least MIN_SEEN_SHARE)."""
    config = LookaheadConfig(confidence=True)
    few = {"default": outcome(100.0, seen=(6, 84)), "las-service": outcome(97.0, seen=(5, 84))}
    # 3% predicted against 2% / (6/84) = 28%: kept.
    name, gain, margin = choose(few, "default", 84, 1, 0.02, config)
    assert (name, gain) == ("default", 0.0)
    assert margin == pytest.approx(0.02 * 84 / 6)
    # The same gain where most finish (30 of 40 under the candidate: 2% / 0.75): adopted.
    most = {"default": outcome(100.0, seen=(10, 40)), "las-service": outcome(97.0, seen=(30, 40))}
    assert choose(most, "default", 40, 1, 0.02, config)[:2] == ("las-service", pytest.approx(0.03))
    # None seen finishing under either: 20 times the margin, not without bound.
    blind = outcome(100.0, seen=(0, 9))
    assert confident_margin(0.02, blind, blind, config) == pytest.approx(0.02 / MIN_SEEN_SHARE)
    # A look-ahead that held no present job, or the rule off: the margin as given.
    assert seen_share(outcome(100.0)) == 1.0
    assert confident_margin(0.02, blind, blind, CONFIG) == 0.02


@pytest.mark.parametrize(
    ("candidate", "ok"),
    [
        (outcome(90.0, comm_s=102.0), True),  # at the bound
        (outcome(90.0, comm_s=102.5), False),
        (outcome(90.0, moves=3), True),  # 0.05 x 40 jobs + 1 a sample
        (outcome(90.0, moves=4), False),
    ],
)
def test_the_bounds_on_communication_and_churn(candidate: Outcome, ok: bool) -> None:
    assert within_bounds(candidate, outcome(100.0), 40, 1, CONFIG) is ok


def test_churn_must_buy_its_gain() -> None:
    """With ``churn_per_gain`` 5, a candidate may add 5 moves a job per unit of relative gain
    over the ``churn_bound``: 20 jobs, 25% better, up to (0.25 + 1.25) x 20 + 1 = 31 moves
    more; 50% better, up to (0.25 + 2.5) x 20 + 1 = 56."""
    config = LookaheadConfig(churn_bound=0.25, churn_per_gain=5.0)
    assert within_bounds(outcome(75.0, moves=31), outcome(100.0), 20, 1, config)
    assert not within_bounds(outcome(75.0, moves=32), outcome(100.0), 20, 1, config)
    assert within_bounds(outcome(50.0, moves=56), outcome(100.0), 20, 1, config)
    assert not within_bounds(outcome(50.0, moves=57), outcome(100.0), 20, 1, config)


def view(job_id: str, placement: tuple[tuple[int, int], ...] = ()) -> JobView:
    return JobView(
        job_id=job_id,
        index=int(job_id[1:]),
        num_gpus=1,
        submit_s=0.0,
        model="m",
        sensitivity=Sensitivity.flat(1.0, 1.0),
        attained_gpu_s_at_change=0.0,
        changed_s=0.0,
        running=bool(placement),
        placement=placement,
    )


def snapshot(now: float, finished: tuple[JobView, ...] = ()) -> ClusterSnapshot:
    return ClusterSnapshot(
        now=now,
        layout=LAYOUT,
        free_by_node=(4,),
        free_by_rack=(4,),
        queued=(),
        running=(),
        finished=finished,
    )


def test_a_prediction_is_checked_against_what_then_happened() -> None:
    checks = PredictionChecks(window=2)
    assert checks.error == 0.0  # no evidence yet
    # At 100 s: two jobs, predicted to spend 1,500 s in the system over the next 1,000 s.
    checks.expect(100.0, 1100.0, ["j1", "j2"], 1500.0)
    checks.observe(snapshot(300.0, (view("j1", ((0, 1),)),)))  # j1 finished at 300 s
    assert checks.error == 0.0  # not checked before the horizon has passed
    checks.observe(snapshot(1100.0))
    # It happened: 200 s (j1) + 1,000 s (j2) = 1,200 s; the prediction was 25% over.
    assert checks.error == pytest.approx(300.0 / 1200.0)
    checks.expect(1100.0, 2100.0, ["j2"], 1000.0)
    checks.observe(snapshot(2500.0))
    assert checks.error == pytest.approx((0.25 + 0.0) / 2)  # the mean of the last two
    checks.expect(2500.0, 3500.0, ["j3"], 500.0)
    checks.observe(snapshot(3500.0))
    assert checks.error == pytest.approx((0.0 + 0.5) / 2)  # the window keeps the last two
