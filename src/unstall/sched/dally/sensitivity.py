"""A job's network sensitivity: how much slower a placement makes it than a consolidated one.

The figures come with the job (the simulator fills them from the perf model, or from a measured
JobProfile): spread over nodes of one rack, and spread over racks, tabulated by background
congestion, since communication that overlap hides on idle links surfaces on congested ones.
A placement is *consolidated* when it uses the fewest nodes the job can have, within one rack
when the job fits one.
"""

from __future__ import annotations

from collections.abc import Sequence

from unstall.sched.base import ClusterLayout, JobView, Placement
from unstall.sched.placement import Locality, best_locality_possible, locality_of


def is_consolidated(placement: Placement, num_gpus: int, layout: ClusterLayout) -> bool:
    if len(placement) > layout.min_nodes(num_gpus):
        return False
    return locality_of(placement, layout) <= best_locality_possible(num_gpus, layout)


def placement_slowdown(
    job: JobView,
    placement: Placement,
    layout: ClusterLayout,
    congestion: float = 0.0,
    spread_jobs_by_node: Sequence[int] = (),
    *,
    own_share: bool = False,
) -> float:
    """Iteration-time ratio of ``job`` on ``placement`` vs consolidated, under ``congestion``
    and sharing its NICs with the spread jobs already on those nodes (``own_share``: the job
    itself runs there and is among those counts, so the others are one fewer)."""
    if is_consolidated(placement, job.num_gpus, layout):
        return 1.0
    across_racks = locality_of(placement, layout) == Locality.CLUSTER
    sharing = 0
    if spread_jobs_by_node:
        sharing = max(spread_jobs_by_node[n] for n, _ in placement)
        if own_share:
            sharing = max(0, sharing - 1)
    return max(1.0, job.sensitivity.spread_slowdown(across_racks, congestion, sharing))


def is_sensitive(job: JobView, threshold: float, congestion: float = 0.0) -> bool:
    s = job.sensitivity
    return max(s.at(False, congestion), s.at(True, congestion)) >= threshold
