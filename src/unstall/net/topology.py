"""Cluster topology: racks of nodes of GPUs, and the links a job's traffic crosses.

A cluster is regular (``racks`` x ``nodes_per_rack`` nodes of ``gpus_per_node`` GPUs of one
``device``) or node groups (:class:`NodeGroup`: ``count`` nodes of their own GPU count and
type, in a rack); either way ``node_gpus``, ``node_device`` and ``node_rack`` describe each node.

Three kinds of physical link, each with a hashable id:

- ``("intra", node)``: the GPU-to-GPU links inside a node (NVLink, NVSwitch or PCIe). Every GPU
  has its own port, so one hop of a ring gets the full per-GPU bandwidth and the node's capacity
  is that times the GPUs per node (GPUs are never shared between jobs, so these never contend).
- ``("nic", node)``: the node's network interface, per direction.
- ``("uplink", rack)``: the rack switch's link to the core, per direction; its bandwidth is given,
  or derived from the NICs of the rack and an oversubscription ratio.

Bandwidths are per direction (a ring all-reduce sends and receives at once on every hop).
Presets are functions (:func:`small`, :func:`medium`, :func:`philly`) registered in
:data:`TOPOLOGY_PRESETS`; :mod:`unstall.net.topology_files` reads TOML and JSON files.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property

from unstall.config import check
from unstall.errors import ConfigError, a_or_an
from unstall.net.device_speeds import relative_speed
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


# The largest cluster the simulator takes, from benchmarks/sim_size_limits.py (BENCHMARKS.md,
# "Cluster size limits"): every scheduling round costs about 33 ns per node, so the embedded
# 400-job trace (800 rounds) takes about a minute and 0.7 GB on 2,000,000 nodes of 8 GPUs, and
# the time grows with nodes x rounds (a trace of Philly's length there: hours). A larger file
# is refused with the limit named, rather than left to run for hours or fill memory. The Philly
# cluster is about 550 nodes and 2,500 GPUs.
MAX_NODES = 2_000_000
MAX_GPUS = 8 * MAX_NODES  # measured with 8 GPUs a node


def _is_int(value: object, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


@dataclass(frozen=True, kw_only=True)
class NodeGroup:
    """``count`` nodes of ``gpus_per_node`` GPUs of type ``device`` ("" takes the cluster's
    ``device``), in rack ``rack`` (None: a rack of the group's own; groups naming the same rack
    share its uplink). ``intra_link_kind`` "" takes the GPU's default interconnect."""

    count: int
    gpus_per_node: int
    device: str = ""
    rack: int | None = None
    intra_link_kind: str = ""

    def __post_init__(self) -> None:
        for name in ("count", "gpus_per_node"):
            value = getattr(self, name)
            check(_is_int(value, 1), self, name, f"must be an integer >= 1, got {value!r}")
        check(
            self.rack is None or _is_int(self.rack, 0),
            self,
            "rack",
            f"must be an integer >= 0, got {self.rack!r}",
        )
        known = isinstance(self.device, str) and self.device.lower() in DEVICE_PRESETS
        check(
            self.device == "" or known,
            self,
            "device",
            f"unknown device {self.device!r}; known: {sorted(DEVICE_PRESETS)}",
        )
        kind = self.intra_link_kind
        check(
            isinstance(kind, str) and (kind == "" or kind.lower() in INTERCONNECT_PRESETS),
            self,
            "intra_link_kind",
            f"unknown interconnect {kind!r}; known: {sorted(INTERCONNECT_PRESETS)}",
        )


