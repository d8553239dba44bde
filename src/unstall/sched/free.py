"""A policy's scratch copy of the free GPUs, so it can plan several starts in one round."""

from __future__ import annotations

from collections.abc import Sequence

from unstall.sched.base import ClusterLayout, ClusterSnapshot, Placement
from unstall.sched.placement import (
    Locality,
    at_level,
    first_fit,
    most_consolidated,
    on_types,
    only_type,
)


class FreeGpus:
    """Free GPUs per node and rack that a policy takes from as it decides (never the cluster's)."""

    __slots__ = ("by_node", "by_rack", "layout", "total")

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.layout: ClusterLayout = snapshot.layout
        self.by_node = list(snapshot.free_by_node)
        self.by_rack = list(snapshot.free_by_rack)
        self.total = sum(self.by_rack)

    def of_type(self, kind: str) -> FreeGpus:
        """A copy holding only the free GPUs of ``kind``'s nodes (the others at 0): what a plan
        that must stay on one GPU type may take from (a cluster of several types)."""
        copy = FreeGpus.__new__(FreeGpus)
        copy.layout = self.layout
        copy.by_node, copy.by_rack = only_type(self.by_node, self.layout, kind)
        copy.total = sum(copy.by_rack)
        return copy

    def take(self, placement: Placement) -> None:
        rack = self.layout.node_rack
        for node, k in placement:
            self.by_node[node] -= k
            self.by_rack[rack[node]] -= k
            self.total -= k

    def give(self, placement: Placement) -> None:
        rack = self.layout.node_rack
        for node, k in placement:
            self.by_node[node] += k
            self.by_rack[rack[node]] += k
            self.total += k

    def at_level(
        self, level: Locality, num_gpus: int, types: Sequence[str] | None = None
    ) -> Placement | None:
        """The most consolidated placement no worse than ``level``. ``types`` (a cluster of
        several GPU types): on the first of these types that holds the job alone (see
        :func:`~unstall.sched.placement.on_types`; none when empty); None: the helpers' own
        choice."""
        if num_gpus > self.total:
            return None
        if types is not None and not self.layout.one_type:
            return on_types(level, self.by_node, self.layout, num_gpus, types)
        return at_level(level, self.by_node, self.by_rack, self.layout, num_gpus)

    def best(self, num_gpus: int, types: Sequence[str] | None = None) -> Placement | None:
        """The most consolidated placement the free GPUs allow now (any level; ``types`` as
        in :meth:`at_level`)."""
        return self.at_level(Locality.CLUSTER, num_gpus, types)

    def consolidated(self, num_gpus: int, types: Sequence[str] | None = None) -> Placement | None:
        """Only the job's best possible level with the fewest nodes, or None (``types`` as in
        :meth:`at_level`)."""
        if num_gpus > self.total:
            return None
        if types is not None and not self.layout.one_type:
            return on_types(
                Locality.CLUSTER, self.by_node, self.layout, num_gpus, types, strict=True
            )
        return most_consolidated(self.by_node, self.by_rack, self.layout, num_gpus)

    def first_fit(self, num_gpus: int) -> Placement | None:
        if num_gpus > self.total:
            return None
        return first_fit(self.by_node, num_gpus)
