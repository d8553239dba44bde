"""What Dally has learnt of the run so far: the run times of the jobs that finished (by size
class) and how long started jobs waited in the queue. Never the future: a job's own duration is
not read, and the look-ahead (:mod:`unstall.sim.lookahead`) draws its run times from here too.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field


@dataclass
class RunHistory:
    """Learnt run times and waits; ``prior_runtime_s`` stands in before any job has finished."""

    prior_runtime_s: float
    # Moving average of how long started jobs waited in the queue: what a preempted job can
    # expect to wait before it runs again.
    mean_wait_s: float = 0.0
    # The same, over restarts of jobs that had been preempted.
    mean_requeue_wait_s: float = 0.0
    requeues_seen: int = 0
    # Sorted run times of finished jobs, by size class (GPU count rounded down to a power of 2):
    # big jobs run longer than small ones in every public trace. Finished jobs only, though
    # early in a trace those are the short ones (censoring): counting running jobs' service as
    # censored run times was measured worse (BENCHMARKS.md, "Dally's design choices").
    _runtimes: dict[int, list[float]] = field(default_factory=dict)
    # Memo of expected_remaining_s by size class (0 for all) and bisect index, and of all run
    # times sorted: asked for every spread job every round, they only change when a job of the
    # class finishes.
    _residual_memo: dict[int, dict[int, float]] = field(default_factory=dict)
    _all_sorted: list[float] | None = None

    @staticmethod
    def size_class(gpus: int) -> int:
        """The size class whose run times a job of ``gpus`` GPUs is expected by: the GPU count
        rounded down to a power of 2."""
        return 1 << (max(gpus, 1).bit_length() - 1)

    def has_runtimes(self, size_class: int) -> bool:
        """Whether a job of ``size_class`` has finished (else the class is expected by the run
        times of every class)."""
        return bool(self._runtimes.get(size_class))

    def expected_remaining_s(self, ran_s: float, gpus: int = 1) -> float:
        """Expected seconds left of a job of ``gpus`` GPUs that has run ``ran_s``: the mean
        residual life of finished jobs of its size class that ran longer than that (run times are
        heavy-tailed: the mean, not the median, is what a slowdown costs on average); past every
        finished job, as long again."""
        size_class = 1 << (gpus.bit_length() - 1) if gpus > 1 else 1  # size_class, inline
        runtimes = self._runtimes.get(size_class)
        if not runtimes:
            size_class, runtimes = 0, self._all()
        if not runtimes:
            return max(self.prior_runtime_s - ran_s, ran_s, 1.0)
        at = bisect.bisect_right(runtimes, ran_s)
        if at == len(runtimes):
            return max(ran_s, 1.0)
        memo = self._residual_memo.get(size_class)
        if memo is None:
            memo = self._residual_memo[size_class] = {}
        mean_longer = memo.get(at)
        if mean_longer is None:
            longer = runtimes[at:]
            mean_longer = memo[at] = sum(longer) / len(longer)
        return max(mean_longer - ran_s, 1.0)

    def runtimes_for(self, gpus: int) -> list[float]:
        """The sorted run times learnt for a job of ``gpus`` GPUs: its size class's, else every
        class's (empty before any job finished). Read-only: the history keeps them."""
        runtimes = self._runtimes.get(self.size_class(gpus))
        return runtimes if runtimes else self._all()

    def copy(self) -> RunHistory:
        """A copy to learn on apart from this one (a look-ahead's model of the policy starts
        from what the policy has learnt)."""
        return RunHistory(
            prior_runtime_s=self.prior_runtime_s,
            mean_wait_s=self.mean_wait_s,
            mean_requeue_wait_s=self.mean_requeue_wait_s,
            requeues_seen=self.requeues_seen,
            _runtimes={k: list(v) for k, v in self._runtimes.items()},
        )

    def _all(self) -> list[float]:
        if self._all_sorted is None:
            self._all_sorted = sorted(t for ts in self._runtimes.values() for t in ts)
        return self._all_sorted

    def observe_wait(
        self, waited_s: float, weight: float = 0.05, *, requeued: bool = False
    ) -> None:
        self.mean_wait_s += weight * (waited_s - self.mean_wait_s)
        if requeued:  # a job that was preempted before: what preempting a job costs it
            if self.requeues_seen == 0:
                self.mean_requeue_wait_s = waited_s
            self.mean_requeue_wait_s += weight * (waited_s - self.mean_requeue_wait_s)
            self.requeues_seen += 1

    def expected_requeue_wait_s(self, learnt: bool = True) -> float:
        """How long a job preempted now can expect to wait before it runs again: what earlier
        preempted jobs waited (they queue behind everyone that outranks them), else the mean
        wait of every start."""
        if learnt and self.requeues_seen:
            return max(self.mean_requeue_wait_s, self.mean_wait_s)
        return self.mean_wait_s

    def observe_finish(self, runtime_s: float, gpus: int = 1) -> None:
        size_class = self.size_class(gpus)
        # Only this class's run times change, and all of them: other classes keep their memos.
        self._residual_memo.pop(size_class, None)
        self._residual_memo.pop(0, None)
        runtimes = self._runtimes.setdefault(size_class, [])
        bisect.insort(runtimes, runtime_s)
        if len(runtimes) > 2000:  # keep the recent past only, roughly
            del runtimes[::2]
            self._all_sorted = None
        elif self._all_sorted is not None:  # kept in step rather than sorted again
            bisect.insort(self._all_sorted, runtime_s)
