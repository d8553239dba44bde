"""Job views and cluster snapshots for policy tests, as a backend builds them: one builder of
``JobView`` for every test; snapshots with free GPUs by rack summed from by node, and the spread
running jobs with how many of them hold GPUs on each node."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from unstall.sched.base import ClusterLayout, ClusterSnapshot, JobView, Placement, Sensitivity

# The sensitivity a view gets unless its test says otherwise: 1.5x slower spread over a rack,
# 2x over racks.
SENSITIVE = Sensitivity.flat(1.5, 2.0)


def job_view(
    job_id: str,
    num_gpus: int = 1,
    *,
    index: int | None = None,
    submit_s: float = 0.0,
    model: str = "m",
    sensitivity: Sensitivity = SENSITIVE,
    attained: float = 0.0,
    changed_s: float = 0.0,
    placement: Placement = (),
    running: bool | None = None,
    speeds: Mapping[str, float] | None = None,
    **extra: Any,
) -> JobView:
    """A job as a backend shows it: ``index`` from the digits after the id's first character
    (``"j3"`` -> 3; 0 without), running where it has a ``placement``, ``speeds`` by GPU type,
    ``attained`` GPU-seconds at ``changed_s``; ``extra`` for the rest of JobView's fields (the
    oracle's figures, ``preemptions``)."""
    if index is None:
        index = int(job_id[1:]) if job_id[1:].isdigit() else 0
    return JobView(
        job_id=job_id,
        index=index,
        num_gpus=num_gpus,
        submit_s=submit_s,
        model=model,
        sensitivity=sensitivity,
        attained_gpu_s_at_change=attained,
        changed_s=changed_s,
        running=bool(placement) if running is None else running,
        placement=placement,
        type_speeds=tuple((speeds or {}).items()),
        **extra,
    )


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
