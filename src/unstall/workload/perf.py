"""Iteration time of a data-parallel job on a placement over a topology.

``t_iter = max(compute + exposed_comm, data)`` where ``exposed_comm = max(0, comm - overlap *
compute)``: communication runs behind the backward pass for up to ``overlap`` of the compute
time, and only the rest is exposed. ``comm`` is the time of the slowest link the placement's
traffic crosses, ``max over links (latency_l + bytes_l / bandwidth_l)``:

- ring all-reduce (``allreduce``): K GPUs in a ring ordered node by node and rack by rack, 2(K-1)
  steps; every hop carries ``2(K-1)/K x gradient_bytes`` per iteration. A node's intra-node
  links carry its GPU-to-GPU hops (``g - 1`` on a node of a multi-node ring, ``K`` on a single
  node), each node's NIC one hop, each rack's uplink one hop when the ring spans racks. Each step
  pays one latency per gradient bucket (PyTorch DDP's 25 MiB buckets by default).
- parameter server (``ps``): one server shard per node of the job, gradients aggregated inside a
  node first (BytePS-like). Each GPU port carries ``gradient_bytes`` per direction (push, then
  pull); each NIC ``2(N-1)/N x gradient_bytes`` (its pushes to the other N-1 shards and its
  shard's answers to their pulls); a rack uplink the part of that which leaves the rack.

Link bandwidth: what the simulator's max-min sharing gives this job on each link
(``link_bandwidth``, bytes/s; see :func:`CommPlan.sharing_weights`), by default the link's full
capacity as far as this job can use it; background ``congestion`` takes a fraction of every
network link (NICs and uplinks) away on top.

The hot path is :func:`plan_time` on a precomputed :class:`CommPlan` (pure float arithmetic);
:func:`iteration_time` builds (and caches) the plan first.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

from unstall.config import check, check_non_negative, check_positive
from unstall.errors import ConfigError
from unstall.net.hardware import DEVICE_PRESETS, compute_time_scale, device
from unstall.net.topology import (
    INTRA,
    LinkId,
    TopologyConfig,
    intra_link,
    nic_link,
    uplink_link,
)

COMM_KINDS = ("allreduce", "ps")
PRECISIONS = ("fp32", "fp16")
DDP_BUCKET_BYTES = 25 * 2**20  # torch.nn.parallel.DistributedDataParallel(bucket_cap_mb=25)
# Training FLOPs per sample ~ 3 x forward FLOPs: the backward pass computes gradients with respect
# to both activations and weights, each about as costly as the forward pass.
TRAIN_FLOPS_PER_FORWARD = 3.0


# --- placement ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a job's GPUs are: how many on each node, the node ids and (optionally) their racks.

    ``nodes`` defaults to ``0..n-1``; ``racks`` empty means "ask the topology"
    (``topology.rack_of(node)``). Pollux-style strings ("1123": one digit per node) are read by
    :meth:`parse` and written by :meth:`render`.
    """

    gpus_per_node: tuple[int, ...]
    nodes: tuple[int, ...] = ()
    racks: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        check(len(self.gpus_per_node) >= 1, "Placement", "gpus_per_node", "must not be empty")
        for g in self.gpus_per_node:
            check(
                isinstance(g, int) and g >= 1,
                "Placement",
                "gpus_per_node",
                f"every count must be an integer >= 1, got {self.gpus_per_node!r}",
            )
        if not self.nodes:
            object.__setattr__(self, "nodes", tuple(range(len(self.gpus_per_node))))
        check(
            len(self.nodes) == len(self.gpus_per_node),
            "Placement",
            "nodes",
            f"needs one node id per count ({len(self.gpus_per_node)}), got {len(self.nodes)}",
        )
        check(len(set(self.nodes)) == len(self.nodes), "Placement", "nodes", "ids must be distinct")
        check(
            not self.racks or len(self.racks) == len(self.nodes),
            "Placement",
            "racks",
            f"needs one rack per node ({len(self.nodes)}) or none, got {len(self.racks)}",
        )

    @property
    def n_gpus(self) -> int:
        return sum(self.gpus_per_node)

    @property
    def n_nodes(self) -> int:
        return len(self.gpus_per_node)

    @classmethod
    def parse(cls, text: str | int) -> Placement:
        """``"1123"`` -> nodes of 1, 1, 2 and 3 GPUs; ``"8.8.16"`` for counts above 9."""
        s = str(text).strip()
        parts = s.split(".") if "." in s else list(s)
        if not s or not all(p.isdigit() and int(p) >= 1 for p in parts):
            raise ConfigError(
                "Placement", "text", f"{s!r} is not a placement string like '1123' or '8.8.16'"
            )
        return cls(tuple(int(p) for p in parts))

    def render(self) -> str:
        """The Pollux-style string: one digit per node, or counts joined by '.' above 9."""
        if all(g <= 9 for g in self.gpus_per_node):
            return "".join(str(g) for g in self.gpus_per_node)
        return ".".join(str(g) for g in self.gpus_per_node)

    def rack_list(self, topology: TopologyConfig) -> tuple[int, ...]:
        return self.racks or tuple(topology.rack_of(n) for n in self.nodes)


