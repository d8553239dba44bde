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
    TopologyConfig,
    intra_link,
    nic_link,
    philly,
    small,
    topology_preset,
    uplink_link,
)
from unstall.net.topology_files import load_topology


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
        ('preset = "tiny"\n', "preset"),
    ],
)
def test_load_errors_name_file_and_field(tmp_path: Path, body: str, field: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(body)
    with pytest.raises(DataFileError) as info:
        load_topology(path)
    assert info.value.field == field and str(path) in str(info.value)


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
