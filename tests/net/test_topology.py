"""Topology configs: presets, derived links, validation and the TOML/JSON reader."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from unstall.errors import ConfigError, DataFileError
from unstall.net.link import Link
from unstall.net.topology import (
    CALIBRATED_NETWORK_EFFICIENCY,
    TOPOLOGY_PRESETS,
    NodeGroup,
    TopologyConfig,
    intra_link,
    nic_link,
    philly,
    small,
    topology_preset,
    uplink_link,
)
from unstall.net.topology_files import load_topology, resolve_cluster, topology_from_mapping


def test_presets_sizes() -> None:
    assert small().n_gpus == 32
    assert 100 < TOPOLOGY_PRESETS["medium"]().n_gpus <= 1024
    p = philly()
    # the Philly cluster had about 2,490 GPUs; the homogeneous approximation keeps the count
    assert abs(p.n_gpus - 2490) < 20 and p.gpus_per_node == 8
    for name, make in TOPOLOGY_PRESETS.items():
        assert make().name == name


def test_derived_links() -> None:
    t = dataclasses.replace(small(), network_efficiency=1.0)
    # V100 defaults to NVLink2: 150 GB/s a direction per GPU
    assert t.intra_spec.bandwidth_gbps == 1200.0
    assert t.capacity(intra_link(0)) == pytest.approx(1200e9 / 8 * 4)
    assert t.capacity(nic_link(3)) == pytest.approx(25e9 / 8)
    # uplink: 4 NICs of 25 Gbps over 2:1 oversubscription = 50 Gbps
    assert t.uplink_spec.bandwidth_gbps == pytest.approx(50.0)
    assert t.rack_of(3) == 0 and t.rack_of(4) == 1
    links = list(t.links())
    assert len(links) == 2 * 8 + 2 and uplink_link(1) in links
    assert t.capacities()[uplink_link(0)] == pytest.approx(50e9 / 8)


def test_network_efficiency_scales_nics_and_uplinks_only() -> None:
    full = dataclasses.replace(small(), network_efficiency=1.0)
    assert small().network_efficiency == CALIBRATED_NETWORK_EFFICIENCY
    t = dataclasses.replace(small(), network_efficiency=0.5)
    assert t.capacity(nic_link(0)) == pytest.approx(full.capacity(nic_link(0)) / 2)
    assert t.capacity(uplink_link(1)) == pytest.approx(full.capacity(uplink_link(1)) / 2)
    assert t.capacity(intra_link(0)) == full.capacity(intra_link(0))
    with pytest.raises(ConfigError, match="network_efficiency"):
        dataclasses.replace(small(), network_efficiency=0.0)


def test_explicit_uplink_and_intra_override() -> None:
    t = TopologyConfig(
        nodes_per_rack=2,
        gpus_per_node=8,
        racks=2,
        device="a100",
        intra_link=Link(bandwidth_gbps=100.0),
        uplink=Link(bandwidth_gbps=40.0, latency_us=2.0),
    )
    assert t.intra_spec.bandwidth_gbps == 100.0
    assert t.uplink_spec == Link(bandwidth_gbps=40.0, latency_us=2.0)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"racks": 0}, "racks"),
        ({"gpus_per_node": 2.5}, "gpus_per_node"),
        ({"device": "tpu"}, "device"),
        ({"intra_link_kind": "infinityfabric"}, "intra_link_kind"),
        ({"oversubscription": 0.5}, "oversubscription"),
        ({"uplink": Link(bandwidth_gbps=1.0), "oversubscription": 2.0}, "oversubscription"),
        # A Link may be unlimited (a parameter server's); a cluster's links may not.
        ({"nic": Link.unlimited()}, "nic.bandwidth_gbps"),
        ({"uplink": Link.unlimited()}, "uplink.bandwidth_gbps"),
        ({"intra_link": Link.unlimited()}, "intra_link.bandwidth_gbps"),
        ({"oversubscription": float("inf")}, "oversubscription"),
    ],
)
def test_validation_names_the_field(kwargs: dict, field: str) -> None:  # type: ignore[type-arg]
    base = {"nodes_per_rack": 2, "gpus_per_node": 4}
    with pytest.raises(ConfigError) as info:
        TopologyConfig(**{**base, **kwargs})
    assert info.value.field == field and "TopologyConfig" in str(info.value)


def test_linkspec_validation() -> None:
    with pytest.raises(ConfigError, match="bandwidth_gbps"):
        Link(bandwidth_gbps=0.0)
    with pytest.raises(ConfigError, match="latency_us"):
        Link(bandwidth_gbps=1.0, latency_us=-1.0)


def test_unknown_preset() -> None:
    with pytest.raises(ConfigError, match="known"):
        topology_preset("huge")
    # a cluster already built is named as such, not put in the message whole as a "preset"
    with pytest.raises(
        ConfigError, match=r"^topology_preset\.name: takes a preset's name, got the cluster 'small'"
    ):
        topology_preset(topology_preset("small"))  # type: ignore[arg-type]


def test_a_number_for_a_congestion_level_points_to_a_schedule_of_one_step() -> None:
    from unstall.sim import CongestionSchedule, congestion_level

    with pytest.raises(ConfigError) as info:
        congestion_level(0.5)  # type: ignore[arg-type]
    assert "got the number 0.5" in str(info.value)
    assert "CongestionSchedule(times_s=(0.0,), fractions=(0.5,))" in str(info.value)
    assert CongestionSchedule(times_s=(0.0,), fractions=(0.5,)).fractions == (0.5,)


def test_load_topology_takes_a_preset_name_or_a_file_and_names_a_mapping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dict failed in pathlib; a preset's name is the preset, also beside a file of its name."""
    with pytest.raises(TypeError) as info:
        load_topology({"preset": "small"})  # type: ignore[arg-type]
    assert isinstance(info.value, ConfigError)
    assert str(info.value) == (
        "load_topology.path: must be a preset name or a file path, got dict: "
        "topology_from_mapping(mapping) builds one"
    )
    monkeypatch.chdir(tmp_path)
    (tmp_path / "small").write_text('preset = "medium"\n')
    assert load_topology("small") == small()
    with pytest.raises(ConfigError) as info:
        load_topology("huge")
    assert str(info.value).startswith("load_topology.path: 'huge' is neither a preset ['")


