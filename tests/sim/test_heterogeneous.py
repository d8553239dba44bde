"""Clusters of several GPU types: node groups in topology files, a job's speed set by the
slowest GPU type of its placement, policies that see each node's type and keep a job on one type,
and the issue's check: a mixed V100/K80 cluster lies between its all-V100 and all-K80 versions."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from unstall.errors import DataFileError
from unstall.net import NodeGroup, TopologyConfig, intra_link, load_topology, relative_speed, small
from unstall.sched import (
    POLICIES,
    ClusterLayout,
    ClusterSnapshot,
    Decision,
    FreeGpus,
    Locality,
    Start,
    make_policy,
)
from unstall.sched.placement import at_level
from unstall.sim import simulate
from unstall.sim.perf_speed import PerfSpeedModel
from unstall.sim.run import layout_of
from unstall.traces import default_trace
from unstall.workload import Placement, spec_for
from unstall.workload.traffic import comm_plan

NETWORK = 'nic = "25g"\noversubscription = 2.0\n'


def groups(*rows: tuple[int, int, str, int]) -> str:
    """``[[nodes]]`` tables from (count, gpus_per_node, device, rack) rows."""
    return "".join(
        f'[[nodes]]\ncount = {c}\ngpus_per_node = {g}\ndevice = "{d}"\nrack = {r}\n'
        for c, g, d, r in rows
    )


def cluster_file(tmp_path: Path, name: str, body: str) -> TopologyConfig:
    path = tmp_path / f"{name}.toml"
    path.write_text(NETWORK + body)
    return load_topology(path)


def test_node_groups_load_with_their_racks_types_and_sizes(tmp_path: Path) -> None:
    mixed = cluster_file(tmp_path, "mixed", groups((2, 8, "v100", 0), (3, 4, "k80", 1)))
    assert mixed.n_gpus == 28 and mixed.n_nodes == 5 and mixed.n_racks == 2
    assert mixed.node_gpus == (8, 8, 4, 4, 4)
    assert mixed.node_device == ("v100", "v100", "k80", "k80", "k80")
    assert mixed.node_rack == (0, 0, 1, 1, 1)
    assert mixed.compute_device([0, 3]) == "k80" and mixed.fastest_device == "v100"
    assert "nodes 2 x 8 v100 + 3 x 4 k80" in mixed.describe()
    # A derived uplink grows with its rack's NICs: 2 and 3 NICs of 25 Gbit/s over 2:1.
    assert mixed.uplink_spec_of(0).bandwidth_gbps == 25.0
    assert mixed.uplink_spec_of(1).bandwidth_gbps == 37.5
    # Each node's GPU links are its GPU type's, times its own GPUs.
    assert mixed.capacity(intra_link(0)) == pytest.approx(1200e9 / 8 * 8)  # NVLink2 x 8
    assert mixed.capacity(intra_link(4)) == pytest.approx(126e9 / 8 * 4)  # PCIe 3 x 4
    assert len(list(mixed.links())) == 2 * 5 + 2
    # Groups without a rack get one each.
    own = TopologyConfig(
        nodes=(NodeGroup(count=1, gpus_per_node=2), NodeGroup(count=2, gpus_per_node=2))
    )
    assert own.node_rack == (0, 1, 1) and own.node_device == ("v100",) * 3


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (groups((1, 4, "z80", 0)), "nodes[0].device"),
        ("[[nodes]]\ncount = 0\ngpus_per_node = 4\n", "nodes[0].count"),
        ("[[nodes]]\ncount = 1\ngpus_per_node = 4\nspeed = 2\n", "nodes[0]"),
        ("[[nodes]]\ncount = 1\n", "nodes[0].gpus_per_node"),  # missing: named as such
        ("nodes_per_rack = 2\n" + groups((1, 4, "k80", 0)), "nodes_per_rack"),
        ("nodes = 3\n", "nodes"),
    ],
)
def test_bad_node_groups_name_the_file_and_field(tmp_path: Path, body: str, field: str) -> None:
    with pytest.raises(DataFileError) as err:
        cluster_file(tmp_path, "bad", body)
    assert err.value.field == field and "bad.toml" in str(err.value)


def test_a_job_over_two_gpu_types_computes_at_the_slower(tmp_path: Path) -> None:
    mixed = cluster_file(tmp_path, "mixed", groups((2, 4, "v100", 0), (2, 4, "k80", 0)))
    spec = spec_for("resnet50", "v100")
    fast = comm_plan(spec, Placement((2, 2), nodes=(0, 1)), mixed).compute_s
    slow = comm_plan(spec, Placement((2, 2), nodes=(2, 3)), mixed).compute_s
    both = comm_plan(spec, Placement((2, 2), nodes=(1, 2)), mixed).compute_s
    assert both == slow > 2 * fast


def test_gpu_types_run_each_model_at_its_familys_measured_speed(tmp_path: Path) -> None:
    # Gavel measured ResNet-50 about 6x slower on a K80 than on a V100, an LSTM LM about 4x:
    # the simulator's K80 nodes follow the family's figure, not one FLOP ratio for every model.
    mixed = cluster_file(tmp_path, "mixed", groups((1, 4, "v100", 0), (1, 4, "k80", 0)))
    for model, family in (("resnet50", "resnet50"), ("lstm_lm", "lm")):
        spec = spec_for(model, "v100")
        on_v100 = comm_plan(spec, Placement((1,), nodes=(0,)), mixed).compute_s
        on_k80 = comm_plan(spec, Placement((1,), nodes=(1,)), mixed).compute_s
        assert on_k80 / on_v100 == pytest.approx(1 / relative_speed("k80", family))
    assert 1 / relative_speed("k80", "resnet50") > 1.3 / relative_speed("k80", "lm")


def test_the_node_group_form_of_a_regular_cluster_gives_its_results(tmp_path: Path) -> None:
    as_groups = cluster_file(tmp_path, "small", groups((4, 4, "v100", 0), (4, 4, "v100", 1)))
    # One GPU type, the duration GPU: neither needs another type's reference.
    assert not PerfSpeedModel(as_groups).heterogeneous and not PerfSpeedModel(small()).heterogeneous
    for policy in ("fifo", "dally"):
        runs = [
            simulate(default_trace(), c, make_policy(policy), max_jobs=150).jobs
            for c in (as_groups, small())
        ]
        assert runs[0].equals(runs[1]), policy


def test_mixed_v100_k80_jct_lies_between_all_v100_and_all_k80(tmp_path: Path) -> None:
    regular = "racks = 2\nnodes_per_rack = 4\ngpus_per_node = 4\n"
    v100 = cluster_file(tmp_path, "v100", regular + 'device = "v100"\n')
    k80 = cluster_file(tmp_path, "k80", regular + 'device = "k80"\n')
    mixed = cluster_file(tmp_path, "mixed", groups((4, 4, "v100", 0), (4, 4, "k80", 1)))
    for policy in ("fifo", "dally"):
        jct = {
            c.name: simulate(
                default_trace(), c, make_policy(policy), max_jobs=300, duration_gpu="v100"
            ).result.avg_jct_s
            for c in (v100, mixed, k80)
        }
        assert jct["v100"] < jct["mixed"] < jct["k80"], (policy, jct)


@dataclass
class Recorder:
    """Fifo that remembers what the snapshots said about the nodes."""

    name: str = "recorder"
    needs_oracle: bool = False
    seen: list[tuple[tuple[int, ...], tuple[str, ...]]] = field(default_factory=list)

    def reset(self) -> None:
        self.seen.clear()

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        self.seen.append((snapshot.layout.node_gpus, snapshot.layout.node_type))
        free = FreeGpus(snapshot)
        starts = []
        for job in snapshot.queued:
            placement = free.best(job.num_gpus)
            if placement is None:
                break
            free.take(placement)
            starts.append(Start(job.job_id, placement))
        return Decision(starts=tuple(starts))


def three_types(tmp_path: Path) -> TopologyConfig:
    rows = ((2, 8, "v100", 0), (3, 4, "k80", 1), (4, 2, "t4", 1))
    return cluster_file(tmp_path, "three", groups(*rows))


def test_policies_see_each_nodes_type_and_gpus_and_jobs_name_theirs(tmp_path: Path) -> None:
    cluster = three_types(tmp_path)
    recorder = Recorder()
    run = simulate(default_trace(), cluster, recorder, max_jobs=120)
    assert recorder.seen[0] == (cluster.node_gpus, cluster.node_device)
    ran = run.jobs[run.jobs["finished"]]
    # Each job names the types of its placement, sorted and joined: no more of them than it has
    # GPUs, each a type of the cluster. (This policy places blind to types: some span two.)
    named = [str(t).split("+") for t in ran["gpu_type"]]
    assert all(n == sorted(set(n)) and set(n) <= {"v100", "k80", "t4"} for n in named), named
    assert all(len(n) <= k for n, k in zip(named, ran["num_gpus"], strict=True))
    assert {"v100", "k80", "t4"} <= set(ran["gpu_type"])


@pytest.mark.parametrize("policy", list(POLICIES))
def test_every_built_in_policy_runs_on_a_cluster_of_three_gpu_types(
    policy: str, tmp_path: Path
) -> None:
    cluster = three_types(tmp_path)
    run = simulate(default_trace(), cluster, make_policy(policy), max_jobs=150)
    assert run.result.jobs_finished + run.result.jobs_rejected == 150
    finished = run.jobs[run.jobs["finished"]]
    assert (finished["gpu_type"] != "").all()
    assert (finished["jct_s"] >= finished["queue_s"]).all()
    if policy in ONE_TYPE:
        # Every job fits the 16 V100s alone: none may span types (docs/sim.md).
        assert not finished["gpu_type"].str.contains("+", regex=False).any(), policy


# The policies that keep each job on one GPU type. first-fit is blind to types by design;
# srtf and gandiva place with FreeGpus.best(n) without types, which spreads a job over types
# when no one type has room at that moment (docs/sim.md says the built-in placements wait).
ONE_TYPE = {"fifo", "consolidate", "tiresias", "dally", "dally-fixed", "gavel"}


MIXED_LAYOUT = layout_of(
    TopologyConfig(
        nodes=(
            NodeGroup(count=3, gpus_per_node=8, device="v100", rack=0),
            NodeGroup(count=3, gpus_per_node=4, device="k80", rack=0),
            NodeGroup(count=2, gpus_per_node=4, device="t4", rack=1),
        )
    )
)


@settings(max_examples=300, deadline=None)
@example(free=[5, 0, 0, 1, 0, 0, 4, 4], num_gpus=6)  # one type in rack 1, mixed in rack 0
@given(
    free=st.lists(st.integers(0, 8), min_size=8, max_size=8),
    num_gpus=st.integers(1, 24),
)
def test_placements_keep_a_job_on_one_gpu_type_unless_none_holds_it(
    free: list[int], num_gpus: int
) -> None:
    layout: ClusterLayout = MIXED_LAYOUT
    free = [min(f, g) for f, g in zip(free, layout.node_gpus, strict=True)]
    by_rack = [sum(free[n] for n in nodes) for nodes in layout.rack_nodes]
    placement = at_level(Locality.CLUSTER, free, by_rack, layout, num_gpus)
    if sum(free) < num_gpus:
        assert placement is None
        return
    assert placement is not None and sum(k for _, k in placement) == num_gpus
    assert all(0 < k <= free[node] for node, k in placement)
    types = {layout.node_type[node] for node, _ in placement}
    one_type_holds = any(
        sum(free[n] for n in range(8) if layout.node_type[n] == kind) >= num_gpus
        for kind in layout.types
    )
    if one_type_holds:
        assert len(types) == 1, (free, num_gpus, placement)
