"""Iteration time of a data-parallel job on a placement over a topology.

``t_iter = max(compute + exposed_comm, data)`` where ``exposed_comm = max(0, comm - overlap *
compute)``: communication runs behind the backward pass for up to ``overlap`` of the compute
time, and only the rest is exposed. ``comm`` is the time of the slowest link the placement's
traffic crosses, ``max over links (latency_l + bytes_l / bandwidth_l)``, with the links and their
loads from :func:`unstall.workload.traffic.comm_plan` (ring all-reduce or parameter server).

Link bandwidth: what the simulator's max-min sharing gives this job on each link
(``link_bandwidth``, bytes/s; see :meth:`CommPlan.sharing_weights`), by default the link's full
capacity as far as this job can use it; background ``congestion`` takes a fraction of every
network link (NICs and uplinks) away on top.

The hot path is :func:`plan_time` on a precomputed :class:`CommPlan` (pure float arithmetic);
:func:`iteration_time` builds (and caches) the plan first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from unstall.errors import ConfigError
from unstall.net.topology import LinkId, TopologyConfig
from unstall.workload.job_specs import JobPerfSpec
from unstall.workload.placement import Placement, consolidated_placement
from unstall.workload.traffic import CommPlan, cached_plan


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
    _check_arguments("iteration_time", spec, placement, topology)
    return plan_time(cached_plan(spec, placement, topology), link_bandwidth, congestion)


def _check_arguments(owner: str, spec: object, placement: object, topology: object) -> None:
    """Objects, not names: ``"22"`` or ``"resnet50"`` failed as AttributeErrors deep inside."""
    if not isinstance(spec, JobPerfSpec):
        hint = f'spec_for("{spec}", device)' if isinstance(spec, str) else "JobPerfSpec(...)"
        why = f"must be a JobPerfSpec, got {type(spec).__name__}: {hint} builds one"
        raise ConfigError(owner, "spec", why)
    if not isinstance(placement, Placement):
        hint = (
            f'Placement.parse("{placement}")' if isinstance(placement, str) else "Placement.parse"
        )
        why = f"must be a Placement, got {type(placement).__name__}: {hint} builds one"
        raise ConfigError(owner, "placement", why)
    if not isinstance(topology, TopologyConfig):
        hint = f'topology_preset("{topology}")' if isinstance(topology, str) else "topology_preset"
        why = f"must be a TopologyConfig, got {type(topology).__name__}: {hint} builds one"
        raise ConfigError(owner, "topology", why)


def slowdown(spec: JobPerfSpec, placement: Placement, topology: TopologyConfig) -> float:
    """``t_iter(placement) / t_iter(consolidated)`` for the same GPU count, alone on the links."""
    _check_arguments("slowdown", spec, placement, topology)
    here = iteration_time(spec, placement, topology).total_s
    best = iteration_time(spec, consolidated_placement(placement.n_gpus, topology), topology)
    return here / best.total_s
