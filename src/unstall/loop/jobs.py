"""The jobs and GPUs of a run, as the scheduling core keeps them.

A job's lifecycle (its state, placement, queueing and service, its moves and failures) is written
only by :class:`unstall.loop.core.SchedulingCore`; its progress (iterations done, iteration time,
pauses) by the driver's progress model, through the methods below.

Invariants are checked on every change (not only in tests): a GPU is never given twice, no node
holds more than its GPUs, a job runs only after it arrives and finishes exactly once.
"""

from __future__ import annotations

import enum

from unstall.errors import UnstallError
from unstall.sched.base import ClusterLayout, JobView, Placement, Sensitivity


class SimInvariantError(UnstallError, AssertionError):
    """The simulation reached a state that must never exist (a bug in a policy or the engine)."""


class JobState(enum.IntEnum):
    PENDING = 0  # not arrived yet
    QUEUED = 1
    RUNNING = 2
    DONE = 3  # finished its work
    FAILED = 4  # failed ``max_failures`` times in a row without progress: out of the run
    CANCELLED = 5  # cancelled by its user


# How a job's state reads in an error ("cannot start it: the job is running").
STATE_WORDS = {
    JobState.PENDING: "not yet submitted",
    JobState.QUEUED: "queued",
    JobState.RUNNING: "running",
    JobState.DONE: "finished",
    JobState.FAILED: "failed",
    JobState.CANCELLED: "cancelled",
}


class Job:
    """One job's static facts and its progress. Progress is advanced lazily, at rate changes."""

    __slots__ = (
        "_attained_gpu_s",
        "base_iter_s",
        "changed_s",
        "comm_overhead_s",
        "cons_iter_s",
        "done_iters",
        "duration_s",
        "error",
        "failed_in_a_row",
        "failures",
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
        "priority",
        "queued_since_s",
        "queued_total_s",
        "sensitivity",
        "service",
        "startup_s",
        "state",
        "submit_s",
        "type_speeds",
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
        type_speeds: tuple[tuple[str, float], ...] = (),
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
        # Its speed on each GPU type of the cluster (see JobView.type_speeds).
        self.type_speeds = type_speeds
        self.done_iters = 0.0
        self.iter_s = cons_iter_s
        self.state = JobState.PENDING
        self.placement: Placement = ()
        self.last_update_s = submit_s
        self.paused_until_s = 0.0
        # Its own set-up at its first start, where one was measured (None: the run's startup_s).
        self.startup_s: float | None = None
        self.version = 0
        self.first_start_s = -1.0
        self.finish_s = -1.0
        self._attained_gpu_s = 0.0
        # (placement, seconds) of each stretch of service: GPU time by GPU type in the results.
        self.service: list[tuple[Placement, float]] = []
        self.changed_s = submit_s
        self.queued_since_s = submit_s
        self.queued_total_s = 0.0
        self.preemptions = 0
        self.migrations = 0
        self.comm_overhead_s = 0.0
        self.priority = 0  # its user's, where jobs have one (higher first)
        self.failures = 0  # segments that failed under it (a process or node died)
        self.failed_in_a_row = 0  # its own failures since it last gained a checkpoint
        self.error = ""  # the last failure's reason

    @property
    def attained_gpu_s(self) -> float:
        """GPU-seconds of service received so far (up to the job's last change)."""
        return self._attained_gpu_s

    @attained_gpu_s.setter
    def attained_gpu_s(self, value: float) -> None:
        # A backend adds a stretch of service as the job stops, its placement still set: kept
        # with that placement, so that results can tell GPU time by GPU type.
        added = value - self._attained_gpu_s
        if added > 0.0 and self.placement:
            self.service.append((self.placement, added / self.num_gpus))
        self._attained_gpu_s = value

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
            priority=self.priority,
            type_speeds=self.type_speeds,
            oracle_remaining_s=self.remaining_cons_s() if oracle else None,
            oracle_rate=self.cons_iter_s / self.iter_s if oracle else 0.0,
            oracle_resume_s=resume if oracle else 0.0,
        )


class ClusterState:
    """Free GPUs per node and rack; allocation and release with capacity checks."""

    __slots__ = ("down", "free_by_node", "free_by_rack", "layout", "spread_by_node", "used_gpus")

    def __init__(self, layout: ClusterLayout) -> None:
        self.layout = layout
        self.free_by_node = list(layout.node_gpus)
        self.free_by_rack = list(layout.rack_gpus)
        self.used_gpus = 0
        self.spread_by_node = [0] * layout.num_nodes
        self.down: set[int] = set()  # nodes that left the cluster: their GPUs are lost

    def withdraw(self, node: int) -> None:
        """A node that left: its free GPUs are taken from the policies' view for good (jobs
        still on it are released first, by their failure)."""
        if node in self.down:
            return
        self.down.add(node)
        free = self.free_by_node[node]
        self.free_by_node[node] = 0
        self.free_by_rack[self.layout.node_rack[node]] -= free

    @property
    def lost_gpus(self) -> int:
        return sum(self.layout.node_gpus[node] for node in self.down)

    def allocate(self, job: Job, placement: Placement) -> None:
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
        down = self.down
        for node, k in placement:
            if spread:
                self.spread_by_node[node] -= 1
            self.used_gpus -= k
            if down and node in down:
                continue  # a lost node's GPUs stay lost
            self.free_by_node[node] += k
            self.free_by_rack[node_rack[node]] += k
            if self.free_by_node[node] > node_gpus[node]:
                raise SimInvariantError(f"node {node} released more GPUs than it has")