# --- job ----------------------------------------------------------------------------------------


class FactsLike(Protocol):
    """What :meth:`JobPerfSpec.from_facts` reads (``zoo.ModelFacts`` has it)."""

    @property
    def gradient_bytes(self) -> int: ...
    @property
    def gradient_tensors(self) -> int: ...
    @property
    def layers(self) -> int: ...
    @property
    def flops_per_sample(self) -> float: ...


@dataclass(frozen=True, kw_only=True)
class JobPerfSpec:
    """What the perf model needs to know about a job.

    ``compute_s``: forward + backward + optimizer time of one iteration on ``device`` at
    ``local_batch`` samples per GPU, of which ``fixed_compute_s`` does not grow with the batch.
    ``overlap``: the fraction of compute time behind which communication can hide (0 = none,
    1 = all of it). ``data_s``: time the input pipeline needs per iteration (prefetched, so it only
    matters when it is the slowest part).
    """

    name: str = "job"
    device: str = "v100"
    compute_s: float
    local_batch: int = 32
    fixed_compute_s: float = 0.0
    gradient_bytes: float
    gradient_tensors: int = 1
    layers: int = 1
    comm: str = "allreduce"
    overlap: float = 0.5
    bucket_bytes: float = DDP_BUCKET_BYTES
    data_s: float = 0.0
    precision: str = "fp32"

    def __post_init__(self) -> None:
        check_positive(
            self,
            compute_s=self.compute_s,
            local_batch=self.local_batch,
            gradient_tensors=self.gradient_tensors,
            layers=self.layers,
            bucket_bytes=self.bucket_bytes,
        )
        check_non_negative(
            self,
            fixed_compute_s=self.fixed_compute_s,
            gradient_bytes=self.gradient_bytes,
            data_s=self.data_s,
        )
        check(
            self.fixed_compute_s <= self.compute_s,
            self,
            "fixed_compute_s",
            f"must be <= compute_s ({self.compute_s}), got {self.fixed_compute_s}",
        )
        check(0.0 <= self.overlap <= 1.0, self, "overlap", f"must be in [0, 1], got {self.overlap}")
        check(
            self.comm in COMM_KINDS, self, "comm", f"must be one of {COMM_KINDS}, got {self.comm!r}"
        )
        check(
            self.precision in PRECISIONS,
            self,
            "precision",
            f"must be one of {PRECISIONS}, got {self.precision!r}",
        )
        check(
            self.device.lower() in DEVICE_PRESETS,
            self,
            "device",
            f"unknown device {self.device!r}; known: {sorted(DEVICE_PRESETS)}",
        )

    @property
    def buckets(self) -> int:
        """Gradient buckets reduced one after the other (never more than there are tensors)."""
        by_bytes = max(1, math.ceil(self.gradient_bytes / self.bucket_bytes))
        return min(self.gradient_tensors, by_bytes)

    def compute_at(self, local_batch: int) -> float:
        """Compute seconds per iteration at another local batch (linear in the batch)."""
        per_sample = (self.compute_s - self.fixed_compute_s) / self.local_batch
        return self.fixed_compute_s + per_sample * local_batch

    def on_device(self, name: str) -> JobPerfSpec:
        """The same job with its compute times scaled to GPU ``name``."""
        scale = compute_time_scale(self.device, name, self.precision)
        return dataclasses.replace(
            self,
            device=device(name).name,
            compute_s=self.compute_s * scale,
            fixed_compute_s=self.fixed_compute_s * scale,
        )

    @classmethod
    def from_facts(
        cls,
        facts: FactsLike,
        *,
        device_name: str = "v100",
        local_batch: int = 32,
        precision: str = "fp32",
        **fields: Any,
    ) -> JobPerfSpec:
        """Estimate from a model's static facts: ``3 x forward FLOPs x batch / achieved FLOP/s``."""
        rate = device(device_name).achieved_tflops(precision) * 1e12
        compute_s = TRAIN_FLOPS_PER_FORWARD * facts.flops_per_sample * local_batch / rate
        return cls(
            device=device(device_name).name,
            compute_s=max(compute_s, 1e-9),
            local_batch=local_batch,
            gradient_bytes=float(facts.gradient_bytes),
            gradient_tensors=max(1, int(facts.gradient_tensors)),
            layers=max(1, int(facts.layers)),
            precision=precision,
            **fields,
        )

    @classmethod
    def from_zoo(
        cls,
        model: str,
        *,
        device_name: str = "v100",
        local_batch: int = 32,
        precision: str = "fp32",
        **fields: Any,
    ) -> JobPerfSpec:
        """:meth:`from_facts` on ``zoo.facts(model)`` (the zoo is imported only here)."""
        from unstall.workload import zoo

        return cls.from_facts(
            zoo.facts(model),
            device_name=device_name,
            local_batch=local_batch,
            precision=precision,
            **{"name": model, **fields},
        )


