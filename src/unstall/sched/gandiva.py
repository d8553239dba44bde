"""Gandiva-style packing (Xiao et al., OSDI'18): consolidation first, migration to defragment.

Jobs start in arrival order on the most consolidated GPUs free. When a job that fits one node
finds every node too fragmented, small single-node jobs are migrated off the emptiest-to-fill node
to make room. Jobs left spread are migrated back onto one node or rack when such room appears.
Gandiva's time-slicing of GPUs between jobs is not modelled (a GPU runs one job at a time here).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from unstall.sched import placement as pl
from unstall.sched.base import (
    ClusterSnapshot,
    Decision,
    JobView,
    Migrate,
    Placement,
    PolicyBase,
    Start,
)
from unstall.sched.free import FreeGpus


@dataclass
class Gandiva(PolicyBase):
    """Consolidation first, migration of small jobs to defragment a node, re-consolidation of
    spread jobs when room appears (see the module docstring)."""

    name: str = "gandiva"
    needs_oracle: bool = False
    max_migrations_per_round: int = 4

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        free = FreeGpus(snapshot)
        starts: list[Start] = []
        migrations: list[Migrate] = []
        moved: set[str] = set()
        for job in snapshot.queued:
            if free.total < job.num_gpus:
                break
            placement = free.consolidated(job.num_gpus)
            if placement is None and job.num_gpus <= snapshot.layout.gpus_per_node:
                placement = self._defragment(snapshot, free, job, migrations, moved)
            if placement is None:
                placement = free.best(job.num_gpus)
            if placement is None:
                break
            free.take(placement)
            starts.append(Start(job.job_id, placement))
        self._reconsolidate(snapshot, free, migrations, moved)
        return Decision(starts=tuple(starts), migrations=tuple(migrations))

    def _defragment(
        self,
        snapshot: ClusterSnapshot,
        free: FreeGpus,
        job: JobView,
        migrations: list[Migrate],
        moved: set[str],
    ) -> Placement | None:
        """Empty enough of the fullest-free node by moving its single-node jobs elsewhere."""
        budget = self.max_migrations_per_round - len(migrations)
        if budget <= 0:
            return None
        target = max(range(len(free.by_node)), key=lambda n: (free.by_node[n], -n))
        tenants = sorted(
            (
                r
                for r in snapshot.running
                if len(r.placement) == 1 and r.placement[0][0] == target and r.job_id not in moved
            ),
            key=lambda r: r.num_gpus,
        )
        planned: list[tuple[JobView, Placement]] = []
        target_free = free.by_node[target]
        room = target_free
        for tenant in tenants:
            if room >= job.num_gpus or len(planned) >= budget:
                break
            free.by_node[target] = 0  # the target is not a destination for its own tenants
            dest = pl.on_one_node(free.by_node, tenant.num_gpus)
            free.by_node[target] = target_free
            if dest is None:
                continue
            free.take(dest)
            planned.append((tenant, dest))
            room += tenant.num_gpus
        if room < job.num_gpus:
            for _, dest in planned:
                free.give(dest)
            return None
        for tenant, dest in planned:
            free.give(tenant.placement)
            migrations.append(Migrate(tenant.job_id, dest, "defragment for a consolidated job"))
            moved.add(tenant.job_id)
        return ((target, job.num_gpus),)

    def _reconsolidate(
        self,
        snapshot: ClusterSnapshot,
        free: FreeGpus,
        migrations: list[Migrate],
        moved: set[str],
    ) -> None:
        """Move spread jobs onto fewer nodes when the free GPUs now allow it."""
        layout = snapshot.layout
        # Only multi-node jobs can be over their minimum node count: no scan of every job.
        for job in snapshot.spread_running:
            if len(migrations) >= self.max_migrations_per_round or free.total == 0:
                return
            if len(job.placement) <= layout.min_nodes(job.num_gpus) or job.job_id in moved:
                continue
            free.give(job.placement)
            better = free.consolidated(job.num_gpus)
            if better is None:
                free.take(job.placement)
                continue
            free.take(better)
            migrations.append(Migrate(job.job_id, better, "re-consolidate a spread job"))
            moved.add(job.job_id)
