"""Preemption for locality on a cluster of several GPU types: a waiting job clears a node of a
type faster for it than what it would get otherwise.

On a busy mixed cluster a job that needs a whole node (8 GPUs on nodes of 8 V100s) rarely finds
one: the smaller jobs take each GPU as it frees, so the fast type is left fragmented (2 GPUs free
on one node, 6 on another) while the job waits for hours, held back from the spread placement
by its delay timer, or starts on a slower type. On one type the preemption for locality clears
such a node; here it is done per type: only nodes of one type that hold the job are cleared, and
their tenants move only to other nodes of the same type (so a tenant keeps its speed and its
locality), or are preempted when the job outranks them, as on one type.

The gain is what the job saves over its expected run time by running consolidated on the
cleared type instead of on the best placement it could have otherwise: the cheapest free one
(consolidated on a slower type, or spread), or, when none is free, spread on that type (as on
one type: its network slowdown there). Costs as in :mod:`~unstall.sched.dally.types`, so
``gain = GPUs x expected run time x (other cost / cost on the type - 1)``; the node is cleared
when the gain beats the victims' cost by ``gain_margin``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from unstall.sched.base import ClusterLayout, ClusterSnapshot, JobView
from unstall.sched.dally.preempt import Preemptions
from unstall.sched.dally.preemption import RoomPlan, Tenants
from unstall.sched.dally.state import Round
from unstall.sched.dally.types import Option, best_speed, cost_of
from unstall.sched.free import FreeGpus
from unstall.sched.placement import types_by_speed


class TypeRoom(Preemptions):
    """Dally's preemption for locality on several GPU types (see the module docstring)."""

    def _preempt_for_type(
        self,
        job: JobView,
        snapshot: ClusterSnapshot,
        free: FreeGpus,
        plan: Round,
        options: Sequence[Option | None],
    ) -> Option | None:
        """Clear a node of a type faster for ``job`` (fastest first; a type short of free GPUs
        too: the node cleared makes them) when that pays against the best of ``options``
        (those free now; None where none): the job's :class:`Option` there, with the victims'
        moves added to ``plan``; None when no node is worth clearing (a failed attempt is
        retried later)."""
        now = snapshot.now
        layout = free.layout
        free_now = min((o.cost for o in options if o is not None), default=float("inf"))
        if free_now <= 1.0 or not self._may_try_preemption(job, free, now):
            return None  # (1: consolidated on its fastest type, nothing is better)
        top = best_speed(job, layout)
        sensitivity = job.sensitivity.at(False, snapshot.congestion)
        largest = largest_node_of_type(layout)
        # Types whose nodes hold the job, each with what it costs there and what the job would
        # take otherwise: the cheapest placement free now, else spread on that type.
        targets: list[tuple[str, float, float]] = []
        for kind in types_by_speed(job, layout):
            speed = job.speed_on(kind)
            if speed <= 0.0 or largest.get(kind, 0) < job.num_gpus:
                continue
            here = top / speed
            other = min(free_now, here * sensitivity)
            if other > here:
                targets.append((kind, here, other))
        if not targets:
            return None
        attempt = self._locality_attempt(job, sensitivity, snapshot, plan)
        if attempt is None:
            return None
        tenants, may_move, may_preempt = attempt
        expected = self.state.expected.of(job, now)
        for kind, here, other in targets:
            gain = job.num_gpus * expected * (other / here - 1.0)
            on_type = _tenants_on(tenants, layout.node_type, layout.node_gpus, kind, job.num_gpus)
            # Tenants move only within the type, so each keeps its speed.
            room = self._room_that_pays(
                job, free.of_type(kind), on_type, may_move, may_preempt, gain
            )
            if room is not None:
                return self._take_room(job, room, snapshot, free, plan)
        self._retry_after_failure(job, now)
        return None

    def _take_room(
        self, job: JobView, room: RoomPlan, snapshot: ClusterSnapshot, free: FreeGpus, plan: Round
    ) -> Option:
        """Carry out ``room`` and give ``job``'s :class:`Option` on the node it clears."""
        self._clear_room(job, room, free, plan)
        return cost_of(job, ((room.node, job.num_gpus),), free.layout, snapshot.congestion)


@functools.cache
def largest_node_of_type(layout: ClusterLayout) -> dict[str, int]:
    """The GPUs of each type's largest node (kept per cluster: asked of every job placed)."""
    largest: dict[str, int] = {}
    for kind, gpus in zip(layout.node_type, layout.node_gpus, strict=True):
        largest[kind] = max(largest.get(kind, 0), gpus)
    return largest


def _tenants_on(
    tenants: Tenants, node_type: Sequence[str], node_gpus: Sequence[int], kind: str, need: int
) -> Tenants:
    """``tenants`` on the nodes of ``kind`` that hold ``need`` GPUs (with their GPU counts)."""
    found = Tenants(
        (node, jobs)
        for node, jobs in tenants.items()
        if node_type[node] == kind and node_gpus[node] >= need
    )
    found.gpus = {node: tenants.gpus[node] for node in found}
    return found
