"""Dally's index of the waiting jobs: the queue as the policy knows it, kept in step with each
round's snapshot, and its jobs grouped by size and service (the groups the gittins order ranks)
and, for the other orders, by rank (their levels: each rank's jobs go in arrival order).

A round must not cost the length of the queue: the snapshot's queue is in arrival order, so the
jobs new to it are found from its newest end, and a job that starts leaves its group's and its
rank's lists lazily (a list is compacted once more than half of it has started).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Collection, Hashable, Iterator, Mapping
from typing import Generic, TypeVar

from unstall.sched.base import JobView

Group = tuple[int, float]  # (GPU count, service attained): the jobs of one rank in gittins
Key = TypeVar("Key", bound=Hashable)


def group_of(job: JobView) -> Group:
    """A waiting job's group in the gittins order: its size and the service it has had (fixed
    while it waits)."""
    return (job.num_gpus, job.attained_gpu_s_at_change)


def _arrival(job: JobView) -> tuple[float, int]:
    return (job.submit_s, job.index)


class _Lists(Generic[Key]):
    """Waiting jobs split by a key, each key's list in arrival order; a started job stays in its
    list until more than half of the list has started (then a new list replaces it)."""

    def __init__(self) -> None:
        self.lists: dict[Key, list[JobView]] = {}
        self._started: dict[Key, int] = {}

    def join(self, key: Key, job: JobView) -> bool:
        """Add ``job`` under ``key``; whether it went before the list's end (its first job may
        have changed)."""
        members = self.lists.setdefault(key, [])
        if members and _arrival(members[-1]) > _arrival(job):
            bisect.insort(members, job, key=_arrival)
            return True
        members.append(job)
        return False

    def leave(self, key: Key, waiting: Mapping[str, JobView]) -> bool:
        """A job of ``key``'s list started (``waiting``: the jobs that still wait); whether the
        list was compacted."""
        started = self._started.get(key, 0) + 1
        members = self.lists.get(key, [])
        if 2 * started <= len(members):
            self._started[key] = started
            return False
        # A new list: a pass may be going through the old one.
        alive = [m for m in members if waiting.get(m.job_id) is m]
        if alive:
            self.lists[key] = alive
        else:
            self.lists.pop(key, None)
        self._started.pop(key, None)
        return True


class QueueIndex:
    """The waiting jobs by id, by :func:`group_of` and, when given ``rank`` (a waiting job's
    rank, fixed while it waits), by rank; each list in arrival order. A list keeps jobs that
    have started until it is compacted (see :attr:`by_id`)."""

    def __init__(self, rank: Callable[[JobView], int] | None = None) -> None:
        self._rank = rank
        self._jobs: dict[str, JobView] = {}
        self._groups: _Lists[Group] = _Lists()
        self._ranks: _Lists[int] = _Lists()
        self._head_of_group: dict[Group, int] = {}  # index of its oldest waiting job

    @property
    def by_id(self) -> Mapping[str, JobView]:
        """The waiting jobs by id, as last seen (a job of a group's or a rank's list still
        waits when ``by_id.get(job.job_id) is job``); the mapping is replaced when :meth:`sync`
        starts over, so it is read afresh each round."""
        return self._jobs

    @property
    def groups(self) -> dict[Group, list[JobView]]:
        """Each group's list (arrival order, started jobs not yet compacted away)."""
        return self._groups.lists

    @property
    def ranks(self) -> dict[int, list[JobView]]:
        """Each rank's list (arrival order, started jobs not yet compacted away); empty without
        ``rank``."""
        return self._ranks.lists

    def rank_by(self, rank: Callable[[JobView], int] | None) -> None:
        """Keep the jobs by ``rank`` from now on (None: not at all): the lists are made anew."""
        self._rank = rank
        self._ranks = _Lists()
        if rank is not None:
            for job in self._jobs.values():
                self._ranks.join(rank(job), job)

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
        self._jobs, self._groups, self._ranks = {}, _Lists(), _Lists()
        self._head_of_group = {}
        for view in queued:
            self._join(view)
        return fresh

    def _join(self, job: JobView) -> None:
        self._jobs[job.job_id] = job
        key = group_of(job)
        if self._groups.join(key, job):
            self._head_of_group.pop(key, None)  # it may now come first
        if self._rank is not None:
            self._ranks.join(self._rank(job), job)

    def leave(self, job: JobView) -> None:
        """``job`` starts: out of the index; its group's and rank's lists are compacted once
        more than half of them has started."""
        if self._jobs.pop(job.job_id, None) is None:
            return
        key = group_of(job)
        if self._groups.leave(key, self._jobs):
            self._head_of_group.pop(key, None)
        if self._rank is not None:
            self._ranks.leave(self._rank(job), self._jobs)

    def oldest_waiting(self, key: Group, members: list[JobView]) -> JobView:
        """The first job of group ``key``'s list ``members`` that still waits (an index a
        group, moved on as its jobs start, keeps this cheap)."""
        jobs = self._jobs
        i = self._head_of_group.get(key, 0)
        while jobs.get(members[i].job_id) is not members[i]:
            i += 1
        self._head_of_group[key] = i
        return members[i]
