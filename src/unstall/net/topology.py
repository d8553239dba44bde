"""Cluster topology: racks of nodes of GPUs, and the links a job's traffic crosses.

Three kinds of physical link, each with a hashable id:

- ``("intra", node)``: the GPU-to-GPU links inside a node (NVLink, NVSwitch or PCIe). Every GPU
  has its own port, so one hop of a ring gets the full per-GPU bandwidth and the node's capacity
  is that times the GPUs per node (GPUs are never shared between jobs, so these never contend).
- ``("nic", node)``: the node's network interface, per direction.
- ``("uplink", rack)``: the rack switch's link to the core, per direction; its bandwidth is given,
  or derived from the NICs of the rack and an oversubscription ratio.

Bandwidths are per direction (a ring all-reduce sends and receives at once on every hop).
Presets are functions (:func:`small`, :func:`medium`, :func:`philly`) registered in
:data:`TOPOLOGY_PRESETS`; :func:`load_topology` reads a TOML or JSON file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from unstall.config import check, load_table_file
from unstall.errors import ConfigError, DataFileError
from unstall.net.hardware import DEVICE_PRESETS, INTERCONNECT_PRESETS, NIC_PRESETS, LinkPreset
from unstall.net.link import Link

LinkId = tuple[str, int]
INTRA = "intra"
NIC = "nic"
UPLINK = "uplink"
LINK_KINDS = (INTRA, NIC, UPLINK)
# A derived uplink adds one more switch on the path: about a microsecond in a datacenter switch.
# (A hop over an uplink also crosses the NICs at both ends, whose latency the perf model adds.)
SWITCH_HOP_LATENCY_US = 1.0


def intra_link(node: int) -> LinkId:
    """Id of the GPU links inside ``node``."""
    return (INTRA, node)


def nic_link(node: int) -> LinkId:
    """Id of ``node``'s network interface."""
    return (NIC, node)


def uplink_link(rack: int) -> LinkId:
    """Id of ``rack``'s uplink to the core switch."""
    return (UPLINK, rack)


def _scaled(spec: Link, efficiency: float) -> Link:
    """``spec`` at ``efficiency`` times its own achieved share of line rate."""
    return spec.with_efficiency(spec.efficiency * efficiency)


# Achieved / nominal network bandwidth of gradient all-reduce, from `unstall sim calibrate` on
# Pollux's placements (benchmarks/BENCHMARKS.md): the fitted NIC figure is 5.0-5.8 Gbps for the
# four applications with known gradient sizes, on AWS g4dn.12xlarge nodes with 50 Gbps NICs.
CALIBRATED_NETWORK_EFFICIENCY = 0.11


def _link_of(preset: LinkPreset) -> Link:
    return preset.link()


def _default_nic() -> Link:
    return _link_of(NIC_PRESETS["100g"])


