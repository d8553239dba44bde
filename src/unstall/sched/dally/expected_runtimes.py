"""Dally's expected remaining run times, memoised: the run history's estimate of how long a job
still runs given the service it has had (from the run times of finished jobs of its size class,
never its own duration).

They are asked for many times a round (the queue order, every preemption attempt's victims) and
are the same for every job of one size and service attained (most queued jobs have none), so
they are kept by those until the history learns a run time of the size's class.
"""

from __future__ import annotations

from collections.abc import Sequence

from unstall.sched.base import JobView
from unstall.sched.dally.history import RunHistory
from unstall.sched.dally.queue_index import Group

# A size's memo is cleared beyond this many entries: running jobs' service is new every round.
MAX_PER_SIZE = 100_000


class ExpectedRemaining:
    """``of(job, now)``: the seconds ``job`` is expected to run still, by ``history``; memoised
    by (GPU count, service attained) per GPU count."""

    def __init__(self, history: RunHistory) -> None:
        self._history = history
        self._memo: dict[int, dict[tuple[int, float], float]] = {}

    def of(self, job: JobView, now: float) -> float:
        """The seconds ``job`` is expected to run still at ``now``."""
        key = (job.num_gpus, job.attained_gpu_s(now))
        memo = self._memo.get(key[0])
        if memo is None:
            memo = self._memo[key[0]] = {}
        expected = memo.get(key)
        if expected is None:
            if len(memo) > MAX_PER_SIZE:
                memo.clear()
            expected = memo[key] = self._history.expected_remaining_s(key[1] / key[0], key[0])
        return expected

    def of_group(self, key: Group, first: JobView, now: float) -> float:
        """:meth:`of` for the waiting jobs of group ``key`` (``first`` one of them): keyed like
        the groups, so one look-up a group when it is known."""
        of_size = self._memo.get(key[0])
        expected = None if of_size is None else of_size.get(key)
        if expected is None:
            expected = self.of(first, now)
        return expected

    def forget_learnt(self, finished: Sequence[JobView]) -> None:
        """Forget the figures the history is about to change: those of the size classes of the
        ``finished`` jobs, whose run times it learns next, and those of classes with no run
        time yet (they are expected by every class's)."""
        if not finished:
            return
        history = self._history
        learnt = {history.size_class(v.num_gpus) for v in finished}
        for gpus in list(self._memo):
            size_class = history.size_class(gpus)
            if size_class in learnt or not history.has_runtimes(size_class):
                del self._memo[gpus]
