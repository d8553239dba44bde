"""A scheduling policy written outside unstall: smallest job first, consolidated while it can wait.

The tutorial of docs/policy.md. Run it like any built-in policy:

    unstall sim run --policy examples/my_policy.py:SmallestFirst --policy-option patience_s=600
    unstall sim compare --policies fifo,dally,examples/my_policy.py:SmallestFirst \\
        --policy-option examples/my_policy.py:SmallestFirst.patience_s=600 --json out/cmp.json
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from unstall.sched import ClusterSnapshot, Decision, FreeGpus, SetTimer, Start


@dataclass
class SmallestFirst:
    """Queued jobs by GPU count, fewest first (ties: earliest arrival). A job starts only on its
    most consolidated placement until it has waited ``patience_s`` seconds; after that it takes
    the best placement free now, however spread."""

    # The fields with defaults are the options `--policy-option KEY=VALUE` sets, typed by them.
    patience_s: float = 1800.0
    name: str = "smallest-first"
    needs_oracle: bool = False  # True would show it each job's remaining work: an oracle
    # Jobs whose patience timer is set. State built only from snapshots seen, cleared by reset.
    _timed: set[str] = field(default_factory=set, init=False, repr=False)

    def reset(self) -> None:
        self._timed.clear()

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        free = FreeGpus(snapshot)  # a scratch copy: taking GPUs here changes nothing yet
        starts, timers = [], []
        for job in sorted(snapshot.queued, key=lambda j: (j.num_gpus, j.submit_s)):
            patient = job.waiting_s(snapshot.now) < self.patience_s
            placement = free.consolidated(job.num_gpus) if patient else free.best(job.num_gpus)
            if placement is not None:
                free.take(placement)
                starts.append(Start(job.job_id, placement))
                self._timed.discard(job.job_id)
            elif patient and job.job_id not in self._timed:
                # Rounds happen on events; without this timer a job could outwait its patience
                # until some other job arrives or finishes.
                self._timed.add(job.job_id)
                timers.append(SetTimer(at_s=job.changed_s + self.patience_s, key=job.job_id))
        return Decision(starts=tuple(starts), timers=tuple(timers))