@dataclass(frozen=True, kw_only=True)
class TopologyConfig:
    """A homogeneous cluster: ``racks`` x ``nodes_per_rack`` nodes of ``gpus_per_node`` GPUs.

    ``intra_link_kind`` names an interconnect preset ("" takes the device's default);
    ``intra_link`` overrides its figures. The rack uplink is ``uplink`` when given, otherwise the
    rack's NIC bandwidth divided by ``oversubscription`` (give one or the other, not both).
    """

    name: str = "custom"
    racks: int = 1
    nodes_per_rack: int
    gpus_per_node: int
    device: str = "v100"
    intra_link_kind: str = ""
    intra_link: Link | None = None
    nic: Link = field(default_factory=_default_nic)
    uplink: Link | None = None
    oversubscription: float = 1.0
    # Fraction of NIC and uplink line rate that gradient communication achieves in practice
    # (transport stack, collective implementation). 1.0 is line rate; the presets and topology
    # files use CALIBRATED_NETWORK_EFFICIENCY, fitted to Pollux's measured step times.
    network_efficiency: float = 1.0

    def __post_init__(self) -> None:
        for name in ("racks", "nodes_per_rack", "gpus_per_node"):
            value = getattr(self, name)
            check(
                isinstance(value, int) and not isinstance(value, bool) and value >= 1,
                self,
                name,
                f"must be an integer >= 1, got {value!r}",
            )
        for name in ("name", "device", "intra_link_kind"):
            value = getattr(self, name)
            check(isinstance(value, str), self, name, f"must be a string, got {value!r}")
        check(
            isinstance(self.oversubscription, int | float)
            and not isinstance(self.oversubscription, bool),
            self,
            "oversubscription",
            f"must be a number, got {self.oversubscription!r}",
        )
        check(
            self.device.lower() in DEVICE_PRESETS,
            self,
            "device",
            f"unknown device {self.device!r}; known: {sorted(DEVICE_PRESETS)}",
        )
        kind = self.intra_link_kind.lower()
        check(
            kind == "" or kind in INTERCONNECT_PRESETS,
            self,
            "intra_link_kind",
            f"unknown interconnect {self.intra_link_kind!r}; known: {sorted(INTERCONNECT_PRESETS)}",
        )
        for name in ("intra_link", "nic", "uplink"):
            value = getattr(self, name)
            check(
                (value is None and name != "nic") or isinstance(value, Link),
                self,
                name,
                f"must be a Link, got {type(value).__name__}",
            )
        check(
            self.oversubscription >= 1.0,
            self,
            "oversubscription",
            f"must be >= 1 (1 = non-blocking), got {self.oversubscription!r}",
        )
        check(
            isinstance(self.network_efficiency, int | float)
            and 0.0 < self.network_efficiency <= 1.0,
            self,
            "network_efficiency",
            f"must be in (0, 1], got {self.network_efficiency!r}",
        )
        check(
            self.uplink is None or self.oversubscription == 1.0,
            self,
            "oversubscription",
            "give either uplink or oversubscription, not both",
        )

    # --- sizes ----------------------------------------------------------------------------------

    @property
    def n_nodes(self) -> int:
        return self.racks * self.nodes_per_rack

    @property
    def n_gpus(self) -> int:
        return self.n_nodes * self.gpus_per_node

    def rack_of(self, node: int) -> int:
        """The rack that holds ``node`` (nodes are numbered rack by rack)."""
        return node // self.nodes_per_rack

    def describe(self) -> str:
        """One line for a run's header: name, shape, GPU type and the network efficiency."""
        calibrated = (
            " (calibrated)" if self.network_efficiency == CALIBRATED_NETWORK_EFFICIENCY else ""
        )
        return (
            f"{self.name}: {self.n_gpus} GPUs, {self.racks} racks x {self.nodes_per_rack} nodes "
            f"x {self.gpus_per_node} {self.device}, NICs {self.nic.bandwidth_gbps:g} Gbit/s, "
            f"network at {self.network_efficiency:.0%} of line rate{calibrated}"
        )

    # --- links ----------------------------------------------------------------------------------

    @cached_property
    def intra_spec(self) -> Link:
        """The per-GPU intra-node link: ``intra_link``, else the kind's or device's preset."""
        if self.intra_link is not None:
            return self.intra_link
        kind = self.intra_link_kind.lower() or DEVICE_PRESETS[self.device.lower()].intra_link
        return _link_of(INTERCONNECT_PRESETS[kind])

    @cached_property
    def uplink_spec(self) -> Link:
        """The rack uplink: ``uplink``, else the rack's NICs over the oversubscription ratio."""
        if self.uplink is not None:
            return self.uplink
        return Link(
            bandwidth_gbps=self.nodes_per_rack * self.nic.bandwidth_gbps / self.oversubscription,
            latency_us=SWITCH_HOP_LATENCY_US,
        )

    @cached_property
    def _effective_nic(self) -> Link:
        return _scaled(self.nic, self.network_efficiency)

    @cached_property
    def _effective_uplink(self) -> Link:
        return _scaled(self.uplink_spec, self.network_efficiency)

    def spec_of(self, link: LinkId) -> Link:
        """The spec of one hop over ``link``: what a single flow can get when alone."""
        kind = link[0]
        if kind == INTRA:
            return self.intra_spec
        if kind == NIC:
            return self._effective_nic
        if kind == UPLINK:
            return self._effective_uplink
        raise ConfigError("LinkId", "kind", f"unknown link kind {kind!r}; known: {LINK_KINDS}")

    def capacity(self, link: LinkId) -> float:
        """Bytes/s the link carries in one direction, all flows together.

        An intra-node link's capacity is the per-GPU bandwidth times the GPUs of the node (each
        GPU has its own port); a NIC's and an uplink's is their bandwidth.
        """
        spec = self.spec_of(link)
        if link[0] == INTRA:
            return spec.bytes_per_s * self.gpus_per_node
        return spec.bytes_per_s

    def links(self) -> Iterator[LinkId]:
        """Every link of the cluster: intra and NIC per node, then one uplink per rack."""
        for node in range(self.n_nodes):
            yield intra_link(node)
            yield nic_link(node)
        if self.racks > 1:
            for rack in range(self.racks):
                yield uplink_link(rack)

    def capacities(self) -> dict[LinkId, float]:
        """``{link: capacity in bytes/s}`` for every link, ready for :mod:`unstall.net.sharing`."""
        return {link: self.capacity(link) for link in self.links()}


