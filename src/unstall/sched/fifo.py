"""FIFO, first-fit and strict consolidation: queue order by arrival (higher priority first, where
jobs have priorities), three placement rules."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from unstall.sched.base import (
    ClusterSnapshot,
    Decision,
    JobView,
    Placement,
    PolicyBase,
    Start,
)
from unstall.sched.free import FreeGpus
from unstall.sched.placement import TypeClaims
from unstall.sched.reasons import in_order_reasons, too_few


def by_priority(queued: Sequence[JobView]) -> Sequence[JobView]:
    """The queue with higher priorities first, in arrival order within each (stable); the
    queue itself where no job has a priority (a trace's jobs never do)."""
    if not any(job.priority for job in queued):
        return queued
    return sorted(queued, key=lambda job: -job.priority)


@dataclass
class _ArrivalOrder(PolicyBase):
    """Jobs in arrival order, each placed by :meth:`place`. With head-of-line blocking the first
    job that finds no room stops the round; without it later jobs may still start (backfill)."""

    name: str = ""
    needs_oracle: bool = False
    head_of_line_blocking: bool = True

    def place(
        self, free: FreeGpus, num_gpus: int, types: Sequence[str] | None = None
    ) -> Placement | None:
        """Where a job of ``num_gpus`` GPUs starts now, on the first of ``types`` with room (a
        cluster of several GPU types; None: any)."""
        raise NotImplementedError

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        free = FreeGpus(snapshot)
        starts: list[Start] = []
        # Free GPUs only shrink during a round, so a size that found no room stays without.
        blocked: set[int] = set()
        # Several GPU types: the fast GPUs go to the jobs that gain most from them.
        claims = (
            None if free.layout.one_type else TypeClaims(snapshot.queued, free.by_node, free.layout)
        )
        for job in by_priority(snapshot.queued):
            if free.total == 0:
                break
            if job.num_gpus in blocked:
                continue
            types = None if claims is None else claims.types_for(job, free.by_node)
            placement = self.place(free, job.num_gpus, types)
            if claims is not None:
                claims.done(job)
            if placement is None:
                if self.head_of_line_blocking:
                    break  # the head waits and so does everyone behind it
                blocked.add(job.num_gpus)
                continue
            free.take(placement)
            starts.append(Start(job.job_id, placement))
        return Decision(starts=tuple(starts))

    def wait_reasons(self, snapshot: ClusterSnapshot) -> dict[str, str]:
        """Each waiting job's reason (:mod:`unstall.sched.reasons`): no room for it by this
        policy's placement rule, or (head-of-line blocking) behind the first job without."""
        prioritised = any(job.priority for job in snapshot.queued)
        return in_order_reasons(
            by_priority(snapshot.queued),
            snapshot,
            order="arrival order, higher priority first" if prioritised else "arrival order",
            blocking=self.head_of_line_blocking,
            room=self.room,
        )

    def room(self, job: JobView, snapshot: ClusterSnapshot) -> str | None:
        """Why ``job`` finds no room now by :meth:`place` (None: it would)."""
        free = FreeGpus(snapshot)
        if self.place(free, job.num_gpus) is not None:
            return None
        short = too_few(job.num_gpus, free.total)
        if short is not None:
            return short
        return f"waiting for room: {job.num_gpus} GPUs free but not as {self.name} places them"


@dataclass
class Fifo(_ArrivalOrder):
    """Arrival order with head-of-line blocking; each job at the best locality free right now."""

    name: str = "fifo"

    def place(
        self, free: FreeGpus, num_gpus: int, types: Sequence[str] | None = None
    ) -> Placement | None:
        return free.best(num_gpus, types)


@dataclass
class FirstFit(_ArrivalOrder):
    """Arrival order with head-of-line blocking; any free GPUs, nodes in index order."""

    name: str = "first-fit"

    def place(
        self, free: FreeGpus, num_gpus: int, types: Sequence[str] | None = None
    ) -> Placement | None:
        return free.first_fit(num_gpus)  # blind to locality and to GPU types


@dataclass
class Consolidate(_ArrivalOrder):
    """A job starts only on its most consolidated placement; jobs that cannot get one wait while
    later jobs that can are started (without that backfill one big job would block the cluster)."""

    name: str = "consolidate"
    head_of_line_blocking: bool = False

    def place(
        self, free: FreeGpus, num_gpus: int, types: Sequence[str] | None = None
    ) -> Placement | None:
        return free.consolidated(num_gpus, types)

    def room(self, job: JobView, snapshot: ClusterSnapshot) -> str | None:
        free = FreeGpus(snapshot)
        if self.place(free, job.num_gpus) is not None:
            return None
        most = max(free.by_node, default=0)
        return (
            f"waiting for a consolidated placement of {job.num_gpus} GPUs ({free.total} free, "
            f"at most {most} on one node)"
        )
