"""Where a job's GPUs can go: pure helpers shared by the policies.

Locality levels, from best to worst: one node, several nodes of one rack, several racks. Every
helper returns a placement (``((node, gpus), ...)``, nodes ascending) or ``None`` when the free
GPUs given cannot hold the job at that level. Choices are deterministic (ties by index).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Sequence

from unstall.sched.base import ClusterLayout, JobView, Placement


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


# --- several GPU types ---------------------------------------------------------------------------
#
# A job computes at its slowest GPU's speed, so the rules below keep it on one type and choose
# which: the fastest for it (``JobView.speed_on``), and when several waiting jobs want the same
# fast GPUs, the ones that gain most from them (:func:`claim_types`). On a cluster of one type
# none of this is used: every helper above answers as before.


def types_by_speed(job: JobView, layout: ClusterLayout) -> tuple[str, ...]:
    """The GPU types ``job`` can run on (speed above 0), fastest for it first, node order among
    equals (a backend that gives no speeds: every type at 1, in node order)."""
    kinds = layout.types
    return tuple(
        sorted(
            (t for t in kinds if job.speed_on(t) > 0.0),
            key=lambda t: (-job.speed_on(t), kinds.index(t)),
        )
    )


def gain_ratio(job: JobView, layout: ClusterLayout) -> float:
    """How many times faster ``job`` runs on its fastest type than on its second (Gavel's
    effective-throughput measure for two types): 1 with one type, inf when it cannot run on any
    other."""
    kinds = types_by_speed(job, layout)
    if len(kinds) < 2:
        return 1.0 if len(layout.types) < 2 else math.inf
    return job.speed_on(kinds[0]) / job.speed_on(kinds[1])


def free_by_type(free_by_node: Sequence[int], layout: ClusterLayout) -> dict[str, int]:
    """Free GPUs of each type (types in node order)."""
    found = dict.fromkeys(layout.types, 0)
    for free, kind in zip(free_by_node, layout.node_type, strict=True):
        found[kind] += free
    return found


def only_type(
    free_by_node: Sequence[int], layout: ClusterLayout, kind: str
) -> tuple[list[int], list[int]]:
    """``free_by_node`` with every node of another type than ``kind`` at 0, and its racks' sums."""
    by_node = [f if t == kind else 0 for f, t in zip(free_by_node, layout.node_type, strict=True)]
    return by_node, [sum(by_node[n] for n in nodes) for nodes in layout.rack_nodes]


def min_nodes_on_type(layout: ClusterLayout, kind: str, num_gpus: int) -> int:
    """The fewest nodes of type ``kind`` that hold ``num_gpus`` GPUs (all of them if none do)."""
    sizes = sorted(
        (g for g, t in zip(layout.node_gpus, layout.node_type, strict=True) if t == kind)
    )
    count = 0
    while num_gpus > 0 and sizes:
        num_gpus -= sizes.pop()
        count += 1
    return count


def slowest_type(job: JobView, placement: Placement, layout: ClusterLayout) -> str:
    """The GPU type ``job`` computes at on ``placement``: the slowest for it among its nodes'
    (the first by name among equals)."""
    kinds = {layout.node_type[node] for node, _ in placement}
    return min(kinds, key=lambda t: (job.speed_on(t), t))


def fits_one_type(layout: ClusterLayout, num_gpus: int) -> bool:
    """Whether some GPU type has ``num_gpus`` GPUs at all (else the job must span types)."""
    return num_gpus <= max(free_by_type(layout.node_gpus, layout).values(), default=0)


