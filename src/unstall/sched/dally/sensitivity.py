"""A job's network sensitivity: its slowdown at each locality level against consolidated.

The figures come with the job (the simulator fills them from the perf model, or from a measured
JobProfile): spread over nodes of one rack, and spread over racks.
"""

from __future__ import annotations

from unstall.sched.base import JobView
from unstall.sched.placement import Locality


def slowdown_at(job: JobView, level: Locality, best: Locality) -> float:
    """Iteration-time ratio of ``job`` placed at ``level`` vs at its best possible level."""
    if level <= best:
        return 1.0
    if level == Locality.RACK:
        return max(1.0, job.slowdown_node_spread)
    return max(1.0, job.slowdown_rack_spread)


def is_sensitive(job: JobView, threshold: float) -> bool:
    return max(job.slowdown_node_spread, job.slowdown_rack_spread) >= threshold
