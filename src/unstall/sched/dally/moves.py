"""Dally's moves of running jobs for their own speed: re-consolidation on a cluster of one GPU
type (a spread job moves to a consolidated block when the time it saves beats its restore) and
type upgrades on a cluster of several (a job moves to a faster type or a consolidated block)."""

from __future__ import annotations

import functools

from unstall.sched.base import ClusterSnapshot, JobView, Migrate
from unstall.sched.dally.core import DallyBase
from unstall.sched.dally.preemption import reconsolidation
from unstall.sched.dally.sensitivity import is_consolidated, placement_slowdown
from unstall.sched.dally.state import Round
from unstall.sched.dally.types import upgrade_target
from unstall.sched.free import FreeGpus


class Moves(DallyBase):
    """The re-consolidation and type-upgrade steps of Dally (see the module docstring)."""

    def _reconsolidate(self, snapshot: ClusterSnapshot, free: FreeGpus, plan: Round) -> None:
        """The ``reconsolidate`` step (one GPU type; ``_retype`` on several): each spread
        running job moves to a consolidated block when the time it saves beats its restore by
        ``gain_margin`` (:func:`reconsolidation`), at most ``max_migrations_per_round``."""
        if not snapshot.spread_running or not snapshot.layout.one_type:
            return
        c = self.config
        own_cap = self._own_moves_cap()
        now = snapshot.now
        for job in snapshot.spread_running:
            if len(plan.migrations) >= c.max_migrations_per_round or free.total == 0:
                return
            if job.job_id in plan.taken or len(job.placement) <= 1:
                continue
            # A running job's placement only changes with its state (``changed_s``): most spread
            # jobs are consolidated over a rack already, so remember that instead of re-checking.
            record = self.state.record(job.job_id)
            if record.consolidated_since == job.changed_s:
                continue
            if is_consolidated(job.placement, job.num_gpus, snapshot.layout):
                record.consolidated_since = job.changed_s
                continue
            # Moving a job to a consolidated block is for its own good: its history raises the
            # bar (the restore it pays again) and its cap is one move past the cap for others,
            # or a job spread badly after being moved for others could stay spread for good.
            if record.no_block == self.state.version:
                continue  # no block was free for it, and no GPU has been freed since
            times_moved = record.moves
            if times_moved > own_cap:
                continue
            target = reconsolidation(
                job,
                free,
                functools.partial(self.state.expected.of, job, now),
                c.restore_s * (1 + times_moved),
                c.gain_margin,
                snapshot.congestion,
                snapshot.spread_jobs_by_node,
                on_no_block=functools.partial(setattr, record, "no_block", self.state.version),
                slowdown=self._slowdown_where_running(job, snapshot),
            )
            if target is not None:
                free.take(target)
                plan.taken.add(job.job_id)
                record.moves = times_moved + 1
                plan.migrations.append(Migrate(job.job_id, target, "re-consolidate"))

    def _slowdown_where_running(self, job: JobView, snapshot: ClusterSnapshot) -> float:
        """What :func:`reconsolidation` works out first: the running, spread ``job``'s
        slowdown where it runs (its own NIC use among the counts). Asked of every spread job in
        every round, it is kept while what it depends on stays the same: the job's view (its
        placement), the cluster, the congestion and the spread jobs by node."""
        layout, congestion = snapshot.layout, snapshot.congestion
        spread = snapshot.spread_jobs_by_node
        record = self.state.record(job.job_id)
        known = record.slowdown_where
        if (
            known is not None
            and known[0] is job
            and known[1] is layout
            and known[2] == congestion
            and known[3] == spread
        ):
            return known[4]
        slowdown = placement_slowdown(
            job, job.placement, layout, congestion, spread, own_share=True
        )
        # A copy of the counts (a tuple's is itself): the snapshot's may be a list reused.
        record.slowdown_where = (job, layout, congestion, tuple(spread), slowdown)
        return slowdown

    def _retype(self, snapshot: ClusterSnapshot, free: FreeGpus, plan: Round) -> None:
        """Type upgrades and re-consolidation on a cluster of several GPU types: a running job
        moves to the cheapest consolidated placement free (a faster type, or its own type
        consolidated) when the time it saves beats its restore by ``gain_margin``: its
        expected remaining run time times ``1 - new cost / current cost`` (costs as in
        :mod:`~unstall.sched.dally.types`) against ``restore_s`` times one more than its moves
        so far. Those that save the most a GPU move first, at most ``max_migrations_per_round``."""
        c = self.config
        now = snapshot.now
        if free.total == 0 or snapshot.layout.one_type:
            return
        candidates: list[tuple[float, int, JobView]] = []
        own_cap = self._own_moves_cap()
        for job in snapshot.running:
            if job.job_id in plan.taken or self.state.moves(job.job_id) > own_cap:
                continue
            found = upgrade_target(job, free, snapshot.congestion, snapshot.spread_jobs_by_node)
            if found is None:
                continue
            current, target = found
            saved = self.state.expected.of(job, now) * (1.0 - target.cost / current.cost)
            if saved > c.gain_margin * c.restore_s * (1 + self.state.moves(job.job_id)):
                candidates.append((-saved / job.num_gpus, job.index, job))
        candidates.sort(key=lambda item: item[:2])
        for _, _, job in candidates:
            if len(plan.migrations) >= c.max_migrations_per_round:
                return
            found = upgrade_target(job, free, snapshot.congestion, snapshot.spread_jobs_by_node)
            if found is None:
                continue  # an earlier move took its block
            current, target = found
            free.give(job.placement)
            free.take(target.placement)
            plan.taken.add(job.job_id)
            self.state.count_move(job.job_id)
            why = "re-consolidate" if target.kind == current.kind else f"faster type {target.kind}"
            plan.migrations.append(Migrate(job.job_id, target.placement, why))

    def _own_moves_cap(self) -> float:
        """The most moves a job may have had and still be moved for its own speed:
        ``max_moves_per_job`` with ``cap_all_moves`` (so it ends at one more at most), else no
        cap."""
        c = self.config
        return c.max_moves_per_job if c.cap_all_moves else float("inf")
