"""Cluster snapshots for policy tests, as a backend builds them: free GPUs by rack summed from
by node, and the spread running jobs with how many of them hold GPUs on each node."""

from __future__ import annotations

from collections.abc import Sequence

from unstall.sched.base import ClusterLayout, ClusterSnapshot, JobView


def cluster_snapshot(
    layout: ClusterLayout,
    free: tuple[int, ...],
    queued: Sequence[JobView],
    running: Sequence[JobView] = (),
    now: float = 0.0,
) -> ClusterSnapshot:
    """The snapshot of ``layout`` with ``free`` GPUs by node, ``queued`` waiting and
    ``running`` jobs running where their placements say, at ``now``."""
    spread_running = tuple(r for r in running if len(r.placement) > 1)
    spread = [0] * layout.num_nodes
    for r in spread_running:
        for node, _ in r.placement:
            spread[node] += 1
    return ClusterSnapshot(
        now=now,
        layout=layout,
        free_by_node=free,
        free_by_rack=tuple(sum(free[n] for n in nodes) for nodes in layout.rack_nodes),
        queued=tuple(queued),
        running=tuple(running),
        spread_jobs_by_node=tuple(spread),
        spread_running=spread_running,
    )