# --- communication plan -------------------------------------------------------------------------


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
        check(
            g <= topology.gpus_per_node,
            "Placement",
            "gpus_per_node",
            f"{g} GPUs on node {node}, but nodes have {topology.gpus_per_node}",
        )
    for rack in racks:
        check(
            0 <= rack < topology.racks, "Placement", "racks", f"rack {rack} is not in the topology"
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

    Compute time is scaled from ``spec.device`` to ``topology.device``.
    """
    racks = placement.rack_list(topology)
    _validate(placement, topology, racks)
    compute = spec.compute_s * compute_time_scale(spec.device, topology.device, spec.precision)
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


_cached_plan = lru_cache(maxsize=65536)(comm_plan)


def link_loads(
    spec: JobPerfSpec, placement: Placement, topology: TopologyConfig
) -> tuple[LinkLoad, ...]:
    """Which links the placement's communication crosses and what each carries per iteration."""
    return _cached_plan(spec, placement, topology).loads


# --- iteration time -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IterationTime:
    """One iteration: compute, communication (all of it, and the part not hidden), total."""

    compute_s: float
    comm_s: float
    exposed_comm_s: float
    total_s: float
    bottleneck: LinkId | None


def plan_time(
    plan: CommPlan,
    link_bandwidth: Mapping[LinkId, float] | None = None,
    congestion: float = 0.0,
) -> IterationTime:
    """The hot path: iteration time of a planned job under given link bandwidths (bytes/s)."""
    if not 0.0 <= congestion < 1.0:
        raise ConfigError("iteration_time", "congestion", f"must be in [0, 1), got {congestion!r}")
    keep = 1.0 - congestion
    comm = 0.0
    bottleneck = None
    for ld in plan.loads:
        bw = ld.max_bandwidth
        if link_bandwidth is not None:
            given = link_bandwidth.get(ld.link)
            if given is not None and given < bw:
                bw = given
        if ld.network:
            bw *= keep
        if ld.bytes == 0.0:
            t = ld.latency_s
        else:
            t = ld.latency_s + (ld.bytes / bw if bw > 0.0 else math.inf)
        if t > comm:
            comm = t
            bottleneck = ld.link
    exposed = comm - plan.overlap_s
    if exposed < 0.0:
        exposed = 0.0
    total = plan.compute_s + exposed
    if plan.data_s > total:
        total = plan.data_s
    return IterationTime(plan.compute_s, comm, exposed, total, bottleneck)


def iteration_time(
    spec: JobPerfSpec,
    placement: Placement,
    topology: TopologyConfig,
    *,
    link_bandwidth: Mapping[LinkId, float] | None = None,
    congestion: float = 0.0,
) -> IterationTime:
    """Iteration time of ``spec`` on ``placement`` over ``topology``.

    ``link_bandwidth``: bytes/s this job gets on each link from the sharing step (links left out,
    or ``None``, get the full capacity this job can use); ``congestion``: the fraction of every
    network link's bandwidth taken by background traffic.
    """
    return plan_time(_cached_plan(spec, placement, topology), link_bandwidth, congestion)


def consolidated_placement(n_gpus: int, topology: TopologyConfig) -> Placement:
    """The tightest placement of ``n_gpus``: full nodes first, nodes of one rack first."""
    check(
        isinstance(n_gpus, int) and 1 <= n_gpus <= topology.n_gpus,
        "consolidated_placement",
        "n_gpus",
        f"must be in 1..{topology.n_gpus} (the topology's GPUs), got {n_gpus!r}",
    )
    per = topology.gpus_per_node
    full, rest = divmod(n_gpus, per)
    counts = (per,) * full + ((rest,) if rest else ())
    return Placement(counts, racks=tuple(topology.rack_of(i) for i in range(len(counts))))


def slowdown(spec: JobPerfSpec, placement: Placement, topology: TopologyConfig) -> float:
    """``t_iter(placement) / t_iter(consolidated)`` for the same GPU count, alone on the links."""
    here = iteration_time(spec, placement, topology).total_s
    best = iteration_time(spec, consolidated_placement(placement.n_gpus, topology), topology)
    return here / best.total_s
