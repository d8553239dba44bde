"""Malformed decisions from a policy stop the run with a PolicyError naming the policy, never with
another exception from deep inside the engine (``TypeError: unhashable type: 'list'``)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim_fakes import FakeSpeed
from unstall.loop.checks import PolicyError, check_decision_shape
from unstall.sched.base import (
    ClusterLayout,
    ClusterSnapshot,
    Decision,
    Migrate,
    Preempt,
    SetTimer,
    Start,
)
from unstall.sched.fifo import Fifo
from unstall.sim.congestion import CongestionSchedule
from unstall.sim.engine import Engine, EngineSettings
from unstall.sim.jobs import build_jobs

LAYOUT = ClusterLayout.regular(racks=1, nodes_per_rack=2, gpus_per_node=2)
JOBS = [("a", 0.0, 2, 5.0), ("b", 0.0, 1, 5.0)]


@dataclass
class OnceThenFifo(Fifo):
    """Plays ``first`` on its first round, then schedules as FIFO (so a run can finish)."""

    first: object = None
    name: str = "malformed"
    rounds: int = 0

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        self.rounds += 1
        if self.rounds == 1:
            return self.first  # type: ignore[return-value]
        return super().decide(snapshot, rng)


def simulate(decision: object) -> None:
    speed = FakeSpeed(LAYOUT)
    jobs = build_jobs(
        job_ids=[j[0] for j in JOBS],
        submit_s=[j[1] for j in JOBS],
        num_gpus=[j[2] for j in JOBS],
        duration_s=[j[3] for j in JOBS],
        models=["m"] * len(JOBS),
        speed=speed,
    )
    Engine(
        layout=LAYOUT,
        speed=speed,
        policy=OnceThenFifo(first=decision),
        jobs=jobs,
        congestion=CongestionSchedule(times_s=(0.0,), fractions=(0.0,)),
        settings=EngineSettings(restore_s=0.0, tick_s=None, seed=0),
    ).run()


# Values of every wrong type a user's policy might put anywhere, and some right ones.
junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 4),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=2),
    st.lists(st.integers(-1, 3), max_size=3),
    st.tuples(st.integers(-1, 3), st.integers(-1, 3)),
    st.dictionaries(st.text(max_size=1), st.integers(0, 2), max_size=1),
)
job_ids = st.one_of(st.sampled_from(["a", "b", "nope"]), junk)
share = st.one_of(
    junk,
    st.tuples(st.one_of(st.integers(-1, 2), junk), st.one_of(st.integers(0, 3), junk)),
    st.lists(st.integers(0, 2), min_size=2, max_size=2),
)
placements = st.one_of(junk, st.lists(share, max_size=3), st.lists(share, max_size=3).map(tuple))
orders = st.one_of(
    st.builds(Start, job_ids, placements),
    st.builds(Preempt, job_ids),
    st.builds(Migrate, job_ids, placements),
    st.builds(SetTimer, st.one_of(st.floats(allow_nan=True, allow_infinity=True), junk), junk),
)
# A decision's fields: mostly tuples of the right orders holding wrong values, else anything.
items = st.one_of(
    st.lists(orders, max_size=2).map(tuple),
    st.lists(st.one_of(orders, junk), max_size=3).map(tuple),
    orders,
    junk,
)
pairs = st.one_of(
    st.lists(st.tuples(st.one_of(st.text(max_size=1), junk), junk), max_size=2).map(tuple),
    st.lists(st.one_of(st.tuples(junk, junk), junk), max_size=2).map(tuple),
    junk,
)
decisions = st.one_of(
    st.builds(
        Decision,
        starts=items,
        preemptions=items,
        migrations=items,
        timers=items,
        telemetry=pairs,
    ),
    st.builds(Decision, starts=st.lists(orders, max_size=2).map(tuple)),
    st.builds(Decision, telemetry=pairs),
    st.builds(Decision, timers=items),
    orders,
    junk,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(decision=decisions)
def test_a_malformed_decision_is_a_policy_error_never_another_exception(decision: object) -> None:
    try:
        simulate(decision)
    except PolicyError as exc:
        assert "policy 'malformed' broke a rule" in str(exc)


@pytest.mark.parametrize(
    ("decision", "rule"),
    [
        (Decision(starts=(Start(["a"], ((0, 2),)),)), r"Start.job_id must be a job's id \(a str\)"),  # type: ignore[arg-type]
        (Decision(preemptions=(Preempt({"a": 1}),)), r"Preempt.job_id must be a job's id"),  # type: ignore[arg-type]
        (Decision(migrations=(Migrate(3, ((0, 2),)),)), r"got 3 in Decision.migrations"),  # type: ignore[arg-type]
        (Decision(timers=(SetTimer(math.inf, "t"),)), "set for inf; at_s must be a finite"),
        (Decision(timers=(SetTimer(True, "t"),)), "set for True; at_s must be a finite"),
        (Decision(telemetry=None), "Decision.telemetry must be a tuple of .* got NoneType"),  # type: ignore[arg-type]
        (Decision(telemetry=((["x"], 1.0),)), r"telemetry holds \(name, value\) pairs"),  # type: ignore[arg-type]
        (Decision(starts=(Start("a", ((True, 2),)),)), "node True does not exist"),
        (
            Decision(starts=(Start("a", ((0, 2.0),)),)),  # type: ignore[arg-type]
            "asks 2.0 GPUs of node 0; must be an integer",
        ),
    ],
)
def test_each_malformed_field_is_named(decision: Decision, rule: str) -> None:
    with pytest.raises(PolicyError, match=rf"policy 'malformed' broke a rule.*{rule}"):
        simulate(decision)


def test_a_well_formed_decision_is_returned_as_is() -> None:
    decision = Decision(starts=(Start("a", ((0, 2),)),), timers=(SetTimer(1.0, "t"),))
    assert check_decision_shape("p", decision) is decision