@dataclass(frozen=True, kw_only=True)
class TopologyConfig:
    """A cluster: ``racks`` x ``nodes_per_rack`` nodes of ``gpus_per_node`` GPUs of one type, or
    node groups of their own size and GPU type (``nodes``; then ``racks``, ``nodes_per_rack`` and
    ``gpus_per_node`` stay unset and ``device`` is the type of groups that name none).

    ``intra_link_kind`` names an interconnect preset ("" takes the device's default);
    ``intra_link`` overrides its figures. The rack uplink is ``uplink`` when given, otherwise the
    rack's NIC bandwidth divided by ``oversubscription`` (give one or the other, not both).
    """

    name: str = "custom"
    racks: int = 1
    nodes_per_rack: int = 0  # required in the regular form
    gpus_per_node: int = 0  # required in the regular form
    nodes: tuple[NodeGroup, ...] = ()
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
        # The fields of a value each come first and the shape last: a file that names an unknown
        # device and leaves the shape out (``device = "v1000"``) hears about the device, which
        # a reader of the shape's error alone would never learn was wrong.
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
            # A Link may be unlimited (inf, the parameter server's "no emulated limit"); a
            # cluster's links are real ones: an infinite one would make communication free.
            check(
                value is None or math.isfinite(value.bandwidth_gbps),
                self,
                f"{name}.bandwidth_gbps",
                f"must be a finite number, got {getattr(value, 'bandwidth_gbps', None)!r}",
            )
        check(
            math.isfinite(self.oversubscription) and self.oversubscription >= 1.0,
            self,
            "oversubscription",
            f"must be a finite number >= 1 (1 = non-blocking), got {self.oversubscription!r}",
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
        self._check_shape()

    def _check_shape(self) -> None:
        nodes: object = self.nodes
        if not (isinstance(nodes, tuple) and all(isinstance(g, NodeGroup) for g in nodes)):
            if isinstance(nodes, NodeGroup):
                got = "one NodeGroup: write nodes=(NodeGroup(...),)"
            elif isinstance(nodes, tuple | list):
                wrong = [g for g in nodes if not isinstance(g, NodeGroup)]
                got = (
                    f"{a_or_an(type(wrong[0]).__name__)} among them"
                    if wrong
                    else "a list: write nodes=(NodeGroup(...), ...)"
                )
            else:
                got = type(nodes).__name__
            check(False, self, "nodes", f"must be a tuple of NodeGroup, got {got}")
        if self.nodes:
            for name, unset in (("racks", 1), ("nodes_per_rack", 0), ("gpus_per_node", 0)):
                check(
                    getattr(self, name) == unset,
                    self,
                    name,
                    "give either node groups (nodes) or racks x nodes_per_rack x gpus_per_node",
                )
            nodes = sum(g.count for g in self.nodes)
            gpus = sum(g.count * g.gpus_per_node for g in self.nodes)
            self._check_size(nodes, gpus, "nodes")
            return
        for name in ("racks", "nodes_per_rack", "gpus_per_node"):
            value = getattr(self, name)
            check(_is_int(value, 1), self, name, f"must be an integer >= 1, got {value!r}")
        nodes = self.racks * self.nodes_per_rack
        self._check_size(nodes, nodes * self.gpus_per_node, "nodes_per_rack")

    def _check_size(self, nodes: int, gpus: int, field_name: str) -> None:
        """Refuse clusters too big to simulate in reasonable time and memory, naming the limit."""
        check(
            nodes <= MAX_NODES,
            self,
            field_name,
            f"{nodes:,} nodes is more than the simulator takes (at most {MAX_NODES:,})",
        )
        check(
            gpus <= MAX_GPUS,
            self,
            field_name if field_name == "nodes" else "gpus_per_node",
            f"{gpus:,} GPUs is more than the simulator takes (at most {MAX_GPUS:,})",
        )

    # --- sizes ----------------------------------------------------------------------------------

    @property
    def regular(self) -> bool:
        """Racks of equal nodes of one GPU type (no node groups)."""
        return not self.nodes

    @property
    def n_nodes(self) -> int:
        if self.nodes:
            return len(self.node_gpus)
        return self.racks * self.nodes_per_rack

    @property
    def n_gpus(self) -> int:
        if self.nodes:
            return sum(self.node_gpus)
        return self.n_nodes * self.gpus_per_node

    @property
    def n_racks(self) -> int:
        return len(self.rack_sizes) if self.nodes else self.racks

    def rack_of(self, node: int) -> int:
        """The rack that holds ``node`` (nodes are numbered group by group, rack by rack)."""
        if self.nodes:
            return self.node_rack[node]
        return node // self.nodes_per_rack

    @cached_property
    def _groups(self) -> tuple[tuple[NodeGroup, int], ...]:
        """Each node group with its rack index: racks numbered in order of first mention, a
        group without one on a rack of its own."""
        labels: dict[object, int] = {}
        out = []
        for i, group in enumerate(self.nodes):
            label: object = ("own", i) if group.rack is None else group.rack
            out.append((group, labels.setdefault(label, len(labels))))
        return tuple(out)

    @cached_property
    def node_gpus(self) -> tuple[int, ...]:
        """GPUs of each node."""
        if not self.nodes:
            return (self.gpus_per_node,) * self.n_nodes
        return tuple(g.gpus_per_node for g, _ in self._groups for _ in range(g.count))

    @cached_property
    def node_device(self) -> tuple[str, ...]:
        """GPU type of each node (lower case)."""
        if not self.nodes:
            return (self.device.lower(),) * self.n_nodes
        return tuple(
            (g.device or self.device).lower() for g, _ in self._groups for _ in range(g.count)
        )

    @cached_property
    def node_rack(self) -> tuple[int, ...]:
        """Rack of each node."""
        if not self.nodes:
            return tuple(n // self.nodes_per_rack for n in range(self.n_nodes))
        return tuple(rack for g, rack in self._groups for _ in range(g.count))

    @cached_property
    def rack_sizes(self) -> tuple[int, ...]:
        """Nodes in each rack."""
        if not self.nodes:
            return (self.nodes_per_rack,) * self.racks
        sizes = [0] * (max(self.node_rack) + 1)
        for rack in self.node_rack:
            sizes[rack] += 1
        return tuple(sizes)

    @cached_property
    def devices(self) -> tuple[str, ...]:
        """The GPU types of the cluster, in order of first appearance."""
        return tuple(dict.fromkeys(self.node_device))

    def compute_device(self, nodes: Iterable[int]) -> str:
        """The GPU type that sets the compute time of a job on ``nodes``: the slowest one there
        (synchronous data parallelism waits for the slowest GPU at every step)."""
        if not self.nodes:
            return self.device
        kinds = {self.node_device[n] for n in nodes}
        return min(kinds, key=lambda d: (relative_speed(d), d))

    @cached_property
    def fastest_device(self) -> str:
        """The fastest GPU type of the cluster (by its measured fp32 speed for a model of no
        particular family, :func:`unstall.net.device_speeds.relative_speed`)."""
        if not self.nodes:
            return self.device
        return max(self.devices, key=lambda d: (relative_speed(d), d))

    def describe(self) -> str:
        """One line for a run's header: name, shape, GPU types and the network efficiency."""
        calibrated = (
            " (calibrated)" if self.network_efficiency == CALIBRATED_NETWORK_EFFICIENCY else ""
        )
        return (
            f"{self.name}: {self.n_gpus} GPUs, {self.describe_shape()}, "
            f"NICs {self.nic.bandwidth_gbps:g} Gbit/s, "
            f"network at {self.network_efficiency:.0%} of line rate{calibrated}"
        )

    def describe_shape(self) -> str:
        """``2 racks x 4 nodes x 4 v100``, or the node groups: ``2 racks, nodes 4 x 4 v100 +
        4 x 4 k80``."""

        def racks(n: int) -> str:
            return f"{n} rack{'' if n == 1 else 's'}"

        if not self.nodes:
            per_node = f"{self.gpus_per_node} {self.device}"
            nodes = f"{self.nodes_per_rack} node{'' if self.nodes_per_rack == 1 else 's'}"
            return f"{racks(self.racks)} x {nodes} x {per_node}"
        groups = " + ".join(
            f"{g.count} x {g.gpus_per_node} {(g.device or self.device).lower()}" for g in self.nodes
        )
        return f"{racks(self.n_racks)}, nodes {groups}"

    # --- links ----------------------------------------------------------------------------------

    @cached_property
    def intra_spec(self) -> Link:
        """The per-GPU intra-node link of the regular form: ``intra_link``, else the kind's or
        device's preset (node groups: :meth:`intra_spec_of`)."""
        return self._intra_for(self.device, "")

    def _intra_for(self, device: str, group_kind: str) -> Link:
        if self.intra_link is not None:
            return self.intra_link
        kind = (
            group_kind.lower()
            or self.intra_link_kind.lower()
            or DEVICE_PRESETS[device.lower()].intra_link
        )
        return _link_of(INTERCONNECT_PRESETS[kind])

    @cached_property
    def _node_intra(self) -> tuple[Link, ...]:
        specs: dict[tuple[str, str], Link] = {}
        out: list[Link] = []
        for group, _ in self._groups:
            device = group.device or self.device
            key = (device.lower(), group.intra_link_kind.lower())
            if key not in specs:
                specs[key] = self._intra_for(device, group.intra_link_kind)
            out += [specs[key]] * group.count
        return tuple(out)

    def intra_spec_of(self, node: int) -> Link:
        """The per-GPU intra-node link of ``node``."""
        return self._node_intra[node] if self.nodes else self.intra_spec

    @cached_property
    def uplink_spec(self) -> Link:
        """The rack uplink of the regular form: ``uplink``, else the rack's NICs over the
        oversubscription ratio (node groups: :meth:`uplink_spec_of`)."""
        return self._uplink_for(self.nodes_per_rack)

    def _uplink_for(self, nodes_in_rack: int) -> Link:
        if self.uplink is not None:
            return self.uplink
        return Link(
            bandwidth_gbps=nodes_in_rack * self.nic.bandwidth_gbps / self.oversubscription,
            latency_us=SWITCH_HOP_LATENCY_US,
        )

    def uplink_spec_of(self, rack: int) -> Link:
        """The uplink of ``rack`` (a derived one grows with the rack's nodes)."""
        return self._rack_uplinks[rack] if self.nodes else self.uplink_spec

    @cached_property
    def _rack_uplinks(self) -> tuple[Link, ...]:
        return tuple(self._uplink_for(size) for size in self.rack_sizes)

    @cached_property
    def _effective_rack_uplinks(self) -> tuple[Link, ...]:
        return tuple(_scaled(spec, self.network_efficiency) for spec in self._rack_uplinks)

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
            return self._node_intra[link[1]] if self.nodes else self.intra_spec
        if kind == NIC:
            return self._effective_nic
        if kind == UPLINK:
            if self.nodes:
                return self._effective_rack_uplinks[link[1]]
            return self._effective_uplink
        raise ConfigError("LinkId", "kind", f"unknown link kind {kind!r}; known: {LINK_KINDS}")

    def capacity(self, link: LinkId) -> float:
        """Bytes/s the link carries in one direction, all flows together.

        An intra-node link's capacity is the per-GPU bandwidth times the GPUs of the node (each
        GPU has its own port); a NIC's and an uplink's is their bandwidth.
        """
        spec = self.spec_of(link)
        if link[0] == INTRA:
            gpus = self.node_gpus[link[1]] if self.nodes else self.gpus_per_node
            return spec.bytes_per_s * gpus
        return spec.bytes_per_s

    def links(self) -> Iterator[LinkId]:
        """Every link of the cluster: intra and NIC per node, then one uplink per rack."""
        for node in range(self.n_nodes):
            yield intra_link(node)
            yield nic_link(node)
        if self.n_racks > 1:
            for rack in range(self.n_racks):
                yield uplink_link(rack)

    def capacities(self) -> dict[LinkId, float]:
        """``{link: capacity in bytes/s}`` for every link, ready for :mod:`unstall.net.sharing`."""
        return {link: self.capacity(link) for link in self.links()}


# --- presets ------------------------------------------------------------------------------------


def tiny() -> TopologyConfig:
    """16 GPUs: 2 racks x 2 nodes x 4 V100 (NVLink2), 25 GbE NICs, uplinks 2:1 oversubscribed:
    the cluster a live run emulates on one machine by default (one Ray node per node)."""
    return TopologyConfig(
        name="tiny",
        racks=2,
        nodes_per_rack=2,
        gpus_per_node=4,
        device="v100",
        nic=_link_of(NIC_PRESETS["25g"]),
        oversubscription=2.0,
        network_efficiency=CALIBRATED_NETWORK_EFFICIENCY,
    )


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
    "tiny": tiny,
    "small": small,
    "medium": medium,
    "philly": philly,
}


def topology_preset(name: str) -> TopologyConfig:
    """The preset called ``name``, with an error listing the known ones."""
    if isinstance(name, TopologyConfig):
        raise ConfigError(
            "topology_preset",
            "name",
            f"takes a preset's name, got the cluster {name.name!r} itself: use it as it is",
        )
    if not isinstance(name, str) or name not in TOPOLOGY_PRESETS:
        raise ConfigError(
            "TopologyConfig",
            "preset",
            f"unknown preset {name!r}; known: {sorted(TOPOLOGY_PRESETS)}",
        )
    return TOPOLOGY_PRESETS[name]()
