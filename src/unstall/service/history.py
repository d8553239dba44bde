"""The service's recent past, for the dashboard's history plots: the cluster's busy, free and lost
GPUs and its queue, sampled every few seconds over the last hours, in memory.

Bounded on purpose: ``hours`` of samples every ``every_s`` seconds (6 hours every 5 s: 4,320
samples of a few numbers). A restarted service starts a new history; the job store keeps the
jobs, whose completion times (JCTs) the dashboard reads from their records instead.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Sample:
    """The cluster at one moment (``at``: wall time, seconds since the epoch)."""

    at: float
    busy: int
    free: int
    lost: int
    queued: int
    running: int

    @property
    def utilisation(self) -> float:
        """Busy GPUs over the GPUs that are up (0 where none is up)."""
        up = self.busy + self.free
        return self.busy / up if up else 0.0


class History:
    """Samples at least ``every_s`` apart, the latest ``hours`` of them (thread-safe: the
    scheduler's thread adds, the API's threads read)."""

    def __init__(self, *, every_s: float = 5.0, hours: float = 6.0) -> None:
        if every_s <= 0 or hours <= 0:
            raise ValueError(f"History: every_s and hours must be > 0, got {every_s}, {hours}")
        self.every_s = every_s
        self.hours = hours
        self._samples: collections.deque[Sample] = collections.deque(
            maxlen=max(1, round(hours * 3600 / every_s))
        )
        self._lock = threading.Lock()

    def observe(self, sample: Sample) -> bool:
        """Keep ``sample`` if the latest kept one is ``every_s`` old or more; whether it was."""
        with self._lock:
            if self._samples and sample.at - self._samples[-1].at < self.every_s:
                return False
            self._samples.append(sample)
            return True

    def samples(self, since: float | None = None) -> list[Sample]:
        """The kept samples (those at ``since`` or later), oldest first."""
        with self._lock:
            kept = list(self._samples)
        return kept if since is None else [s for s in kept if s.at >= since]