def on_types(
    level: Locality,
    free_by_node: Sequence[int],
    layout: ClusterLayout,
    num_gpus: int,
    types: Sequence[str],
    *,
    strict: bool = False,
) -> Placement | None:
    """The first of ``types`` (in order) whose free GPUs alone hold ``num_gpus`` at ``level`` or
    better, placed there as :func:`at_level` would (``strict``: only as :func:`most_consolidated`
    would); None when none does. A job larger than every type is placed over several types (at
    the slowest one's speed) as before."""
    for kind in types:
        by_node, by_rack = only_type(free_by_node, layout, kind)
        if sum(by_rack) < num_gpus:
            continue
        if strict:
            found = most_consolidated(by_node, by_rack, layout, num_gpus)
        else:
            found = at_level(level, by_node, by_rack, layout, num_gpus)
        if found is not None:
            return found
    if fits_one_type(layout, num_gpus):
        return None
    by_rack = [sum(free_by_node[n] for n in nodes) for nodes in layout.rack_nodes]
    if strict:
        return most_consolidated(free_by_node, by_rack, layout, num_gpus)
    return at_level(level, free_by_node, by_rack, layout, num_gpus)


def claim_types(
    jobs: Iterable[JobView], free_by_node: Sequence[int], layout: ClusterLayout
) -> dict[str, str]:
    """Which type each waiting job should take when the free GPUs are contended, job id -> type.

    ``jobs`` come in the policy's priority order; those the free GPUs can hold (the first ones,
    until their GPUs pass the free count) are the ones that start now, and among them the free
    GPUs of each type go to the jobs that gain most from them: by :func:`gain_ratio`, highest
    first (priority order among equals), each job the fastest type for it whose free GPUs (counted,
    not placed) still hold it. A job left out has no claim (it takes what its speeds say).
    Nothing is claimed on a cluster of one type."""
    if layout.one_type:
        return {}
    left = free_by_type(free_by_node, layout)
    budget = sum(left.values())
    starting: list[tuple[float, int, JobView]] = []
    for rank, job in enumerate(jobs):
        if job.num_gpus > budget:
            break
        budget -= job.num_gpus
        starting.append((-gain_ratio(job, layout), rank, job))
    starting.sort(key=lambda item: item[:2])
    claims: dict[str, str] = {}
    for _, _, job in starting:
        for kind in types_by_speed(job, layout):
            if left[kind] >= job.num_gpus:
                left[kind] -= job.num_gpus
                claims[job.job_id] = kind
                break
    return claims


class TypeClaims:
    """The claims of one round (see :func:`claim_types`) as a policy places its jobs in priority
    order: a job tries its claimed type first, then the other types fastest first, but not the
    GPUs claimed by jobs still to be placed (a job ahead in priority that gains little from the
    fast GPUs leaves them to one behind it that gains more). A claim is dropped once its job
    has been tried (:meth:`done`), placed or not, so no GPU stays reserved for a job that waits.
    On a cluster of one type it claims nothing and every job gets no type list (None: the
    placement helpers' own choice)."""

    def __init__(
        self, jobs: Sequence[JobView], free_by_node: Sequence[int], layout: ClusterLayout
    ) -> None:
        self.layout = layout
        self.claims = claim_types(jobs, free_by_node, layout)
        self._reserved: dict[str, int] = {}
        self._sizes: dict[str, int] = {}
        if self.claims:
            for job in jobs:
                kind = self.claims.get(job.job_id)
                if kind is not None:
                    self._sizes[job.job_id] = job.num_gpus
                    self._reserved[kind] = self._reserved.get(kind, 0) + job.num_gpus

    def types_for(self, job: JobView, free_by_node: Sequence[int]) -> tuple[str, ...] | None:
        """The types ``job`` may take now, in the order to try them (None on one type)."""
        layout = self.layout
        if layout.one_type:
            return None
        kinds = types_by_speed(job, layout)
        claim = self.claims.get(job.job_id)
        if not self._reserved:
            return kinds
        free = free_by_type(free_by_node, layout)
        own = self._sizes.get(job.job_id, 0)
        allowed = tuple(
            t
            for t in kinds
            if t == claim
            or free[t] - self._reserved.get(t, 0) + (own if t == claim else 0) >= job.num_gpus
        )
        if claim in allowed:
            allowed = (claim, *(t for t in allowed if t != claim))
        return allowed

    def done(self, job: JobView) -> None:
        """``job`` has been tried: its claim no longer holds GPUs back."""
        kind = self.claims.pop(job.job_id, None)
        if kind is not None:
            self._reserved[kind] -= self._sizes.pop(job.job_id)
            if self._reserved[kind] <= 0:
                del self._reserved[kind]
