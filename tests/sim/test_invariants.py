"""Properties every run must have, for every policy, on random traces (hypothesis)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim_fakes import FakeSpeed
from unstall.loop.jobs import JobState
from unstall.net import small
from unstall.sched import POLICIES, ClusterLayout, make_policy
from unstall.sched.base import ClusterSnapshot, Decision, SetTimer, Start
from unstall.sim import PolicyError, congestion_level, simulate
from unstall.sim.engine import Engine, EngineSettings
from unstall.sim.jobs import build_jobs
from unstall.traces import Trace

LAYOUT = ClusterLayout.regular(racks=2, nodes_per_rack=2, gpus_per_node=4)
MODELS = ["resnet50", "vgg16", "lstm_lm", "mlp"]

jobs_strategy = st.lists(
    st.tuples(
        st.floats(0, 500, allow_nan=False),
        st.sampled_from([1, 1, 2, 3, 4, 6, 8, 16]),
        st.floats(1, 300, allow_nan=False),
        st.sampled_from(MODELS),
    ),
    min_size=1,
    max_size=25,
)


@pytest.mark.parametrize("policy", sorted(POLICIES))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=jobs_strategy, congested=st.booleans())
def test_every_job_finishes_once_after_it_arrives_and_runs_no_faster_than_alone(
    policy: str, rows: list[tuple[float, int, float, str]], congested: bool
) -> None:
    rows = sorted(rows)
    level = congestion_level("high" if congested else "none")
    speed = FakeSpeed(LAYOUT)
    jobs = build_jobs(
        job_ids=[f"j{i}" for i in range(len(rows))],
        submit_s=[r[0] for r in rows],
        num_gpus=[r[1] for r in rows],
        duration_s=[r[2] for r in rows],
        models=[r[3] for r in rows],
        speed=speed,
    )
    engine = Engine(
        layout=LAYOUT,
        speed=speed,
        policy=make_policy(policy),
        jobs=jobs,
        congestion=replace(level, period_s=60.0).schedule(2000.0, seed=1),
        settings=EngineSettings(restore_s=5.0, tick_s=30.0, seed=0),
    )
    # The engine checks capacity and state on every change and raises if either breaks.
    out = engine.run()
    for job in out.jobs:
        assert job.state == JobState.DONE
        assert job.first_start_s >= job.submit_s
        # A job never runs faster than alone on its consolidated placement.
        assert job.finish_s - job.first_start_s >= job.duration_s * (1 - 1e-9)
    busy = list(out.timeline.busy_gpus)
    assert max(busy) <= LAYOUT.total_gpus
    assert busy[-1] == 0


def _trace(rows: list[tuple[float, int, float, str]]) -> Trace:
    frame = pd.DataFrame(
        {
            "job_id": [f"j{i}" for i in range(len(rows))],
            "submit_s": [r[0] for r in rows],
            "num_gpus": [r[1] for r in rows],
            "duration_s": [r[2] for r in rows],
            "model": [r[3] for r in rows],
        }
    )
    return Trace.from_frame(frame)


@settings(max_examples=10, deadline=None)
@given(rows=jobs_strategy, policy=st.sampled_from(sorted(POLICIES)))
def test_with_the_perf_model_jcts_are_never_shorter_than_durations(
    rows: list[tuple[float, int, float, str]], policy: str
) -> None:
    trace = _trace(sorted(rows))
    run = simulate(trace, small(), make_policy(policy), congestion=congestion_level("medium"))
    assert run.result.jobs_finished == len(rows)
    done = run.jobs
    assert (done["jct_s"] >= done["duration_s"] * (1 - 1e-9)).all()
    assert (done["first_start_s"] >= done["submit_s"]).all()
    assert run.result.comm_overhead_s >= 0
    assert 0 < run.result.gpu_util <= 1 + 1e-9


@dataclass
class Careless:
    """A user's policy that sometimes asks the impossible: random GPU counts on random nodes
    (some that do not exist), jobs that are not queued. It notes whether each of its decisions
    was possible, judged from the snapshot alone, so the test can hold the engine to it."""

    name: str = "careless"
    needs_oracle: bool = False
    impossible: list[str] = field(default_factory=list)

    def reset(self) -> None:
        self.impossible.clear()

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        queued = sorted(snapshot.queued, key=lambda v: v.submit_s)
        if not queued:
            return Decision()
        job = queued[0]
        job_id = job.job_id if rng.random() > 0.1 else "no-such-job"
        nodes = len(snapshot.layout.node_gpus)
        node = rng.randrange(nodes + 1)  # nodes itself does not exist
        placement = ((node, job.num_gpus),)
        free = snapshot.free_by_node[node] if node < nodes else 0
        if job_id != job.job_id or node >= nodes or free < job.num_gpus:
            if rng.random() < 0.5:
                return Decision(timers=(SetTimer(snapshot.now + 10.0, "retry"),))
            self.impossible.append(job_id)
        return Decision(starts=(Start(job_id, placement),))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=jobs_strategy, seed=st.integers(0, 1000))
def test_a_careless_user_policy_is_stopped_at_its_first_impossible_decision(
    rows: list[tuple[float, int, float, str]], seed: int
) -> None:
    """Never a corrected schedule: the run fails with a PolicyError exactly when the policy
    asked for something impossible, naming it and the job; otherwise every job finishes."""
    rows = [r for r in sorted(rows) if r[1] <= 4]  # jobs that fit one node: a start can succeed
    if not rows:
        return
    policy = Careless()
    try:
        run = simulate(_trace(rows), small(), policy, seed=seed, tick_s=10.0)
    except PolicyError as exc:
        assert policy.impossible, f"refused a possible decision: {exc}"
        assert "policy 'careless'" in str(exc) and policy.impossible[0] in str(exc)
        return
    assert not policy.impossible
    assert run.result.jobs_finished == len(rows)
