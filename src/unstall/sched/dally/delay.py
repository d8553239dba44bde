"""Delay scheduling over locality levels (one node, one rack, anywhere).

A job that cannot get its best level waits for it, but only for a time that grows with what the
worse level would cost it: ``base x (slowdown there - 1)``, capped. An insensitive job's timer is
zero, so it starts at once wherever GPUs are free; a sensitive one holds out for consolidation.
"""

from __future__ import annotations

from unstall.sched.base import JobView
from unstall.sched.dally.sensitivity import slowdown_at
from unstall.sched.placement import Locality


def accept_after_s(
    job: JobView,
    level: Locality,
    best: Locality,
    *,
    base_s: float,
    max_wait_s: float,
    insensitive_below: float,
) -> float:
    """Seconds in the queue after which ``job`` accepts a placement at ``level``."""
    slowdown = slowdown_at(job, level, best)
    if slowdown < insensitive_below:
        return 0.0
    return min(max_wait_s, base_s * (slowdown - 1.0))
