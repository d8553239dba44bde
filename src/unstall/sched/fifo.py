"""FIFO, first-fit and strict consolidation: queue order by arrival, three placement rules."""

from __future__ import annotations

import random
from dataclasses import dataclass

from unstall.sched.base import ClusterSnapshot, Decision, Start
from unstall.sched.free import FreeGpus


@dataclass
class Fifo:
    """Arrival order with head-of-line blocking; each job at the best locality free right now."""

    name: str = "fifo"
    needs_oracle: bool = False

    def reset(self) -> None:
        pass

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        free = FreeGpus(snapshot)
        starts: list[Start] = []
        for job in snapshot.queued:
            if free.total == 0:
                break
            placement = free.best(job.num_gpus)
            if placement is None:
                break  # the head waits and so does everyone behind it
            free.take(placement)
            starts.append(Start(job.job_id, placement))
        return Decision(starts=tuple(starts))


@dataclass
class FirstFit:
    """Arrival order with head-of-line blocking; any free GPUs, nodes in index order."""

    name: str = "first-fit"
    needs_oracle: bool = False

    def reset(self) -> None:
        pass

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        free = FreeGpus(snapshot)
        starts: list[Start] = []
        for job in snapshot.queued:
            if free.total == 0:
                break
            placement = free.first_fit(job.num_gpus)
            if placement is None:
                break
            free.take(placement)
            starts.append(Start(job.job_id, placement))
        return Decision(starts=tuple(starts))


@dataclass
class Consolidate:
    """A job starts only on its most consolidated placement; jobs that cannot get one wait while
    later jobs that can are started (without that backfill one big job would block the cluster)."""

    name: str = "consolidate"
    needs_oracle: bool = False

    def reset(self) -> None:
        pass

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        free = FreeGpus(snapshot)
        starts: list[Start] = []
        # Free GPUs only shrink during a round, so a size that found no block stays blocked.
        blocked: set[int] = set()
        for job in snapshot.queued:
            if free.total == 0:
                break
            if job.num_gpus in blocked:
                continue
            placement = free.consolidated(job.num_gpus)
            if placement is None:
                blocked.add(job.num_gpus)
            else:
                free.take(placement)
                starts.append(Start(job.job_id, placement))
        return Decision(starts=tuple(starts))
