"""A job's work and network sensitivity come from its best placement on the cluster it runs on,
node-group files included (issue 50): alone at that placement a job takes its trace duration,
and spread it takes its duration times its sensitivity, on irregular clusters too."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from unstall.net import NodeGroup, TopologyConfig, load_topology
from unstall.net.hardware import NIC_PRESETS
from unstall.net.topology import CALIBRATED_NETWORK_EFFICIENCY
from unstall.sched import ClusterSnapshot, Decision, Placement, Start, make_policy
from unstall.sim import simulate
from unstall.sim.perf_speed import PerfSpeedModel
from unstall.traces import Trace
from unstall.workload.perf import plan_time

# The cluster of the issue: three nodes of two V100s, two in rack 0 and one in rack 1.
ISSUE_CLUSTER = """name = "irregular"
nic = "25g"
oversubscription = 2
[[nodes]]
count = 2
gpus_per_node = 2
rack = 0
[[nodes]]
count = 1
gpus_per_node = 2
rack = 1
"""


def one_job(model: str, num_gpus: int, duration_s: float) -> Trace:
    return Trace.from_frame(
        pd.DataFrame(
            {
                "job_id": ["j"],
                "submit_s": [0.0],
                "num_gpus": [num_gpus],
                "duration_s": [duration_s],
                "model": [model],
            }
        )
    )


@dataclass
class Pinned:
    """Starts every queued job at one given placement: a job alone where the test wants it."""

    placement: Placement
    name: str = "pinned"
    needs_oracle: bool = False

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        return Decision(starts=tuple(Start(j.job_id, self.placement) for j in snapshot.queued))

    def reset(self) -> None:
        """Nothing to reset."""


def run_alone(trace: Trace, cluster: TopologyConfig, placement: Placement) -> pd.Series:
    return simulate(trace, cluster, Pinned(placement)).jobs.iloc[0]


def test_the_issue_cluster_runs_a_job_alone_at_its_trace_duration(tmp_path: Path) -> None:
    path = tmp_path / "irregular.toml"
    path.write_text(ISSUE_CLUSTER)
    cluster = load_topology(path)
    # Its only placement is the whole cluster, over both racks: that is its best, so it takes
    # its 1,200 s (it took 2,275 s, measured against a cluster of two equal racks).
    job = simulate(one_job("resnet101", 6, 1200.0), cluster, make_policy("fifo")).jobs.iloc[0]
    assert job["jct_s"] == pytest.approx(1200.0, rel=1e-9)
    assert job["comm_overhead_s"] == pytest.approx(0.0, abs=1e-6)
    assert (job["sensitivity_node"], job["sensitivity_rack"]) == (1.0, 1.0)
    # A vgg16 job of 4 GPUs fits rack 0; over the racks it crosses rack 1's thin uplink, and
    # its sensitivity says so (it said 1.00005 and the job ran 1.9x its duration).
    speed = PerfSpeedModel(cluster)
    sens = speed.sensitivity("vgg16", 4)
    assert sens.rack[0] > 1.5
    spread = speed.spread(4, across_racks=True, model="vgg16")
    job = run_alone(one_job("vgg16", 4, 2400.0), cluster, spread)
    assert job["jct_s"] == pytest.approx(2400.0 * sens.rack[0], rel=1e-9)


@st.composite
def node_group_files(draw: st.DrawFn) -> TopologyConfig:
    """Random one-type clusters of node groups: 1-5 groups of 1-3 nodes of 1-8 GPUs in 1-3
    racks, a NIC and an oversubscription."""
    racks = draw(st.integers(1, 3))
    groups = tuple(
        NodeGroup(
            count=draw(st.integers(1, 3)),
            gpus_per_node=draw(st.integers(1, 8)),
            rack=draw(st.integers(0, racks - 1)),
        )
        for _ in range(draw(st.integers(1, 5)))
    )
    return TopologyConfig(
        name="random",
        nodes=groups,
        nic=NIC_PRESETS[draw(st.sampled_from(["10g", "25g", "100g"]))].link(),
        oversubscription=draw(st.sampled_from([1.0, 2.0, 4.0])),
        network_efficiency=CALIBRATED_NETWORK_EFFICIENCY,
    )


MODELS = ["resnet50", "vgg16", "lstm_lm", "transformer", "bert"]


def on_shared_links(speed: PerfSpeedModel, model: str, placement: Placement) -> float:
    """How much slower the engine runs ``placement`` alone than the perf model's idle figure:
    on shared links it runs every hop of a ring at the bottleneck's rate, each with its own
    latency, so a placement over racks (an uplink adds a switch to the NIC's latency) runs up to
    0.5% slower (1 on a single node and within a rack)."""
    num_gpus = sum(k for _, k in placement)
    flow = speed.flow(model, num_gpus, placement)
    if flow is None:
        return 1.0
    idle = speed.iter_s(model, num_gpus, placement, None)
    return speed.iter_s(model, num_gpus, placement, flow.cap) / idle


@settings(max_examples=40, deadline=None)
@given(cluster=node_group_files(), model=st.sampled_from(MODELS), share=st.floats(0.01, 1.0))
def test_alone_a_job_takes_its_duration_at_best_and_its_sensitivity_when_spread(
    cluster: TopologyConfig, model: str, share: float
) -> None:
    num_gpus = max(1, round(share * cluster.n_gpus))
    speed = PerfSpeedModel(cluster)
    sens = speed.sensitivity(model, num_gpus)
    trace = one_job(model, num_gpus, 1000.0)
    placement = speed.best_placement(model, num_gpus)
    best = run_alone(trace, cluster, placement)
    factor = on_shared_links(speed, model, placement)
    assert best["jct_s"] == pytest.approx(1000.0 * factor, rel=1e-9)
    assert factor < 1.01
    if num_gpus == 1 or cluster.n_nodes < 2:
        return
    for across, predicted in ((False, sens.node[0]), (True, sens.rack[0])):
        spread = speed.spread(num_gpus, across_racks=across, model=model)
        assert sum(k for _, k in spread) == num_gpus
        assert all(1 <= k <= cluster.node_gpus[n] for n, k in spread)
        job = run_alone(trace, cluster, spread)
        factor = on_shared_links(speed, model, spread)
        assert job["jct_s"] == pytest.approx(1000.0 * predicted * factor, rel=1e-9), spread


def every_placement(cluster: TopologyConfig, num_gpus: int) -> list[Placement]:
    ranges = [range(g + 1) for g in cluster.node_gpus]
    return [
        tuple((n, k) for n, k in enumerate(counts) if k)
        for counts in itertools.product(*ranges)
        if sum(counts) == num_gpus
    ]


@settings(max_examples=30, deadline=None)
@given(cluster=node_group_files(), model=st.sampled_from(MODELS), share=st.floats(0.01, 1.0))
def test_the_best_placement_is_the_fastest_there_is(
    cluster: TopologyConfig, model: str, share: float
) -> None:
    if cluster.n_nodes > 6:  # every placement of a larger file takes too long to list
        return
    num_gpus = max(1, round(share * cluster.n_gpus))
    speed = PerfSpeedModel(cluster)
    best = plan_time(speed.plan(model, speed.best_placement(model, num_gpus))).total_s
    fastest = min(
        plan_time(speed.plan(model, p)).total_s for p in every_placement(cluster, num_gpus)
    )
    assert best == pytest.approx(fastest, rel=1e-12)


def test_several_gpu_types_measure_work_on_the_real_network(tmp_path: Path) -> None:
    # V100s: a rack of two nodes and a rack of one; K80s in a third rack. A 6-GPU job's
    # reference is these nodes as V100s, whose best placement is the V100 nodes themselves:
    # alone there it takes its duration (against a regular equivalent, with racks as wide as
    # the largest, it took longer).
    path = tmp_path / "mixed.toml"
    path.write_text(
        ISSUE_CLUSTER + '[[nodes]]\ncount = 2\ngpus_per_node = 4\ndevice = "k80"\nrack = 2\n'
    )
    cluster = load_topology(path)
    speed = PerfSpeedModel(cluster)
    assert speed.heterogeneous
    reference = speed.reference("v100")
    assert reference.topology.node_rack == cluster.node_rack
    assert reference.topology.uplink_spec_of(1) == cluster.uplink_spec_of(1)
    best = reference.best_placement("resnet101", 6)
    assert {cluster.node_device[n] for n, _ in best} == {"v100"}
    job = run_alone(one_job("resnet101", 6, 1200.0), cluster, best)
    assert job["jct_s"] == pytest.approx(1200.0, rel=1e-9)
