"""The iteration-time model: exact small cases, validation, and monotonicity properties."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from unstall.errors import ConfigError
from unstall.net import topology
from unstall.net.device_roofline import StepFeatures
from unstall.net.device_speeds import relative_speed, speed_table
from unstall.net.link import Link
from unstall.net.sharing import max_min_fair
from unstall.net.topology import TopologyConfig, intra_link, nic_link, uplink_link
from unstall.workload import (
    JobPerfSpec,
    Placement,
    comm_plan,
    consolidated_placement,
    iteration_time,
    plan_time,
    slowdown,
)
from unstall.workload.job_specs import DDP_BUCKET_BYTES
from unstall.workload.traffic import link_loads

B = 100e6  # gradient bytes


def small() -> TopologyConfig:
    """The small preset at line rate, so that expected times can be worked out by hand."""
    return dataclasses.replace(topology.small(), network_efficiency=1.0)


def spec(**kw: object) -> JobPerfSpec:
    base: dict[str, object] = {"compute_s": 0.1, "gradient_bytes": B, "gradient_tensors": 200}
    return JobPerfSpec(**{**base, **kw})  # type: ignore[arg-type]


# --- exact cases --------------------------------------------------------------------------------


def test_single_gpu_has_no_communication() -> None:
    t = iteration_time(spec(), Placement.parse("1"), small())
    assert t.comm_s == 0 and t.total_s == pytest.approx(0.1) and t.bottleneck is None


def test_ring_links_bytes_and_latency() -> None:
    topo = small()
    loads = {ld.link: ld for ld in link_loads(spec(), Placement.parse("22"), topo)}
    per_hop = 2 * 3 / 4 * B  # 2(K-1)/K x bytes on every hop of a ring of 4
    assert set(loads) == {intra_link(0), intra_link(1), nic_link(0), nic_link(1)}
    assert loads[nic_link(0)].bytes == pytest.approx(per_hop)
    assert loads[intra_link(1)].bytes == pytest.approx(per_hop)  # one intra hop on a node of 2
    buckets = math.ceil(B / DDP_BUCKET_BYTES)
    steps = 2 * 3 * buckets
    assert loads[nic_link(0)].latency_s == pytest.approx(steps * topo.nic.latency_s)
    # single node: the ring closes inside the node, 4 hops over the node's GPU links
    (only,) = link_loads(spec(), Placement.parse("4"), topo)
    assert only.link == intra_link(0) and only.bytes == pytest.approx(4 * per_hop)
    assert only.max_bandwidth == pytest.approx(4 * topo.intra_spec.bytes_per_s)


def test_ring_total_time_is_the_slow_link_not_hidden_by_overlap() -> None:
    topo = small()
    s = spec(overlap=0.25, gradient_tensors=1)
    t = iteration_time(s, Placement.parse("1111"), topo)
    nic_time = 6 * topo.nic.latency_s + 1.5 * B / topo.nic.bytes_per_s
    assert t.bottleneck == nic_link(0)
    assert t.comm_s == pytest.approx(nic_time)
    assert t.exposed_comm_s == pytest.approx(nic_time - 0.025)
    assert t.total_s == pytest.approx(0.1 + nic_time - 0.025)


def test_uplinks_only_when_the_ring_spans_racks() -> None:
    # 4 nodes a rack; uplinks 8:1 oversubscribed: 4 x 25 Gbps / 8 = 12.5 Gbps, slower than a NIC
    topo = dataclasses.replace(small(), oversubscription=8.0)
    inside = Placement((2, 2), nodes=(0, 3))
    across = Placement((2, 2), nodes=(0, 4))
    assert not any(ld.link[0] == "uplink" for ld in link_loads(spec(), inside, topo))
    ups = [ld.link for ld in link_loads(spec(), across, topo) if ld.link[0] == "uplink"]
    assert ups == [uplink_link(0), uplink_link(1)]
    assert (
        iteration_time(spec(overlap=0), across, topo).total_s
        > iteration_time(spec(overlap=0), inside, topo).total_s
    )


def test_parameter_server_bytes() -> None:
    loads = {ld.link: ld for ld in link_loads(spec(comm="ps"), Placement.parse("31"), small())}
    assert loads[intra_link(0)].bytes == pytest.approx(3 * B)  # each GPU pushes and pulls B
    assert loads[nic_link(1)].bytes == pytest.approx(B)  # 2(N-1)/N x B with N = 2


def test_data_loading_bounds_the_iteration() -> None:
    t = iteration_time(spec(data_s=0.5), Placement.parse("2"), small())
    assert t.total_s == 0.5


def test_sharing_a_nic_halves_its_bandwidth() -> None:
    topo = small()
    s = spec(overlap=0.0, gradient_tensors=1)
    a = comm_plan(s, Placement((1, 1), nodes=(0, 1)), topo)
    b = comm_plan(s, Placement((1, 1), nodes=(0, 2)), topo)  # shares node 0's NIC with a
    capacities = topo.capacities()
    rates = max_min_fair(
        capacities, {"a": a.sharing_weights(), "b": b.sharing_weights()}, caps={"a": a.max_rate}
    )
    assert rates["a"] == pytest.approx(topo.nic.bytes_per_s / 2)
    alone = plan_time(a).comm_s
    shared = plan_time(a, a.bandwidth_at_rate(rates["a"])).comm_s
    latency = 2 * topo.nic.latency_s
    assert shared - latency == pytest.approx(2 * (alone - latency))


def test_congestion_slows_only_network_links() -> None:
    topo = small()
    s = spec(overlap=0.0, gradient_tensors=1)
    one_node = iteration_time(s, Placement.parse("4"), topo, congestion=0.9)
    assert one_node.total_s == iteration_time(s, Placement.parse("4"), topo).total_s
    base = iteration_time(s, Placement.parse("11"), topo).comm_s - 2 * topo.nic.latency_s
    half = iteration_time(s, Placement.parse("11"), topo, congestion=0.5).comm_s
    assert half - 2 * topo.nic.latency_s == pytest.approx(2 * base)
    with pytest.raises(ConfigError, match="congestion"):
        iteration_time(s, Placement.parse("11"), topo, congestion=1.0)


def test_consolidated_placement_and_slowdown() -> None:
    topo = small()
    p = consolidated_placement(10, topo)
    assert p.gpus_per_node == (4, 4, 2) and p.racks == (0, 0, 0)
    with pytest.raises(ConfigError, match="n_gpus"):
        consolidated_placement(33, topo)
    s = spec(overlap=0.0)
    assert slowdown(s, Placement.parse("4"), topo) == 1.0
    # 25 GbE instead of NVLink: 1.5 x 100 MB at 3.1 GB/s is 48 ms more than 0.1 s of compute
    assert slowdown(s, Placement.parse("1111"), topo) == pytest.approx(1.47, abs=0.01)


def test_compute_scaling() -> None:
    s = spec(compute_s=0.2, fixed_compute_s=0.05, local_batch=32)
    assert s.compute_at(64) == pytest.approx(0.35)
    k80 = s.on_device("k80")
    assert k80.compute_s > s.compute_s and k80.device == "k80"
    # a job profiled on a V100 runs slower on a topology of K80s
    topo = dataclasses.replace(small(), device="k80")
    assert iteration_time(s, Placement.parse("1"), topo).compute_s == pytest.approx(k80.compute_s)


@dataclasses.dataclass
class Facts:
    gradient_bytes: int = 4_000_000
    gradient_tensors: int = 10
    layers: int = 5
    flops_per_sample: float = 1e9
    winograd_flops_per_sample: float = 0.0


def test_from_facts() -> None:
    s = JobPerfSpec.from_facts(Facts(), device_name="V100", local_batch=64, overlap=0.3)
    achieved = 15.7e12 * 0.5
    assert s.compute_s == pytest.approx(3 * 1e9 * 64 / achieved)
    assert (s.gradient_bytes, s.gradient_tensors, s.layers, s.overlap) == (4e6, 10, 5, 0.3)
    assert s.step == StepFeatures(
        flops=3 * 1e9 * 64, weight_bytes=4e6, layer_calls=5, param_tensors=10
    )


def test_a_model_of_no_fitted_family_scales_between_gpus_by_the_roofline() -> None:
    facts = Facts(winograd_flops_per_sample=0.5e9)
    on_v100 = JobPerfSpec.from_facts(facts, device_name="v100", local_batch=64)
    on_k80 = JobPerfSpec.from_facts(facts, device_name="k80", local_batch=64)
    assert on_v100.step is not None and on_v100.step.winograd_share == 0.5
    speeds = speed_table().roofline.speeds(on_v100.step, "v100")  # type: ignore[union-attr]
    assert on_k80.compute_s / on_v100.compute_s == pytest.approx(1 / speeds["k80"])
    assert on_v100.on_device("k80").compute_s == pytest.approx(on_k80.compute_s)
    # a fitted family keeps its measured speeds
    r50 = JobPerfSpec.from_facts(facts, device_name="v100", local_batch=64, family="resnet50")
    assert r50.on_device("k80").compute_s == pytest.approx(
        r50.compute_s / speed_table().families["resnet50"]["k80"]
    )


def test_placement_strings() -> None:
    p = Placement.parse("1123")
    assert p.gpus_per_node == (1, 1, 2, 3) and p.nodes == (0, 1, 2, 3) and p.n_gpus == 7
    assert p.render() == "1123"
    assert Placement.parse("8.8.16").render() == "8.8.16"
    for bad in ("", "10", "1a", "1..2"):
        with pytest.raises(ConfigError):
            Placement.parse(bad)


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: Placement(()), "gpus_per_node"),
        (lambda: Placement((1, 0)), "gpus_per_node"),
        (lambda: Placement((1, 1), nodes=(3, 3)), "nodes"),
        (lambda: Placement((1, 1), racks=(0,)), "racks"),
        (lambda: spec(overlap=1.5), "overlap"),
        (lambda: spec(comm="tree"), "comm"),
        (lambda: spec(fixed_compute_s=0.2), "fixed_compute_s"),
        (lambda: spec(device="tpu"), "device"),
        (lambda: spec(gradient_bytes=-1), "gradient_bytes"),
        (lambda: spec(precision="int8"), "precision"),
        (lambda: iteration_time(spec(), Placement((1,), nodes=(99,)), small()), "nodes"),
        (lambda: iteration_time(spec(), Placement((5,)), small()), "gpus_per_node"),
    ],
)
def test_validation_names_the_field(make, field: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError) as info:
        make()
    assert info.value.field == field


# --- properties ---------------------------------------------------------------------------------

link_specs = st.builds(Link, bandwidth_gbps=st.floats(1.0, 2000.0), latency_us=st.floats(0.0, 50.0))
specs = st.builds(
    JobPerfSpec,
    compute_s=st.floats(1e-3, 2.0),
    gradient_bytes=st.floats(0.0, 2e9),
    gradient_tensors=st.integers(1, 400),
    overlap=st.floats(0.0, 1.0),
    comm=st.sampled_from(["allreduce", "ps"]),
)


@st.composite
def topologies(draw: st.DrawFn, equal_speeds: bool = False) -> TopologyConfig:
    shape = {
        "racks": draw(st.integers(1, 3)),
        "nodes_per_rack": draw(st.integers(2, 5)),
        "gpus_per_node": draw(st.integers(1, 8)),
    }
    if equal_speeds:
        link = draw(link_specs)
        return TopologyConfig(**shape, intra_link=link, nic=link, uplink=link)
    # physically ordered: GPU links no slower than the NIC; uplinks from an oversubscription ratio
    nic = draw(link_specs)
    intra = Link(
        bandwidth_gbps=nic.bandwidth_gbps * draw(st.floats(1.0, 50.0)),
        latency_us=nic.latency_us * draw(st.floats(0.0, 1.0)),
    )
    ratio = draw(st.floats(1.0, float(shape["nodes_per_rack"])))
    return TopologyConfig(**shape, intra_link=intra, nic=nic, oversubscription=ratio)


@st.composite
def placements(draw: st.DrawFn, topo: TopologyConfig, max_nodes: int = 6) -> Placement:
    n = draw(st.integers(1, min(max_nodes, topo.n_nodes)))
    nodes = draw(st.lists(st.integers(0, topo.n_nodes - 1), min_size=n, max_size=n, unique=True))
    counts = draw(st.lists(st.integers(1, topo.gpus_per_node), min_size=n, max_size=n))
    return Placement(tuple(counts), nodes=tuple(nodes))


def _not_faster(slow: float, fast: float) -> bool:
    return slow >= fast * (1 - 1e-12)


@settings(max_examples=200, deadline=None)
@given(st.data(), specs, topologies(equal_speeds=True))
def test_spreading_over_more_nodes_never_faster_at_equal_link_speeds(
    data: st.DataObject, s: JobPerfSpec, topo: TopologyConfig
) -> None:
    p = data.draw(placements(topo, max_nodes=topo.n_nodes - 1))
    splittable = [i for i, g in enumerate(p.gpus_per_node) if g >= 2]
    assume(splittable)
    i = data.draw(st.sampled_from(splittable))
    free = [n for n in range(topo.n_nodes) if n not in p.nodes]
    new_node = data.draw(st.sampled_from(free))
    moved = data.draw(st.integers(1, p.gpus_per_node[i] - 1))
    counts = list(p.gpus_per_node)
    counts[i] -= moved
    spread = Placement((*counts, moved), nodes=(*p.nodes, new_node))
    assert _not_faster(iteration_time(s, spread, topo).total_s, iteration_time(s, p, topo).total_s)


@settings(max_examples=200, deadline=None)
@given(st.data(), specs, topologies(), st.floats(0.0, 0.99), st.floats(0.0, 0.99))
def test_more_contention_never_faster(
    data: st.DataObject, s: JobPerfSpec, topo: TopologyConfig, c1: float, c2: float
) -> None:
    p = data.draw(placements(topo))
    low, high = sorted((c1, c2))
    assert _not_faster(
        iteration_time(s, p, topo, congestion=high).total_s,
        iteration_time(s, p, topo, congestion=low).total_s,
    )
    # a smaller share of any link from the sharing step: never faster either
    plan = comm_plan(s, p, topo)
    shares = {ld.link: data.draw(st.floats(0.01, 1.0)) for ld in plan.loads}
    squeeze = data.draw(st.floats(0.01, 1.0))
    given_bw = {ld.link: shares[ld.link] * ld.max_bandwidth for ld in plan.loads}
    less_bw = {link: bw * squeeze for link, bw in given_bw.items()}
    assert _not_faster(plan_time(plan, less_bw).total_s, plan_time(plan, given_bw).total_s)
    assert _not_faster(plan_time(plan, given_bw).total_s, plan_time(plan).total_s)


@settings(max_examples=200, deadline=None)
@given(st.data(), specs, topologies(), st.floats(1.0, 10.0), st.sampled_from(["nic", "intra_link"]))
def test_more_bandwidth_never_slower(
    data: st.DataObject, s: JobPerfSpec, topo: TopologyConfig, factor: float, which: str
) -> None:
    p = data.draw(placements(topo))
    old = getattr(topo, which)
    faster = dataclasses.replace(
        topo, **{which: dataclasses.replace(old, bandwidth_gbps=old.bandwidth_gbps * factor)}
    )
    assert _not_faster(iteration_time(s, p, topo).total_s, iteration_time(s, p, faster).total_s)


@settings(max_examples=200, deadline=None)
@given(st.data(), specs, topologies())
def test_consolidated_placement_is_fastest_for_its_gpu_count(
    data: st.DataObject, s: JobPerfSpec, topo: TopologyConfig
) -> None:
    p = data.draw(placements(topo))
    best = consolidated_placement(p.n_gpus, topo)
    assert _not_faster(iteration_time(s, p, topo).total_s, iteration_time(s, best, topo).total_s)
    assert slowdown(s, p, topo) >= 1 - 1e-12


def test_from_zoo_reads_the_models_facts() -> None:
    from unstall.workload import zoo

    facts = zoo.facts("mlp")
    s = JobPerfSpec.from_zoo("mlp", device_name="t4", local_batch=16)
    assert s.name == "mlp" and s.device == "t4"
    assert s.gradient_bytes == facts.gradient_bytes
    assert s.gradient_tensors == facts.gradient_tensors
    # FLOPs at a V100's typical fp32 rate, then the T4's measured speed for a model of no family
    on_v100 = 3 * facts.flops_per_sample * 16 / (15.7e12 * 0.5)
    assert s.family is None
    assert s.compute_s == pytest.approx(on_v100 / relative_speed("t4"))


def test_unknown_model_error_lists_each_name_once() -> None:
    from unstall.workload.job_specs import spec_for

    with pytest.raises(ConfigError) as err:
        spec_for("nope", "v100")
    listed = str(err.value).split("known: [")[1].split("]")[0].split(", ")
    assert "'ncf'" in listed and len(listed) == len(set(listed))


def test_a_spec_knows_its_model_family_and_scales_by_it() -> None:
    from unstall.workload import JobProfile, spec_for

    assert spec_for("resnet50", "v100").family == "resnet50"
    assert spec_for("bert", "v100").family == "transformer"  # a Pollux application
    profile = JobProfile(
        model="lstm_lm",
        device="v100",
        compute_s=0.1,
        local_batch=20,
        gradient_bytes=1000,
        gradient_tensors=2,
        layers=2,
    )
    spec = profile.to_perf_spec()
    assert spec.family == "lm"
    assert spec.on_device("k80").compute_s == pytest.approx(0.1 / relative_speed("k80", "lm"))
    with pytest.raises(ConfigError, match="family"):
        JobPerfSpec(compute_s=0.1, gradient_bytes=1.0, family="cnn")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {"placement": "22"},
            'iteration_time.placement: must be a Placement, got str: Placement.parse("22")',
        ),
        (
            {"spec": "resnet50"},
            'iteration_time.spec: must be a JobPerfSpec, got str: spec_for("resnet50", ',
        ),
        (
            {"topology": "small"},
            "iteration_time.topology: must be a TopologyConfig, got str: topology_preset(",
        ),
    ],
)
def test_iteration_time_names_a_name_where_an_object_belongs(
    arguments: dict[str, object], message: str
) -> None:
    """Each failed as an AttributeError deep inside the communication plan."""
    given: dict[str, object] = {
        "spec": JobPerfSpec(compute_s=0.1, gradient_bytes=100e6),
        "placement": Placement.parse("22"),
        "topology": topology.small(),
    }
    with pytest.raises(ConfigError) as info:
        iteration_time(**{**given, **arguments})  # type: ignore[arg-type]
    assert str(info.value).startswith(message)