def test_resolve_cluster_passes_a_topology_and_loads_a_name_or_file(tmp_path: Path) -> None:
    cluster = small()
    assert resolve_cluster(cluster) is cluster
    assert resolve_cluster("small") == small()
    path = tmp_path / "cluster.toml"
    path.write_text('preset = "small"\nnic = "100g"\n')
    assert resolve_cluster(path).nic.bandwidth_gbps == 100.0
    assert resolve_cluster(str(path)).name == "cluster"
    with pytest.raises(DataFileError, match=r"missing\.json: no such file"):
        resolve_cluster(str(tmp_path / "missing.json"))
    with pytest.raises(TypeError, match=r"^resolve_cluster\.cluster: takes a cluster topology"):
        resolve_cluster(32)  # type: ignore[arg-type]


def test_load_toml_from_preset_with_overrides(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text(
        'preset = "small"\nracks = 3\nnic = "100g"\n'
        "[uplink]\nbandwidth_gbps = 200\nlatency_us = 2\n"
    )
    t = load_topology(path)
    assert (t.racks, t.nodes_per_rack, t.gpus_per_node) == (3, 4, 4)
    assert t.nic.bandwidth_gbps == 100.0
    assert t.uplink_spec.bandwidth_gbps == 200.0 and t.oversubscription == 1.0


def test_load_json(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    spec = {
        "nodes_per_rack": 4,
        "gpus_per_node": 8,
        "device": "h100",
        "intra_link_kind": "nvswitch",
    }
    path.write_text(json.dumps(spec))
    t = load_topology(path)
    assert t.device == "h100" and t.intra_spec.bandwidth_gbps == 2400.0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("nodes_per_rack = 4\ngpus_per_node = 4\nracks = -1\n", "racks"),
        ('nodes_per_rack = 4\ngpus_per_node = 4\ncolour = "red"\n', "colour"),
        ('nodes_per_rack = 4\ngpus_per_node = 4\nnic = "9000g"\n', "nic"),
        ("nodes_per_rack = 4\ngpus_per_node = 4\n[nic]\nspeed = 3\n", "nic.speed"),
        ("nodes_per_rack = 4\ngpus_per_node = 4\n[nic]\nlatency_us = 3\n", "nic.bandwidth_gbps"),
        ('preset = "huge"\n', "preset"),
    ],
)
def test_load_errors_name_file_and_field(tmp_path: Path, body: str, field: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(body)
    with pytest.raises(DataFileError) as info:
        load_topology(path)
    assert info.value.field == field and str(path) in str(info.value)


@pytest.mark.parametrize(
    ("name", "body", "field"),
    [
        ("inf.toml", "nic = {bandwidth_gbps = inf}", "nic.bandwidth_gbps"),
        ("nan.toml", "nic = {bandwidth_gbps = nan}", "nic.bandwidth_gbps"),
        ("lat.toml", "nic = {bandwidth_gbps = 10, latency_us = inf}", "nic.latency_us"),
        ("up.toml", "[uplink]\nbandwidth_gbps = -inf", "uplink.bandwidth_gbps"),
        ("intra.toml", "intra_link = {bandwidth_gbps = inf}", "intra_link.bandwidth_gbps"),
        ("over.toml", "oversubscription = inf", "oversubscription"),
        ("inf.json", '"nic": {"bandwidth_gbps": Infinity}', "nic.bandwidth_gbps"),
    ],
)
def test_non_finite_numbers_in_a_cluster_file_name_the_field(
    tmp_path: Path, name: str, body: str, field: str
) -> None:
    path = tmp_path / name
    if name.endswith(".json"):
        path.write_text(f'{{"nodes_per_rack": 2, "gpus_per_node": 4, {body}}}')
    else:
        path.write_text(f"nodes_per_rack = 2\ngpus_per_node = 4\n{body}\n")
    with pytest.raises(DataFileError) as info:
        load_topology(path)
    assert info.value.field == field, info.value
    assert "finite" in str(info.value) and str(path) in str(info.value)


@pytest.mark.parametrize(
    ("data", "field", "why"),
    [
        # Not given is not "got 0" (TopologyConfig's default stands for "not given").
        ({}, "nodes_per_rack", "required in the regular form (or give `nodes`"),
        ({}, "nodes_per_rack", "missing as well: gpus_per_node"),
        ({"nodes_per_rack": 2}, "gpus_per_node", "required in the regular form"),
        ({"gpus_per_node": 4, "racks": 2}, "nodes_per_rack", "required in the regular form"),
        # Given as 0, it is the value that is wrong.
        ({"nodes_per_rack": 0, "gpus_per_node": 4}, "nodes_per_rack", "got 0"),
        # A wrong value is named before the shape that is missing as well.
        ({"device": "v1000"}, "device", "unknown device 'v1000'"),
        ({"intra_link_kind": "fabric"}, "intra_link_kind", "unknown interconnect 'fabric'"),
    ],
)
def test_a_missing_shape_is_named_as_missing_and_a_bad_device_first(
    data: dict[str, object], field: str, why: str
) -> None:
    with pytest.raises(DataFileError) as info:
        topology_from_mapping(data)
    assert info.value.field == field and why in info.value.why, info.value
    assert "got 0" not in str(info.value) or data.get("nodes_per_rack") == 0


def test_load_missing_file_and_bad_syntax(tmp_path: Path) -> None:
    with pytest.raises(DataFileError, match="no such file"):
        load_topology(tmp_path / "nope.toml")
    bad = tmp_path / "bad.json"
    bad.write_text("{nodes_per_rack: 4")
    with pytest.raises(DataFileError, match="not valid JSON"):
        load_topology(bad)


def test_files_default_to_the_calibrated_efficiency_and_their_own_name(tmp_path: Path) -> None:
    path = tmp_path / "lab.toml"
    path.write_text("nodes_per_rack = 2\ngpus_per_node = 4\n")
    lab = load_topology(path)
    assert lab.network_efficiency == CALIBRATED_NETWORK_EFFICIENCY and lab.name == "lab"
    assert "network at 11% of line rate (calibrated)" in lab.describe()
    path.write_text('name = "x"\nnodes_per_rack = 2\ngpus_per_node = 4\nnetwork_efficiency = 1\n')
    line_rate = load_topology(path)
    assert line_rate.network_efficiency == 1.0 and line_rate.name == "x"
    assert "network at 100% of line rate" in line_rate.describe()
    # The Python config keeps line rate as its default: only files and presets are calibrated.
    assert TopologyConfig(nodes_per_rack=2, gpus_per_node=4).network_efficiency == 1.0


@pytest.mark.parametrize(
    ("nodes", "got"),
    [
        ([NodeGroup(count=1, gpus_per_node=2)], "got a list: write nodes=(NodeGroup(...), ...)"),
        (NodeGroup(count=1, gpus_per_node=2), "got one NodeGroup: write nodes=(NodeGroup(...),)"),
        (({"count": 1, "gpus_per_node": 2},), "got a dict among them"),
        (5, "got int"),
    ],
)
def test_node_groups_of_the_wrong_kind_say_what_was_given(nodes: object, got: str) -> None:
    """Every one was "must be a tuple of NodeGroup", and an int a TypeError."""
    with pytest.raises(ConfigError) as info:
        TopologyConfig(nodes=nodes)  # type: ignore[arg-type]
    assert str(info.value) == f"TopologyConfig.nodes: must be a tuple of NodeGroup, {got}"
