"""Dally's queue order: fifo (arrival), las (least attained service, by levels) or gittins
(least expected GPU-time still to hold, from learnt run times, aged by the wait), and which
running jobs a waiting one outranks (what preemption for priority or service may take)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from unstall.sched.base import JobView
from unstall.sched.dally.core import DallyBase
from unstall.sched.dally.queue_index import Group, group_of
from unstall.sched.dally.state import las_level


class QueueOrder(DallyBase):
    """The order of :class:`DallyBase`'s settings over its kept queue."""

    def _priority(self, job: JobView, now: float) -> tuple[float, float, int]:
        if self.config.order == "gittins":
            return (self._expected_gpu_s(job, now), job.submit_s, job.index)
        return (self._level(job, now), job.submit_s, job.index)

    def _level(self, job: JobView, now: float) -> int:
        """:meth:`_priority`'s rank in the fifo and las orders: 0 in fifo (no job ranks above
        another), the attained-service level in las."""
        if self.config.order == "fifo":
            return 0
        return las_level(self.config.las_thresholds_gpu_s, job.attained_gpu_s(now))

    def _outranked_by(self, job: JobView, now: float) -> Callable[[JobView], bool]:
        """Which running jobs ``job`` outranks: :meth:`_outranks` with the job's side worked
        out once (every running job may be asked about). In las with its thresholds
        ascending, as they are meant to be, a job of level L outranks the jobs whose service
        has reached the L-th threshold (where the level's bisect passes L): one comparison a
        victim. Otherwise their levels are compared (fifo: all 0, none outranks another)."""
        c = self.config
        if c.order == "gittins":
            bar = c.preempt_ratio * self._expected_gpu_s(job, now)
            return lambda victim: self._expected_gpu_s(victim, now) > bar
        level = self._level(job, now)
        thresholds = c.las_thresholds_gpu_s
        if c.order == "las" and all(lo < hi for lo, hi in itertools.pairwise(thresholds)):
            if level >= len(thresholds):
                return lambda victim: False  # no level above the top one
            bar = thresholds[level]
            return lambda victim: victim.attained_gpu_s(now) >= bar
        return lambda victim: self._level(victim, now) > level

    def _outranks(self, job: JobView, victim: JobView, now: float) -> bool:
        """May ``job`` preempt ``victim`` for priority? (LAS: a lower level; gittins: expected
        to hold its GPUs ``preempt_ratio`` times less long; fifo: never.)"""
        if self.config.order == "gittins":
            return self._expected_gpu_s(victim, now) > self.config.preempt_ratio * (
                self._expected_gpu_s(job, now)
            )
        return self._level(victim, now) > self._level(job, now)

    def _in_priority_order(self, jobs: list[JobView], now: float) -> list[JobView]:
        """``jobs`` (waiting ones) sorted by :meth:`_priority`, by way of their groups (see
        :meth:`_groups_in_order`)."""
        if self.config.order != "gittins":
            return sorted(jobs, key=lambda j: self._priority(j, now))
        groups: dict[Group, list[JobView]] = {}
        for j in sorted(jobs, key=lambda j: (j.submit_s, j.index)):
            groups.setdefault(group_of(j), []).append(j)
        return [j for members, _ in self._groups_in_order(groups, now) for j in members]

    def _queue_in_order(self, now: float) -> list[tuple[list[JobView], bool]]:
        """The kept queue in :meth:`_priority` order as lists of jobs, each with whether its
        jobs are all of one size."""
        queue = self.state.queue
        if self.config.order != "gittins":
            # Each level's jobs in arrival order, kept by the index (see ``queue_rank``).
            levels = queue.ranks
            return [(levels[level], False) for level in sorted(levels)]
        return self._groups_in_order(queue.groups, now, kept=True)

    def _groups_in_order(
        self, groups: dict[Group, list[JobView]], now: float, *, kept: bool = False
    ) -> list[tuple[list[JobView], bool]]:
        """Groups of waiting jobs (one size and service each, members in arrival order) in the
        gittins order, each with whether its jobs are all of one size. A group's jobs share
        their expected GPU-time, so it is worked out once a group and the groups are sorted,
        not the jobs; groups that tie are merged in arrival order. With ``age_weight`` a group
        ranks by its expected GPU-time over ``1 + age_weight x wait / expected run time`` of its
        oldest waiting job (``kept``: ``groups`` is the kept queue's, whose lists hold started
        jobs too)."""
        by_rank: dict[float, list[Group]] = {}
        expected_of = self.state.expected.of_group
        age_weight = self.config.age_weight
        for key, members in groups.items():
            expected = expected_of(key, members[0], now)
            rank = key[0] * expected  # _expected_gpu_s
            if age_weight and expected > 0:
                oldest = self.state.queue.oldest_waiting(key, members) if kept else members[0]
                rank /= 1.0 + age_weight * oldest.waiting_s(now) / expected
            by_rank.setdefault(rank, []).append(key)
        ordered: list[tuple[list[JobView], bool]] = []
        for rank in sorted(by_rank):
            keys = by_rank[rank]
            if len(keys) == 1:
                ordered.append((groups[keys[0]], True))
                continue
            merged = [j for k in keys for j in groups[k]]
            merged.sort(key=lambda j: (j.submit_s, j.index))
            ordered.append((merged, len({k[0] for k in keys}) == 1))
        return ordered
