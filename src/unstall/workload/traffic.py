"""A job's communication on a placement: which links its traffic crosses, and what it puts on
each (bytes, latency, its share weight in the max-min sharing step).

- ring all-reduce (``allreduce``): K GPUs in a ring ordered node by node and rack by rack, 2(K-1)
  steps; every hop carries ``2(K-1)/K x gradient_bytes`` per iteration. A node's intra-node
  links carry its GPU-to-GPU hops (``g - 1`` on a node of a multi-node ring, ``K`` on a single
  node), each node's NIC one hop, each rack's uplink one hop when the ring spans racks. Each step
  pays one latency per gradient bucket (PyTorch DDP's 25 MiB buckets by default).
- parameter server (``ps``): one server shard per node of the job, gradients aggregated inside a
  node first (BytePS-like). Each GPU port carries ``gradient_bytes`` per direction (push, then
  pull); each NIC ``2(N-1)/N x gradient_bytes`` (its pushes to the other N-1 shards and its
  shard's answers to their pulls); a rack uplink the part of that which leaves the rack.

A :class:`CommPlan` is computed once per (job, placement, topology) and then evaluated many
times by :func:`unstall.workload.perf.plan_time`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from unstall.config import check
from unstall.net.device_speeds import compute_time_scale
from unstall.net.topology import (
    INTRA,
    LinkId,
    TopologyConfig,
    intra_link,
    nic_link,
    uplink_link,
)
from unstall.workload.job_specs import JobPerfSpec
from unstall.workload.placement import Placement


@dataclass(frozen=True, slots=True)
class LinkLoad:
    """What one job's traffic puts on one link per iteration.

    ``weight``: the job's bytes on this link per byte of its sharing unit (hops of a ring on the
    link), so that a job running at unit rate ``r`` uses ``weight x r`` bytes/s of the link.
    ``max_bandwidth``: bytes/s the job can use on the link when alone (its hops x the per-hop
    bandwidth, at most the capacity). ``latency_s``: per-iteration latency over the link.
    """

    link: LinkId
    bytes: float
    weight: float
    max_bandwidth: float
    latency_s: float
    network: bool


@dataclass(frozen=True, slots=True)
class CommPlan:
    """A job on a placement: its compute time there and the load it puts on every link."""

    compute_s: float
    overlap_s: float
    data_s: float
    unit_bytes: float
    loads: tuple[LinkLoad, ...]

    def sharing_weights(self) -> dict[LinkId, float]:
        """``{link: weight}``: this job as one flow of :func:`unstall.net.sharing.max_min_fair`."""
        return {ld.link: ld.weight for ld in self.loads}

    @property
    def max_rate(self) -> float:
        """The unit rate this job reaches alone (its cap in the sharing step)."""
        return min((ld.max_bandwidth / ld.weight for ld in self.loads), default=math.inf)

    def bandwidth_at_rate(self, rate: float) -> dict[LinkId, float]:
        """``link_bandwidth`` for :func:`plan_time` when the sharing step gave this job ``rate``."""
        return {ld.link: ld.weight * rate for ld in self.loads}


def _load(
    topology: TopologyConfig,
    link: LinkId,
    bytes_: float,
    unit: float,
    steps: float,
    extra_latency_s: float = 0.0,
) -> LinkLoad:
    spec = topology.spec_of(link)
    # A job with no gradient bytes still pays latency; a nominal weight keeps it a valid flow.
    weight = bytes_ / unit if bytes_ > 0 else 1.0
    return LinkLoad(
        link=link,
        bytes=bytes_,
        weight=weight,
        max_bandwidth=min(topology.capacity(link), weight * spec.bytes_per_s),
        latency_s=steps * (spec.latency_s + extra_latency_s),
        network=link[0] != INTRA,
    )


def _validate(placement: Placement, topology: TopologyConfig, racks: tuple[int, ...]) -> None:
    for node, g in zip(placement.nodes, placement.gpus_per_node, strict=True):
        check(
            0 <= node < topology.n_nodes,
            "Placement",
            "nodes",
            f"node {node} is not in the topology (0..{topology.n_nodes - 1})",
        )
        has = topology.node_gpus[node] if topology.nodes else topology.gpus_per_node
        check(
            g <= has,
            "Placement",
            "gpus_per_node",
            f"{g} GPUs on node {node}, but it has {has}",
        )
    for rack in racks:
        check(
            0 <= rack < topology.n_racks,
            "Placement",
            "racks",
            f"rack {rack} is not in the topology",
        )


def _ring_loads(
    spec: JobPerfSpec, placement: Placement, topology: TopologyConfig, racks: tuple[int, ...]
) -> tuple[float, list[LinkLoad]]:
    k, n = placement.n_gpus, placement.n_nodes
    per_hop = 2.0 * (k - 1) / k * spec.gradient_bytes
    unit = per_hop if per_hop > 0 else 1.0
    steps = 2.0 * (k - 1) * spec.buckets
    loads = []
    for node, g in zip(placement.nodes, placement.gpus_per_node, strict=True):
        hops = g if n == 1 else g - 1
        if hops > 0:
            loads.append(_load(topology, intra_link(node), hops * per_hop, unit, steps))
    if n > 1:
        loads += [_load(topology, nic_link(node), per_hop, unit, steps) for node in placement.nodes]
    if len(set(racks)) > 1:  # the ring leaves and enters each rack once; a hop also crosses a NIC
        nic_latency = topology.nic.latency_s
        for rack in sorted(set(racks)):
            loads.append(_load(topology, uplink_link(rack), per_hop, unit, steps, nic_latency))
    return unit, loads


def _ps_loads(
    spec: JobPerfSpec, placement: Placement, topology: TopologyConfig, racks: tuple[int, ...]
) -> tuple[float, list[LinkLoad]]:
    n, b = placement.n_nodes, spec.gradient_bytes
    unit = b if b > 0 else 1.0
    steps = 2.0 * spec.buckets  # a push and a pull per bucket
    loads = [
        _load(topology, intra_link(node), g * b, unit, steps)
        for node, g in zip(placement.nodes, placement.gpus_per_node, strict=True)
    ]
    if n > 1:
        per_nic = 2.0 * (n - 1) / n * b
        loads += [_load(topology, nic_link(node), per_nic, unit, steps) for node in placement.nodes]
    if len(set(racks)) > 1:
        nic_latency = topology.nic.latency_s
        for rack in sorted(set(racks)):
            inside = racks.count(rack)
            out = inside * 2.0 * (n - inside) / n * b
            loads.append(_load(topology, uplink_link(rack), out, unit, steps, nic_latency))
    return unit, loads


_LOAD_BUILDERS = {"allreduce": _ring_loads, "ps": _ps_loads}


def comm_plan(spec: JobPerfSpec, placement: Placement, topology: TopologyConfig) -> CommPlan:
    """The links ``placement``'s traffic crosses, with bytes and latency, and the compute time.

    Compute time is scaled from ``spec.device`` to the slowest GPU type of the placement's
    nodes (``topology.device`` on a regular cluster) by the measured speeds of the job's family
    (or, of no fitted family, the roofline's for its step).
    """
    racks = placement.rack_list(topology)
    _validate(placement, topology, racks)
    device = topology.compute_device(placement.nodes)
    compute = spec.compute_s * compute_time_scale(
        spec.device, device, spec.precision, spec.family, spec.step
    )
    unit, loads = 1.0, list[LinkLoad]()
    if placement.n_gpus > 1:
        unit, loads = _LOAD_BUILDERS[spec.comm](spec, placement, topology, racks)
    return CommPlan(
        compute_s=compute,
        overlap_s=spec.overlap * compute,
        data_s=spec.data_s,
        unit_bytes=unit,
        loads=tuple(loads),
    )


# Plans by (spec, placement, topology), all frozen and hashable: iteration_time() on the same job
# and placement, which callers repeat, then costs a dictionary lookup.
cached_plan = lru_cache(maxsize=65536)(comm_plan)


def link_loads(
    spec: JobPerfSpec, placement: Placement, topology: TopologyConfig
) -> tuple[LinkLoad, ...]:
    """Which links the placement's communication crosses and what each carries per iteration."""
    return cached_plan(spec, placement, topology).loads
