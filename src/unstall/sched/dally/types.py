"""Dally on a cluster of several GPU types: which type, weighed together with the network.

A job's predicted time per unit of work on a placement is ``1 / speed`` of the placement's type
(``JobView.speed_on``: the model family's speed there, on that type's most consolidated
placement, communication included) times its network slowdown there (its sensitivity at the
congestion now, with the NICs it would share, when it is spread over more nodes than that type
needs; consolidated over several nodes of the type, the slowdown of its ring at the congestion
and the spread jobs on its NICs; 1 on one node). Dally compares placements by that time over
the job's best (its fastest type, consolidated): its *cost*. So a network-sensitive job
consolidated on a slow type beats the same job spread over fast GPUs exactly when
``speed_fast / speed_slow`` is below its spread slowdown, and a job that gains little from the
fast type leaves it to one that gains more (:class:`~unstall.sched.placement.TypeClaims`).

On a cluster of one type none of this runs: the policy answers as it did before.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from unstall.sched.base import ClusterLayout, JobView, Placement
from unstall.sched.free import FreeGpus
from unstall.sched.placement import (
    Locality,
    at_level,
    locality_of,
    min_nodes_on_type,
    only_type,
    slowest_type,
    types_by_speed,
)


@dataclass(frozen=True, slots=True)
class Option:
    """A placement on one type with its cost (time per unit of work over the job's best) and
    the network part of it (1 when consolidated on its type)."""

    placement: Placement
    kind: str
    cost: float
    net: float


def best_speed(job: JobView, layout: ClusterLayout) -> float:
    """``job``'s speed on its fastest type (1 when the backend gives no speeds)."""
    return max((job.speed_on(t) for t in layout.types), default=1.0)


def best_level_on_type(layout: ClusterLayout, kind: str, num_gpus: int) -> Locality:
    """The best locality an empty cluster's ``kind`` nodes could give a job of ``num_gpus``."""
    nodes = [n for n, t in enumerate(layout.node_type) if t == kind]
    if any(layout.node_gpus[n] >= num_gpus for n in nodes):
        return Locality.NODE
    by_rack: dict[int, int] = {}
    for n in nodes:
        rack = layout.node_rack[n]
        by_rack[rack] = by_rack.get(rack, 0) + layout.node_gpus[n]
    return Locality.RACK if max(by_rack.values(), default=0) >= num_gpus else Locality.CLUSTER


def consolidated_on_type(
    placement: Placement, kind: str, num_gpus: int, layout: ClusterLayout
) -> bool:
    """Whether ``placement`` is as consolidated as ``kind``'s nodes allow: its fewest nodes, at
    its best level."""
    if len(placement) > min_nodes_on_type(layout, kind, num_gpus):
        return False
    return locality_of(placement, layout) <= best_level_on_type(layout, kind, num_gpus)


def cost_of(
    job: JobView,
    placement: Placement,
    layout: ClusterLayout,
    congestion: float,
    spread_jobs_by_node: Sequence[int] = (),
    *,
    own_share: bool = False,
) -> Option:
    """``placement``'s :class:`Option` for ``job`` (``own_share``: the job runs there already,
    so it is among the NIC counts)."""
    kind = slowest_type(job, placement, layout)
    speed = job.speed_on(kind)
    net = 1.0
    sharing = 0
    if len(placement) > 1 and spread_jobs_by_node:
        sharing = max(spread_jobs_by_node[n] for n, _ in placement)
        if own_share:
            sharing = max(0, sharing - 1)
    sensitivity = job.sensitivity
    if not consolidated_on_type(placement, kind, job.num_gpus, layout):
        across = locality_of(placement, layout) == Locality.CLUSTER
        net = max(1.0, sensitivity.spread_slowdown(across, congestion, sharing))
        # Against the consolidated placement at this congestion (``net``'s reference).
        links = sensitivity.consolidated_at(congestion)
    elif len(placement) > 1:
        # Consolidated over several nodes of its type (nodes smaller than the job): its ring
        # crosses NICs too, slowed by the congestion and the spread jobs sharing them, which a
        # job on one node of another type never is.
        links = sensitivity.consolidated_at(1.0 - (1.0 - congestion) / (1 + sharing))
    else:
        links = 1.0
    cost = best_speed(job, layout) / speed * net * links if speed > 0.0 else float("inf")
    return Option(placement, kind, cost, net)


def consolidated_option(
    job: JobView, free: FreeGpus, kinds: Sequence[str], congestion: float
) -> Option | None:
    """The cheapest placement consolidated on one of ``kinds`` that the free GPUs hold (the
    first of ``kinds`` among equals)."""
    layout = free.layout
    options = []
    for kind, by_node, by_rack in _types_with_room(job, free, kinds):
        found = at_level(Locality.CLUSTER, by_node, by_rack, layout, job.num_gpus)
        if found is not None and consolidated_on_type(found, kind, job.num_gpus, layout):
            options.append(cost_of(job, found, layout, congestion))
    return _cheapest(options)


def spread_option(
    job: JobView,
    free: FreeGpus,
    kinds: Sequence[str],
    congestion: float,
    spread_jobs_by_node: Sequence[int],
    *,
    span_racks: bool,
) -> Option | None:
    """The cheapest placement on one of ``kinds`` at any level Dally accepts (within one rack,
    over racks only when ``span_racks`` or no rack of the type holds the job)."""
    layout = free.layout
    options = []
    for kind, by_node, by_rack in _types_with_room(job, free, kinds):
        level = Locality.RACK
        if span_racks or best_level_on_type(layout, kind, job.num_gpus) == Locality.CLUSTER:
            level = Locality.CLUSTER
        found = at_level(level, by_node, by_rack, layout, job.num_gpus)
        if found is not None:
            options.append(cost_of(job, found, layout, congestion, spread_jobs_by_node))
    return _cheapest(options)


def _types_with_room(
    job: JobView, free: FreeGpus, kinds: Sequence[str]
) -> Iterator[tuple[str, list[int], list[int]]]:
    """Each of ``kinds`` whose free GPUs are enough for ``job``, with the free GPUs of that
    type alone, by node and by rack."""
    for kind in kinds:
        by_node, by_rack = only_type(free.by_node, free.layout, kind)
        if sum(by_rack) >= job.num_gpus:
            yield kind, by_node, by_rack


def _cheapest(options: Sequence[Option]) -> Option | None:
    """The option of least cost (the first among equals: the types' order decides ties)."""
    return min(options, key=lambda option: option.cost, default=None)


def upgrade_target(
    job: JobView, free: FreeGpus, congestion: float, spread_jobs_by_node: Sequence[int]
) -> tuple[Option, Option] | None:
    """Where running ``job`` would run faster: its current :class:`Option` and the cheapest
    consolidated one the free GPUs (with its own given back) hold, when that is cheaper; None
    otherwise. ``free`` is left as it was."""
    layout = free.layout
    now = cost_of(job, job.placement, layout, congestion, spread_jobs_by_node, own_share=True)
    if now.cost <= 1.0:
        return None
    free.give(job.placement)
    try:
        target = consolidated_option(job, free, types_by_speed(job, layout), congestion)
    finally:
        free.take(job.placement)
    if target is None or target.cost >= now.cost:
        return None
    return now, target
