"""The auto-tuner of the delay timers: learns online, from what has happened so far only.

It keeps two accounts in GPU-seconds over a window of job starts:

- the *waiting paid*: time jobs spent held for a better locality level;
- the *slowdown avoided* by jobs that were held and got their better level, and the *slowdown
  suffered* by sensitive jobs that gave up and accepted a worse level.

If waiting cost more than it saved, the base timer shrinks; if jobs that gave up lost more to
slowdown than waiting cost, it grows. Run-time expectations come from the run times of jobs that
have finished (never from the future).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field


@dataclass
class DelayTuner:
    base_s: float
    enabled: bool
    tune_every: int
    step: float
    min_s: float
    max_s: float
    prior_runtime_s: float
    waiting_paid: float = 0.0
    slowdown_avoided: float = 0.0
    slowdown_suffered: float = 0.0
    starts_seen: int = 0
    retunes: int = 0
    _runtimes: list[float] = field(default_factory=list)  # sorted run times of finished jobs

    def expected_remaining_s(self, ran_s: float) -> float:
        """Expected seconds left of a job that has run ``ran_s``: the median finished run time
        minus what it ran, or, past the median, as long again (heavy-tailed run times)."""
        if self._runtimes:
            median = self._runtimes[len(self._runtimes) // 2]
        else:
            median = self.prior_runtime_s
        return max(median - ran_s, ran_s, 1.0)

    def observe_finish(self, runtime_s: float) -> None:
        bisect.insort(self._runtimes, runtime_s)
        if len(self._runtimes) > 2000:  # keep the recent past only, roughly
            del self._runtimes[::2]

    def observe_start(
        self, *, gpus: int, held_s: float, avoided: float, suffered: float, expected_s: float
    ) -> bool:
        """Account one start of a job that was held (``held_s`` > 0) or that accepted a worse
        level (``suffered`` > 1); returns True when the base timer was re-tuned."""
        self.waiting_paid += gpus * held_s
        self.slowdown_avoided += gpus * (avoided - 1.0) * expected_s
        self.slowdown_suffered += gpus * (suffered - 1.0) * expected_s
        self.starts_seen += 1
        if not self.enabled or self.starts_seen < self.tune_every:
            return False
        if self.waiting_paid > self.slowdown_avoided:
            self.base_s = max(self.min_s, self.base_s / self.step)
        elif self.slowdown_suffered > self.waiting_paid:
            self.base_s = min(self.max_s, self.base_s * self.step)
        self.waiting_paid = self.slowdown_avoided = self.slowdown_suffered = 0.0
        self.starts_seen = 0
        self.retunes += 1
        return True
