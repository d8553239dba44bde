"""FIFO, first-fit and strict consolidation: queue order by arrival, three placement rules."""

from __future__ import annotations

import random
from dataclasses import dataclass

from unstall.sched.base import ClusterSnapshot, Decision, Placement, PolicyBase, Start
from unstall.sched.free import FreeGpus


@dataclass
class _ArrivalOrder(PolicyBase):
    """Jobs in arrival order, each placed by :meth:`place`. With head-of-line blocking the first
    job that finds no room stops the round; without it later jobs may still start (backfill)."""

    name: str = ""
    needs_oracle: bool = False
    head_of_line_blocking: bool = True

    def place(self, free: FreeGpus, num_gpus: int) -> Placement | None:
        raise NotImplementedError

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        free = FreeGpus(snapshot)
        starts: list[Start] = []
        # Free GPUs only shrink during a round, so a size that found no room stays without.
        blocked: set[int] = set()
        for job in snapshot.queued:
            if free.total == 0:
                break
            if job.num_gpus in blocked:
                continue
            placement = self.place(free, job.num_gpus)
            if placement is None:
                if self.head_of_line_blocking:
                    break  # the head waits and so does everyone behind it
                blocked.add(job.num_gpus)
                continue
            free.take(placement)
            starts.append(Start(job.job_id, placement))
        return Decision(starts=tuple(starts))


@dataclass
class Fifo(_ArrivalOrder):
    """Arrival order with head-of-line blocking; each job at the best locality free right now."""

    name: str = "fifo"

    def place(self, free: FreeGpus, num_gpus: int) -> Placement | None:
        return free.best(num_gpus)


@dataclass
class FirstFit(_ArrivalOrder):
    """Arrival order with head-of-line blocking; any free GPUs, nodes in index order."""

    name: str = "first-fit"

    def place(self, free: FreeGpus, num_gpus: int) -> Placement | None:
        return free.first_fit(num_gpus)


@dataclass
class Consolidate(_ArrivalOrder):
    """A job starts only on its most consolidated placement; jobs that cannot get one wait while
    later jobs that can are started (without that backfill one big job would block the cluster)."""

    name: str = "consolidate"
    head_of_line_blocking: bool = False

    def place(self, free: FreeGpus, num_gpus: int) -> Placement | None:
        return free.consolidated(num_gpus)
