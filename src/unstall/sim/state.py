"""Mutable state of the simulated cluster and its jobs. Only the engine changes it.

Invariants are checked on every change (not only in tests): a GPU is never given twice, no node
holds more than its GPUs, a job runs only after it arrives and finishes exactly once.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from unstall.errors import UnstallError
from unstall.sched.base import ClusterLayout, JobView, Placement, Sensitivity
from unstall.sim.speed import SpeedModel


class SimInvariantError(UnstallError, AssertionError):
    """The simulation reached a state that must never exist (a bug in a policy or the engine)."""


class JobState(enum.IntEnum):
    PENDING = 0  # not arrived yet
    QUEUED = 1
    RUNNING = 2
    DONE = 3


class SimJob:
    """One job's static facts and its progress. Progress is advanced lazily, at rate changes."""

    __slots__ = (
        "attained_gpu_s",
        "base_iter_s",
        "changed_s",
        "comm_overhead_s",
        "cons_iter_s",
        "done_iters",
        "duration_s",
        "finish_s",
        "first_start_s",
        "index",
        "iter_s",
        "job_id",
        "last_update_s",
        "migrations",
        "model",
        "num_gpus",
        "paused_until_s",
        "placement",
        "preemptions",
        "queued_since_s",
        "queued_total_s",
        "sensitivity",
        "state",
        "submit_s",
        "version",
        "work_iters",
    )

    def __init__(
        self,
        *,
        index: int,
        job_id: str,
        submit_s: float,
        num_gpus: int,
        duration_s: float,
        model: str,
        cons_iter_s: float,
        sensitivity: Sensitivity,
    ) -> None:
        self.index = index
        self.job_id = job_id
        self.submit_s = submit_s
        self.num_gpus = num_gpus
        self.duration_s = duration_s
        self.model = model
        self.cons_iter_s = cons_iter_s
        # The trace's duration is the run time at the consolidated placement (DESIGN.md).
        self.work_iters = duration_s / cons_iter_s
        # What communication overhead is measured against: the consolidated iteration time on
        # the GPU type the job runs on (the same as cons_iter_s on a cluster of one type).
        self.base_iter_s = cons_iter_s
        self.sensitivity = sensitivity
        self.done_iters = 0.0
        self.iter_s = cons_iter_s
        self.state = JobState.PENDING
        self.placement: Placement = ()
        self.last_update_s = submit_s
        self.paused_until_s = 0.0
        self.version = 0
        self.first_start_s = -1.0
        self.finish_s = -1.0
        self.attained_gpu_s = 0.0
        self.changed_s = submit_s
        self.queued_since_s = submit_s
        self.queued_total_s = 0.0
        self.preemptions = 0
        self.migrations = 0
        self.comm_overhead_s = 0.0

    def advance(self, now: float) -> None:
        """Account the progress made since the last update at the current iteration time."""
        start = (
            self.last_update_s if self.last_update_s > self.paused_until_s else self.paused_until_s
        )
        if now > start:
            dt = now - start
            self.done_iters += dt / self.iter_s
            # Time lost to communication beyond what the consolidated placement would need.
            self.comm_overhead_s += dt * (1.0 - self.base_iter_s / self.iter_s)
        self.last_update_s = now

    def finish_time(self, now: float) -> float:
        begin = now if now > self.paused_until_s else self.paused_until_s
        left = self.work_iters - self.done_iters
        return begin + (left if left > 0.0 else 0.0) * self.iter_s

    def remaining_cons_s(self) -> float:
        """Seconds of work left at the consolidated speed (what an oracle scheduler is told)."""
        left = self.work_iters - self.done_iters
        return (left if left > 0.0 else 0.0) * self.cons_iter_s

    def make_view(self, oracle: bool) -> JobView:
        """The job as policies see it; call after ``advance`` so progress is up to date."""
        running = self.state == JobState.RUNNING
        resume = max(self.last_update_s, self.paused_until_s)
        return JobView(
            job_id=self.job_id,
            index=self.index,
            num_gpus=self.num_gpus,
            submit_s=self.submit_s,
            model=self.model,
            sensitivity=self.sensitivity,
            attained_gpu_s_at_change=self.attained_gpu_s,
            changed_s=self.changed_s,
            running=running,
            placement=self.placement if running else (),
            preemptions=self.preemptions,
            oracle_remaining_s=self.remaining_cons_s() if oracle else None,
            oracle_rate=self.cons_iter_s / self.iter_s if oracle else 0.0,
            oracle_resume_s=resume if oracle else 0.0,
        )


class ClusterState:
    """Free GPUs per node and rack; allocation and release with capacity checks."""

    __slots__ = ("free_by_node", "free_by_rack", "layout", "spread_by_node", "used_gpus")

    def __init__(self, layout: ClusterLayout) -> None:
        self.layout = layout
        self.free_by_node = list(layout.node_gpus)
        self.free_by_rack = list(layout.rack_gpus)
        self.used_gpus = 0
        self.spread_by_node = [0] * layout.num_nodes

    def allocate(self, job: SimJob, placement: Placement) -> None:
        total = 0
        seen: set[int] = set()
        for node, k in placement:
            if not 0 <= node < len(self.free_by_node) or node in seen or k <= 0:
                raise SimInvariantError(f"job {job.job_id}: bad placement {placement}")
            seen.add(node)
            if self.free_by_node[node] < k:
                raise SimInvariantError(
                    f"job {job.job_id}: node {node} has {self.free_by_node[node]} free GPUs, "
                    f"placement asks {k}"
                )
            total += k
        if total != job.num_gpus:
            raise SimInvariantError(
                f"job {job.job_id} needs {job.num_gpus} GPUs, placement {placement} gives {total}"
            )
        node_rack = self.layout.node_rack
        spread = len(placement) > 1
        for node, k in placement:
            self.free_by_node[node] -= k
            self.free_by_rack[node_rack[node]] -= k
            if spread:
                self.spread_by_node[node] += 1
        self.used_gpus += total

    def release(self, placement: Placement) -> None:
        node_gpus = self.layout.node_gpus
        node_rack = self.layout.node_rack
        spread = len(placement) > 1
        for node, k in placement:
            self.free_by_node[node] += k
            self.free_by_rack[node_rack[node]] += k
            if spread:
                self.spread_by_node[node] -= 1
            if self.free_by_node[node] > node_gpus[node]:
                raise SimInvariantError(f"node {node} released more GPUs than it has")
            self.used_gpus -= k


def build_jobs(
    *,
    job_ids: Sequence[str],
    submit_s: Sequence[float],
    num_gpus: Sequence[int],
    duration_s: Sequence[float],
    models: Sequence[str],
    speed: SpeedModel,
) -> list[SimJob]:
    """Jobs with their consolidated iteration time and sensitivity, cached per (model, GPUs)."""
    cache: dict[tuple[str, int], tuple[float, Sensitivity]] = {}
    jobs: list[SimJob] = []
    for i, (jid, sub, n, dur, model) in enumerate(
        zip(job_ids, submit_s, num_gpus, duration_s, models, strict=True)
    ):
        key = (model, int(n))
        facts = cache.get(key)
        if facts is None:
            facts = (speed.consolidated_iter_s(model, int(n)), speed.sensitivity(model, int(n)))
            cache[key] = facts
        jobs.append(
            SimJob(
                index=i,
                job_id=str(jid),
                submit_s=float(sub),
                num_gpus=int(n),
                duration_s=float(dur),
                model=model,
                cons_iter_s=facts[0],
                sensitivity=facts[1],
            )
        )
    return jobs
