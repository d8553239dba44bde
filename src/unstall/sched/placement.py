"""Where a job's GPUs can go: pure helpers shared by the policies.

Locality levels, from best to worst: one node, several nodes of one rack, several racks. Every
helper returns a placement (``((node, gpus), ...)``, nodes ascending) or ``None`` when the free
GPUs given cannot hold the job at that level. Choices are deterministic (ties by index).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from unstall.sched.base import ClusterLayout, Placement


class Locality(enum.IntEnum):
    """How spread a placement is; lower is better for communication."""

    NODE = 0
    RACK = 1
    CLUSTER = 2


def locality_of(placement: Placement, layout: ClusterLayout) -> Locality:
    if len(placement) <= 1:
        return Locality.NODE
    racks = {layout.node_rack[node] for node, _ in placement}
    return Locality.RACK if len(racks) == 1 else Locality.CLUSTER


def best_locality_possible(num_gpus: int, layout: ClusterLayout) -> Locality:
    """The best level an empty cluster could give this job (a 32-GPU job never fits one node)."""
    if num_gpus <= layout.gpus_per_node:
        return Locality.NODE
    return Locality.RACK if num_gpus <= max(layout.rack_gpus) else Locality.CLUSTER


def on_one_node(free_by_node: Sequence[int], num_gpus: int) -> Placement | None:
    """Best fit on one node: the node with the fewest free GPUs that still holds the job (the
    lowest index among equals)."""
    if not free_by_node:
        return None
    # One C-level scan per candidate count, smallest first, instead of a Python loop over nodes.
    for free in range(num_gpus, max(free_by_node) + 1):
        if free in free_by_node:
            return ((free_by_node.index(free), num_gpus),)
    return None


def _take_largest_first(
    nodes: Sequence[int], free_by_node: Sequence[int], num_gpus: int
) -> Placement:
    """Fill from the nodes with the most free GPUs, so the job spans as few nodes as possible."""
    order = sorted((n for n in nodes if free_by_node[n] > 0), key=lambda n: (-free_by_node[n], n))
    taken: list[tuple[int, int]] = []
    need = num_gpus
    for node in order:
        k = min(need, free_by_node[node])
        taken.append((node, k))
        need -= k
        if need == 0:
            break
    return tuple(sorted(taken))


def _fewest_nodes(
    nodes: Sequence[int], free_by_node: Sequence[int], layout: ClusterLayout, num_gpus: int
) -> Placement:
    """Fewest nodes among ``nodes`` (which hold enough free GPUs). On a cluster of several GPU
    types, nodes of one type first (a job spread over two types runs at the slower one's
    speed): the type that needs the fewest nodes, the first listed among equals; mixed types
    only when no single type holds the job."""
    if layout.one_type:
        return _take_largest_first(nodes, free_by_node, num_gpus)
    best: Placement | None = None
    for kind in layout.types:
        same = [n for n in nodes if layout.node_type[n] == kind]
        if sum(free_by_node[n] for n in same) < num_gpus:
            continue
        placement = _take_largest_first(same, free_by_node, num_gpus)
        if best is None or len(placement) < len(best):
            best = placement
    return best if best is not None else _take_largest_first(nodes, free_by_node, num_gpus)


def in_one_rack(
    free_by_node: Sequence[int],
    free_by_rack: Sequence[int],
    layout: ClusterLayout,
    num_gpus: int,
) -> Placement | None:
    """Fewest nodes within a single rack; among equal spans, the rack with the least free room
    (on a cluster of several GPU types, a placement on one type before any mixed one)."""
    best: Placement | None = None
    best_key = (1, 1 << 30, 1 << 30)
    for rack, free in enumerate(free_by_rack):
        if free < num_gpus:
            continue
        placement = _fewest_nodes(layout.rack_nodes[rack], free_by_node, layout, num_gpus)
        key = (0 if layout.one_type else mixed_types(placement, layout), len(placement), free)
        if key < best_key:
            best, best_key = placement, key
    return best


def mixed_types(placement: Placement, layout: ClusterLayout) -> int:
    """1 when ``placement`` spans several GPU types, else 0."""
    types = layout.node_type
    first = types[placement[0][0]]
    return int(any(types[node] != first for node, _ in placement))


def anywhere(
    free_by_node: Sequence[int], num_gpus: int, layout: ClusterLayout | None = None
) -> Placement | None:
    """Fewest nodes anywhere in the cluster (largest free blocks first; one GPU type first when
    ``layout`` has several)."""
    if sum(free_by_node) < num_gpus:
        return None
    if layout is None:
        return _take_largest_first(range(len(free_by_node)), free_by_node, num_gpus)
    return _fewest_nodes(range(len(free_by_node)), free_by_node, layout, num_gpus)


def first_fit(free_by_node: Sequence[int], num_gpus: int) -> Placement | None:
    """Any free GPUs, nodes in index order: what a locality-blind scheduler does."""
    taken: list[tuple[int, int]] = []
    need = num_gpus
    for node, free in enumerate(free_by_node):
        if free:
            k = min(need, free)
            taken.append((node, k))
            need -= k
            if need == 0:
                return tuple(taken)
    return None


def at_level(
    level: Locality,
    free_by_node: Sequence[int],
    free_by_rack: Sequence[int],
    layout: ClusterLayout,
    num_gpus: int,
) -> Placement | None:
    """The most consolidated placement no worse than ``level``, or None."""
    if num_gpus <= layout.gpus_per_node:
        found = on_one_node(free_by_node, num_gpus)
        if found is not None or level == Locality.NODE:
            return found
    if level >= Locality.RACK:
        found = in_one_rack(free_by_node, free_by_rack, layout, num_gpus)
        if found is not None and (layout.one_type or not mixed_types(found, layout)):
            return found
        if level == Locality.RACK:
            return found
        # A job spread over two GPU types runs at the slower one's speed: one type over several
        # racks beats mixed types in one rack.
        spread = anywhere(free_by_node, num_gpus, layout)
        if found is None or (spread is not None and not mixed_types(spread, layout)):
            return spread
        return found
    return None


def most_consolidated(
    free_by_node: Sequence[int],
    free_by_rack: Sequence[int],
    layout: ClusterLayout,
    num_gpus: int,
) -> Placement | None:
    """Only the best level this job could ever get (strict consolidation), or None."""
    level = best_locality_possible(num_gpus, layout)
    placement = at_level(level, free_by_node, free_by_rack, layout, num_gpus)
    if placement is None:
        return None
    return placement if len(placement) == layout.min_nodes(num_gpus) else None
