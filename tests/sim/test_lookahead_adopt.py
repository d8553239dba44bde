"""The look-ahead's adoption rule (issue 49): what it adopts, within bounds on communication and
churn and beyond a margin widened to its own measured prediction error."""

from __future__ import annotations

import pytest

from unstall.sched.base import ClusterLayout
from unstall.sched.dally.lookahead_config import LookaheadConfig
from unstall.sim.lookahead_adopt import Outcome, choose, within_bounds

CONFIG = LookaheadConfig(comm_bound=0.02, churn_bound=0.05, churn_per_gain=0.0)
LAYOUT = ClusterLayout.regular(racks=1, nodes_per_rack=1, gpus_per_node=4)


def outcome(score: float, comm_s: float = 100.0, moves: int = 0) -> Outcome:
    return Outcome(score=score, present=score, comm_s=comm_s, moves=moves, rounds=1)


def test_the_best_candidate_within_the_bounds_is_adopted_past_the_margin() -> None:
    outcomes = {
        "default": outcome(100.0),
        "las-service": outcome(80.0, comm_s=150.0),  # best, but communicates much more
        "gittins-service": outcome(90.0, moves=2),  # within the churn bound of 40 jobs
    }
    assert choose(outcomes, "default", 40, 1, 0.02, CONFIG) == ("gittins-service", 0.1)
    # Beyond the margin only: a predicted 10% is not enough against a 12% error.
    assert choose(outcomes, "default", 40, 1, 0.12, CONFIG) == ("default", 0.0)


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
