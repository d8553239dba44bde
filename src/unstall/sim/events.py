"""A small, deterministic event kernel: a heap of ``(time, priority, seq, kind, job, version)``.

At equal times, events pop in priority order (completions free GPUs before arrivals ask for them),
then in the order they were pushed. A job's finish event carries the job's version when it was
planned; re-planning bumps the version, so stale finish events are skipped when popped (lazy
invalidation instead of searching the heap).
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Callable
from dataclasses import dataclass, field


class EventKind(enum.IntEnum):
    """Event kinds; the value is the priority among events at the same instant."""

    FINISH = 0
    CONGESTION = 1
    ARRIVAL = 2
    TIMER = 3
    TICK = 4


# (time, priority, seq, job index or -1, version or payload index)
Event = tuple[float, int, int, int, int]


@dataclass(slots=True)
class EventQueue:
    """Min-heap of events with a push counter that makes equal-time order deterministic."""

    _heap: list[Event] = field(default_factory=list)
    _seq: int = 0
    pushed: int = 0

    def push(self, time: float, kind: EventKind, job: int = -1, payload: int = 0) -> None:
        self._seq += 1
        self.pushed += 1
        heapq.heappush(self._heap, (time, int(kind), self._seq, job, payload))

    def pop(self) -> Event:
        return heapq.heappop(self._heap)

    def peek_time(self) -> float:
        return self._heap[0][0]

    def compact(self, keep: Callable[[Event], bool]) -> None:
        """Drop the events ``keep`` rejects (superseded ones). Pop order is unchanged: events are
        totally ordered by ``(time, priority, seq)``, whatever the heap's layout."""
        self._heap = [event for event in self._heap if keep(event)]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)
