"""Dally's index of the waiting jobs: the queue as the policy knows it, kept in step with each
round's snapshot, and its jobs grouped by size and service (the groups the gittins order ranks).

A round must not cost the length of the queue: the snapshot's queue is in arrival order, so the
jobs new to it are found from its newest end, and a job that starts leaves its group's list
lazily (the list is compacted once more than half of it has started).
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterator, Mapping

from unstall.sched.base import JobView

Group = tuple[int, float]  # (GPU count, service attained): the jobs of one rank in gittins


def group_of(job: JobView) -> Group:
    """A waiting job's group in the gittins order: its size and the service it has had (fixed
    while it waits)."""
    return (job.num_gpus, job.attained_gpu_s_at_change)


def _arrival(job: JobView) -> tuple[float, int]:
    return (job.submit_s, job.index)


class QueueIndex:
    """The waiting jobs by id, and by :func:`group_of`, each group's list in arrival order. A
    group's list keeps jobs that have started until it is compacted (see :attr:`by_id`)."""

    def __init__(self) -> None:
        self._jobs: dict[str, JobView] = {}
        self._groups: dict[Group, list[JobView]] = {}
        self._started_in_group: dict[Group, int] = {}
        self._head_of_group: dict[Group, int] = {}  # index of its oldest waiting job

    @property
    def by_id(self) -> Mapping[str, JobView]:
        """The waiting jobs by id, as last seen (a job of a group's list still waits when
        ``by_id.get(job.job_id) is job``); the mapping is replaced when :meth:`sync` starts
        over, so it is read afresh each round."""
        return self._jobs

    @property
    def groups(self) -> dict[Group, list[JobView]]:
        """Each group's list (arrival order, started jobs not yet compacted away)."""
        return self._groups

    def sync(self, queued: Collection[JobView]) -> list[JobView]:
        """Bring the index in step with ``queued`` (the snapshot's queue, arrival order) and
        return the jobs that joined it since the last round, in arrival order. Anything other
        than new jobs at its newest end (jobs gone or changed that the policy did not start)
        makes it start over from ``queued``."""
        known = self._jobs
        fresh: list[JobView] = []
        newest_first: Iterator[JobView] | None
        try:
            newest_first = reversed(queued)  # type: ignore[call-overload]
        except TypeError:
            newest_first = None
        if newest_first is not None:
            for view in newest_first:
                if known.get(view.job_id) is view:
                    break
                fresh.append(view)
            fresh.reverse()
            if len(known) + len(fresh) == len(queued) and not any(v.job_id in known for v in fresh):
                for view in fresh:
                    self._join(view)
                return fresh
        fresh = [v for v in queued if known.get(v.job_id) is not v]
        self._jobs, self._groups, self._started_in_group = {}, {}, {}
        self._head_of_group = {}
        for view in queued:
            self._join(view)
        return fresh

    def _join(self, job: JobView) -> None:
        self._jobs[job.job_id] = job
        key = group_of(job)
        members = self._groups.setdefault(key, [])
        if members and _arrival(members[-1]) > _arrival(job):
            bisect.insort(members, job, key=_arrival)
            self._head_of_group.pop(key, None)  # it may now come first
        else:
            members.append(job)

    def leave(self, job: JobView) -> None:
        """``job`` starts: out of the index; its group's list is compacted once more than half
        of it has started."""
        if self._jobs.pop(job.job_id, None) is None:
            return
        key = group_of(job)
        started = self._started_in_group.get(key, 0) + 1
        members = self._groups.get(key, [])
        if 2 * started > len(members):
            # A new list: a pass may be going through the old one.
            alive = [m for m in members if self._jobs.get(m.job_id) is m]
            if alive:
                self._groups[key] = alive
            else:
                self._groups.pop(key, None)
            self._started_in_group.pop(key, None)
            self._head_of_group.pop(key, None)
        else:
            self._started_in_group[key] = started

    def oldest_waiting(self, key: Group, members: list[JobView]) -> JobView:
        """The first job of group ``key``'s list ``members`` that still waits (an index a
        group, moved on as its jobs start, keeps this cheap)."""
        jobs = self._jobs
        i = self._head_of_group.get(key, 0)
        while jobs.get(members[i].job_id) is not members[i]:
            i += 1
        self._head_of_group[key] = i
        return members[i]
