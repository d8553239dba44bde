"""What a live run is doing now: the running jobs, the queue and the totals, as plain rows.

:func:`live_status` reads the scheduling core's state (:class:`~unstall.loop.SchedulingCore`)
and returns a frozen :class:`LiveStatus`; it writes nothing and needs no Ray, so a test builds
a core on a scripted driver and checks the rows. The live backend hands one to
``run_live(on_status=...)`` a few times a second; ``unstall live run`` draws it as a table on a
terminal (:mod:`unstall.cli.live_board`).

A running job's executors report its iterations only when its segment ends, so its progress
here is an estimate: the iterations it had when the segment began plus the time since at its
iteration time (the perf model's, links shared; the segment's start-up is not counted out, so
the estimate runs a little ahead early in a segment and is capped at the job's work).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass

from unstall.loop import Job, JobState, SchedulingCore, placement_text

# Rows of each kind a status lists (a screenful); the totals count the rest.
RUNNING_ROWS = 20
QUEUED_ROWS = 15


@dataclass(frozen=True, slots=True)
class RunningRow:
    """A running job: where it runs and how far it is (iterations as its processes count
    them: the job's work divided by the speedup in real compute)."""

    job_id: str
    model: str
    gpus: int
    placement: str  # ``0:2+1:2``, as :func:`unstall.loop.placement_text` writes it
    progress: float  # share of its work done, 0 to 1 (estimated, see the module docstring)
    iterations_done: float
    iterations_total: float
    restarts: int  # segments after its first: preemptions, migrations and failures


@dataclass(frozen=True, slots=True)
class QueuedRow:
    """A queued job: its place in the queue (1 first: queued earliest) and since when it waits
    (trace seconds since the run began; queued again after a preemption or a failure, since
    then)."""

    job_id: str
    gpus: int
    queued_since_s: float
    waited_s: float
    position: int


@dataclass(frozen=True, slots=True)
class LiveStatus:
    """One moment of a live run (times in trace seconds since it began): the totals, and the
    first :data:`RUNNING_ROWS` running jobs (by their order in the trace) and
    :data:`QUEUED_ROWS` queued ones (by position); ``running_total`` and ``queued_total`` count
    them all."""

    time_s: float
    jobs_total: int
    jobs_finished: int
    jobs_failed: int  # given up after failures in a row (or cancelled)
    gpus_busy: int
    gpus_total: int  # the cluster's, less those of nodes that left
    running: tuple[RunningRow, ...]
    running_total: int
    queued: tuple[QueuedRow, ...]
    queued_total: int

    @property
    def running_more(self) -> int:
        """Running jobs beyond the rows listed."""
        return self.running_total - len(self.running)

    @property
    def queued_more(self) -> int:
        """Queued jobs beyond the rows listed."""
        return self.queued_total - len(self.queued)


def estimated_done_iters(job: Job, now: float) -> float:
    """A running job's iterations done by ``now`` (the job's own units, as ``work_iters``):
    those it had when its segment began (``changed_s``, when the core last placed it) plus the
    time since at its iteration time, at most its work. Any other job's: what it has."""
    if job.state != JobState.RUNNING or job.iter_s <= 0:
        return job.done_iters
    since = now - job.changed_s
    done = job.done_iters + (since / job.iter_s if since > 0 else 0.0)
    return done if done < job.work_iters else job.work_iters


def live_status(
    core: SchedulingCore,
    now: float,
    *,
    scales: Mapping[str, float] | None = None,
    running_rows: int = RUNNING_ROWS,
    queued_rows: int = QUEUED_ROWS,
) -> LiveStatus:
    """The core's state at ``now`` (trace seconds) as a :class:`LiveStatus`. ``scales``: each
    job's work iterations per iteration of its processes (live runs of real compute divide a
    job's work by the speedup); a job not in it, or None, counts in work iterations."""
    finished = failed = 0
    for job in core.jobs:
        if job.state == JobState.DONE:
            finished += 1
        elif job.state in (JobState.FAILED, JobState.CANCELLED):
            failed += 1
    # The trace's order: rows keep their place from one refresh to the next.
    running_jobs = sorted(core.running.values(), key=lambda job: job.index)
    running = tuple(
        _running_row(job, now, 1.0 if scales is None else scales.get(job.job_id, 1.0))
        for job in running_jobs[:running_rows]
    )
    # The queue's order: queued earliest first (a job queued again joins at the back). The
    # first rows only: a large trace can queue thousands, refreshed a few times a second.
    queue_order = _queue_order(list(core.queued.values()), queued_rows)
    queued = tuple(
        QueuedRow(
            job_id=job.job_id,
            gpus=job.num_gpus,
            queued_since_s=job.queued_since_s,
            waited_s=max(0.0, now - job.queued_since_s),
            position=position,
        )
        for position, job in enumerate(queue_order, 1)
    )
    layout = core.layout
    return LiveStatus(
        time_s=now,
        jobs_total=len(core.jobs),
        jobs_finished=finished,
        jobs_failed=failed,
        gpus_busy=core.cluster.used_gpus,
        gpus_total=layout.total_gpus - core.cluster.lost_gpus,
        running=running,
        running_total=len(core.running),
        queued=queued,
        queued_total=len(core.queued),
    )


def _queue_order(jobs: list[Job], limit: int) -> list[Job]:
    def key(job: Job) -> tuple[float, int]:
        return (job.queued_since_s, job.index)

    if limit >= len(jobs):
        return sorted(jobs, key=key)
    return heapq.nsmallest(max(0, limit), jobs, key=key)


def _running_row(job: Job, now: float, scale: float) -> RunningRow:
    done = estimated_done_iters(job, now)
    scale = scale if scale > 0 else 1.0
    return RunningRow(
        job_id=job.job_id,
        model=job.model,
        gpus=job.num_gpus,
        placement=placement_text(job.placement),
        progress=done / job.work_iters if job.work_iters > 0 else 0.0,
        iterations_done=done / scale,
        iterations_total=job.work_iters / scale,
        restarts=job.preemptions + job.migrations + job.failures,
    )


__all__ = [
    "QUEUED_ROWS",
    "RUNNING_ROWS",
    "LiveStatus",
    "QueuedRow",
    "RunningRow",
    "estimated_done_iters",
    "live_status",
]