# --- presets ------------------------------------------------------------------------------------


def small() -> TopologyConfig:
    """32 GPUs: 2 racks x 4 nodes x 4 V100 (NVLink2), 25 GbE NICs, uplinks 2:1 oversubscribed.

    Like every preset, the network achieves the calibrated share of its line rate.
    """
    return TopologyConfig(
        name="small",
        racks=2,
        nodes_per_rack=4,
        gpus_per_node=4,
        device="v100",
        nic=_link_of(NIC_PRESETS["25g"]),
        oversubscription=2.0,
        network_efficiency=CALIBRATED_NETWORK_EFFICIENCY,
    )


def medium() -> TopologyConfig:
    """256 GPUs: 4 racks x 8 nodes x 8 V100 (NVLink2), 100 Gbps NICs, uplinks 2:1."""
    return TopologyConfig(
        name="medium",
        racks=4,
        nodes_per_rack=8,
        gpus_per_node=8,
        device="v100",
        nic=_link_of(NIC_PRESETS["100g"]),
        oversubscription=2.0,
        network_efficiency=CALIBRATED_NETWORK_EFFICIENCY,
    )


def philly() -> TopologyConfig:
    """The size of Microsoft's Philly cluster, homogeneous: 13 racks x 24 nodes x 8 GPUs = 2,496.

    Published facts (Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN
    Training Workloads", USENIX ATC'19, and the msr-fiddle/philly-traces machine list): about 550
    servers and 2,490 GPUs in 14 virtual clusters; servers of 2 GPUs (12 GB) and of 8 GPUs
    (24 GB); servers in a rack share an InfiniBand (RDMA) domain and jobs are preferably placed
    within one. Our approximation keeps the GPU count and the 8-GPU server (which holds most of
    the GPUs): 312 servers of 8 P40-class GPUs on PCIe 3, 100 Gbps (EDR) NICs, 24 servers a
    rack. Neither the rack size nor the inter-rack oversubscription is published; we assume 24
    and 2:1.
    """
    return TopologyConfig(
        name="philly",
        racks=13,
        nodes_per_rack=24,
        gpus_per_node=8,
        device="p40",
        intra_link_kind="pcie3",
        nic=_link_of(NIC_PRESETS["100g"]),
        oversubscription=2.0,
        network_efficiency=CALIBRATED_NETWORK_EFFICIENCY,
    )


TOPOLOGY_PRESETS: dict[str, Callable[[], TopologyConfig]] = {
    "small": small,
    "medium": medium,
    "philly": philly,
}


def topology_preset(name: str) -> TopologyConfig:
    """The preset called ``name``, with an error listing the known ones."""
    if name not in TOPOLOGY_PRESETS:
        raise ConfigError(
            "TopologyConfig",
            "preset",
            f"unknown preset {name!r}; known: {sorted(TOPOLOGY_PRESETS)}",
        )
    return TOPOLOGY_PRESETS[name]()


# --- files --------------------------------------------------------------------------------------

_LINK_FIELDS = ("intra_link", "nic", "uplink")


def _link_from(value: Any, field_name: str, source: str, presets: Mapping[str, LinkPreset]) -> Link:
    """A Link from a preset name or a ``{bandwidth_gbps, latency_us}`` table."""
    if isinstance(value, str):
        if value.lower() not in presets:
            raise DataFileError(
                source, f"unknown preset {value!r}; known: {sorted(presets)}", field=field_name
            )
        return _link_of(presets[value.lower()])
    if not isinstance(value, Mapping):
        raise DataFileError(
            source,
            "must be a preset name or a table {bandwidth_gbps, latency_us}",
            field=field_name,
        )
    known = {"bandwidth_gbps", "latency_us"}
    unknown = sorted(set(value) - known)
    if unknown:
        raise DataFileError(
            source,
            f"unknown key(s) {unknown}; known: {sorted(known)}",
            field=f"{field_name}.{unknown[0]}",
        )
    if "bandwidth_gbps" not in value:
        raise DataFileError(source, "missing", field=f"{field_name}.bandwidth_gbps")
    try:
        return Link(
            bandwidth_gbps=float(value["bandwidth_gbps"]),
            latency_us=float(value.get("latency_us", 0.0)),
        )
    except (TypeError, ValueError) as exc:
        raise DataFileError(source, str(exc), field=field_name) from exc


def topology_from_mapping(data: Mapping[str, Any], *, source: str = "<mapping>") -> TopologyConfig:
    """Build a topology from a mapping: an optional ``preset`` to start from, then overrides.

    Link fields (``intra_link``, ``nic``, ``uplink``) take a preset name ("25g", "efa", "nvlink3")
    or a table ``{bandwidth_gbps = ..., latency_us = ...}``.
    """
    data = dict(data)
    base: dict[str, Any] = {}
    if "preset" in data:
        preset = data.pop("preset")
        if not isinstance(preset, str) or preset not in TOPOLOGY_PRESETS:
            raise DataFileError(
                source,
                f"unknown preset {preset!r}; known: {sorted(TOPOLOGY_PRESETS)}",
                field="preset",
            )
        base = {
            f.name: getattr(TOPOLOGY_PRESETS[preset](), f.name)
            for f in dataclasses.fields(TopologyConfig)
        }
    known = {f.name for f in dataclasses.fields(TopologyConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise DataFileError(
            source,
            f"unknown field(s) {unknown}; known: {sorted(known | {'preset'})}",
            field=unknown[0],
        )
    for name in _LINK_FIELDS:
        if name in data and data[name] is not None:
            presets = NIC_PRESETS if name != "intra_link" else INTERCONNECT_PRESETS
            data[name] = _link_from(data[name], name, source, presets)
    if not base and "network_efficiency" not in data:
        # A file describes a real cluster: its network achieves what the presets' calibrated
        # share says, not line rate (a hand copy of a preset must give the preset's results).
        base["network_efficiency"] = CALIBRATED_NETWORK_EFFICIENCY
    if "uplink" in data and "oversubscription" not in data:
        base["oversubscription"] = 1.0
    if "oversubscription" in data and "uplink" not in data:
        base["uplink"] = None
    merged = {**base, **data}
    try:
        return TopologyConfig(**merged)
    except ConfigError as exc:
        raise DataFileError(source, exc.why, field=exc.field) from exc
    except TypeError as exc:  # a missing required field, or a value of the wrong type
        raise DataFileError(source, str(exc)) from exc


def load_topology(path: str | Path) -> TopologyConfig:
    """Read a topology from a TOML or JSON file; errors name the file and field. Without a
    ``name`` the cluster is named after the file (``racks/big.toml`` -> ``big``)."""
    data = load_table_file(path)
    data.setdefault("name", Path(path).stem)
    return topology_from_mapping(data, source=str(path))
