"""The live backend: the simulator's rounds on wall-clock events, carried out on Ray.

What it shares with the simulator's engine is the simulator's own code: job state and views
(:class:`~unstall.loop.jobs.Job`), GPU bookkeeping (:class:`~unstall.loop.jobs.ClusterState`),
the decision checks (:mod:`unstall.loop.checks`), link sharing
(:class:`~unstall.sim.network.NetworkState`) and the metrics. What differs sits here: the clock
is the wall clock times ``speedup``; a job progresses in its executors, not by arithmetic; a
decision is carried out by stopping, checkpointing and starting real processes.

A round happens after arrivals, finishes, failures and the policy's timers. Preemptions and
migrations stop their jobs first (every process stops after the same step; rank 0 checkpoints),
then migrations and starts begin their new segments: so a decision's starts may use the GPUs its
preemptions free, as in the simulator. The time ``decide`` takes and the time carrying the
decision out takes are measured per round: the cluster waits for both.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import itertools
import math
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from unstall.errors import UnstallError
from unstall.live.cluster import LiveCluster
from unstall.live.config import LiveConfig
from unstall.live.executor import RemoteExecutor, RemoteStore
from unstall.live.training import JobWork, SegmentOutcome, SegmentPlan
from unstall.loop.checks import PolicyError, check_decision_shape, check_placement
from unstall.loop.failures import PolicyCrashError, policy_crash
from unstall.loop.jobs import ClusterState, Job, JobState
from unstall.loop.timeline import Timeline
from unstall.sched.base import (
    ClusterSnapshot,
    Decision,
    JobView,
    Placement,
    Policy,
    policy_capabilities,
)
from unstall.sim.engine import EngineOutcome
from unstall.sim.network import NetworkState
from unstall.sim.perf_speed import PerfSpeedModel

# Seconds a stopping job's processes get to finish their step and checkpoint before they are
# counted as failed (an emulated step is short; a real one can be a few seconds on a CPU).
STOP_GRACE_S = 120.0
# Wall seconds the other processes of a job get to notice that one of them failed.
FAILED_PEER_GRACE_S = 10.0
# Executors are named EXECUTOR_PREFIX + run token + node and GPU.
EXECUTOR_PREFIX = "unstall-live-"
# How long the loop sleeps at most between looks at its executors while nothing is due.
POLL_S = 0.5


class LiveRunError(UnstallError):
    """The live run cannot go on (no executor could start, every node is gone)."""


@dataclass
class Segment:
    """A job's run on one placement: its executors (rank order), their calls, when it began."""

    job: Job
    placement: Placement
    executors: list[tuple[int, int]]  # (node, slot) of each rank
    refs: list[Any]
    began_wall: float
    start_iteration: float
    segment_id: str = ""  # unique in the run: the executors' name for this segment
    iteration_s: float = 0.0  # emulated: trace seconds an iteration takes on this placement


@dataclass
class JobRecord:
    """What only a live run knows of a job: measured set-up times (trace seconds), its
    placements over time, the processes that died under it."""

    startup_s: float = math.nan  # first segment: joining the group, building the model
    restore_s: list[float] = field(default_factory=list)  # later segments: join + restore
    checkpoint_s: list[float] = field(default_factory=list)  # stops: the final checkpoint
    placements: list[str] = field(default_factory=list)
    start_progress: list[float] = field(default_factory=list)  # share of the work done at each
    failures: int = 0
    behind_s: float = 0.0  # emulated: trace seconds its processes fell behind the perf model
    failed_in_a_row: int = 0  # failures since the job last got past a checkpoint
    error: str = ""  # the last failure's reason
    given_up: bool = False  # failed max_failures times in a row: out of the run
    work: JobWork | None = None
    scale: float = 1.0  # trace iterations per executor iteration


@dataclass(frozen=True)
class RoundRecord:
    time_s: float
    decide_wall_s: float
    apply_wall_s: float
    starts: int
    preemptions: int
    migrations: int


@dataclass
class LiveOutcome:
    """What the loop hands to the results: the simulator's outcome, plus what only it knows."""

    engine: EngineOutcome
    records: dict[str, JobRecord]
    rounds: list[RoundRecord]
    executor_start_wall_s: float
    failures: int
    nodes_lost: list[int]
    interrupted: bool


def placement_text(placement: Placement) -> str:
    """``0:4`` or ``0:2+1:2``: node and GPUs of each part of a placement."""
    return "+".join(f"{node}:{gpus}" for node, gpus in placement)


class LiveInterrupted(KeyboardInterrupt):
    """A Ctrl-C stopped the live run after its jobs' processes were stopped; ``outcome`` holds
    what finished."""

    def __init__(self, outcome: LiveOutcome) -> None:
        self.outcome = outcome
        done = sum(1 for job in outcome.engine.jobs if job.state == JobState.DONE)
        super().__init__(f"{done} of {len(outcome.engine.jobs)} jobs finished")


class LiveBackend:
    """Runs ``jobs`` on ``cluster`` under ``policy`` (see the module docstring)."""

    def __init__(
        self,
        *,
        cluster: LiveCluster,
        speed: PerfSpeedModel,
        policy: Policy,
        jobs: list[Job],
        works: dict[str, JobWork],
        config: LiveConfig,
        log: Callable[[str], None] | None = None,
        on_finish: Callable[[int], None] | None = None,
    ) -> None:
        self.live = cluster
        self.layout_topology = cluster.topology
        from unstall.sim.run import layout_of

        self.layout = layout_of(cluster.topology)
        self.speed = speed
        self.policy = policy
        self.jobs = jobs
        self.by_id = {job.job_id: job for job in jobs}
        self.config = config
        self.log = log or (lambda _text: None)
        self.on_finish = on_finish
        self.cluster = ClusterState(self.layout)
        self.net = NetworkState(speed.capacity)
        self.rng = random.Random(config.seed)
        self.oracle = policy_capabilities(policy).needs_oracle
        self.records = {job.job_id: JobRecord() for job in jobs}
        for job in jobs:
            record = self.records[job.job_id]
            work = works[job.job_id]
            record.work = work
            record.scale = job.work_iters / work.iterations if work.iterations > 0 else 1.0
        self.queued: dict[int, Job] = {}
        self.running: dict[int, Segment] = {}
        self.timers: list[tuple[float, int, str]] = []
        self._timer_seq = 0
        self.timeline = Timeline()
        self.round_records: list[RoundRecord] = []
        self.finished_since_round: list[JobView] = []
        self._telemetry_last: dict[str, float] = {}
        # Extra rounds while jobs wait, for policies that ask for them (as in the simulator).
        self.tick_s = policy_capabilities(policy).tick_s
        self._tick_at = math.inf
        self.rounds = 0
        self.events = 0
        self.preemptions = 0
        self.migrations = 0
        self.failures = 0
        self.nodes_lost: list[int] = []
        self.down: set[int] = set()
        self.t0 = 0.0
        self.executors: dict[tuple[int, int], Any] = {}
        self.free_slots: dict[int, list[int]] = {}
        self.node_address: dict[int, str] = {}
        self.store: Any = None
        self.executor_start_wall_s = 0.0
        self.run_token = uuid.uuid4().hex[:8]
        self._spawned = itertools.count()

    # --- clock -------------------------------------------------------------------------------

    def now(self) -> float:
        """Trace seconds since the run began."""
        return (time.monotonic() - self.t0) * self.config.speedup

    def _wall(self, trace_s: float) -> float:
        return trace_s / self.config.speedup

    # --- executors ---------------------------------------------------------------------------

    def start_executors(self) -> None:
        """One executor per GPU, pinned to its node; returns when all of them answer."""
        began = time.monotonic()
        self.store = RemoteStore.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(
                ray.get_runtime_context().get_node_id(), soft=False
            )
        ).remote()
        pending = []
        for node in self.live.nodes:
            self.node_address[node.index] = node.address
            self.free_slots[node.index] = list(range(node.gpus))
            for slot in range(node.gpus):
                handle = self._new_executor(node.index, slot)
                self.executors[(node.index, slot)] = handle
                pending.append(handle.describe.remote())
        try:
            ray.get(pending, timeout=600)
        except (RayError, GetTimeoutError) as exc:
            raise LiveRunError(f"the executors did not start: {_first_line(exc)}") from exc
        self.executor_start_wall_s = time.monotonic() - began

    def _new_executor(self, node: int, slot: int) -> Any:
        info = self.live.nodes[node]
        options: dict[str, Any] = {
            "scheduling_strategy": NodeAffinitySchedulingStrategy(info.ray_node_id, soft=False),
        }
        if info.uses_gpus:
            options["num_gpus"] = 1
        else:
            options["resources"] = {self.live.slot_resource: 1}
        # Named, so that a person (or a test) can find the process of a GPU: ``ray list
        # actors``, ``ray.get_actor(name)``. A run's own token keeps two runs apart.
        name = f"{EXECUTOR_PREFIX}{self.run_token}-n{node}-g{slot}-{next(self._spawned)}"
        return RemoteExecutor.options(name=name, **options).remote(
            name, self.store, self.live.loopback
        )

    def shutdown(self) -> None:
        for handle in self.executors.values():
            ray.kill(handle, no_restart=True)
        if self.store is not None:
            ray.kill(self.store, no_restart=True)
        self.executors.clear()

    # --- the loop ------------------------------------------------------------------------------

    def run(self) -> LiveOutcome:
        try:
            self.policy.reset()
        except UnstallError:
            raise
        except Exception as exc:
            raise self._policy_failed(exc) from exc
        arrivals = sorted(self.jobs, key=lambda j: j.submit_s)
        next_arrival = 0
        self.t0 = time.monotonic()
        try:
            while True:
                due = [self._arrival_due(arrivals, next_arrival)]
                if self.timers:
                    due.append(self.timers[0][0])
                if self.queued and self._tick_at < math.inf:
                    due.append(self._tick_at)
                next_s = min(due)
                # Done when nothing is left to run: the policy's timers alone would keep the
                # cluster waiting for nothing (the simulator passes over them at no cost).
                if not (self.running or self.queued) and next_arrival == len(arrivals):
                    break
                if next_s == math.inf and not self.running:
                    break  # jobs wait that the policy will never start: as in the simulator
                wait_wall = (
                    max(0.0, self._wall(next_s - self.now())) if next_s < math.inf else POLL_S
                )
                ended = self._wait(min(wait_wall, POLL_S))
                now = self.now()
                wake = False
                fired: list[str] = []
                while next_arrival < len(arrivals) and arrivals[next_arrival].submit_s <= now:
                    self._arrive(arrivals[next_arrival])
                    next_arrival += 1
                    self.events += 1
                    wake = True
                for segment in ended:
                    self._ended(segment, now)
                    self.events += 1
                    wake = True
                while self.timers and self.timers[0][0] <= now:
                    fired.append(heapq.heappop(self.timers)[2])
                    self.events += 1
                    wake = True
                if self._tick_at <= now:
                    self._tick_at = math.inf
                    self.events += 1
                    wake = True
                if wake:
                    self._round(now, tuple(fired))
                    self._sample(self.now())
                    if self.tick_s and self.queued and self._tick_at == math.inf:
                        self._tick_at = now + self.tick_s
        except KeyboardInterrupt:
            self._stop_everything()
            raise LiveInterrupted(self._outcome(interrupted=True)) from None
        return self._outcome(interrupted=False)

    def _arrival_due(self, arrivals: list[Job], next_arrival: int) -> float:
        return arrivals[next_arrival].submit_s if next_arrival < len(arrivals) else math.inf

    def _wait(self, timeout_wall: float) -> list[Segment]:
        """The segments whose every process has returned (finished, stopped or failed)."""
        refs = [ref for segment in self.running.values() for ref in segment.refs]
        if not refs:
            time.sleep(timeout_wall)
            return []
        ray.wait(refs, num_returns=1, timeout=timeout_wall)
        ended = []
        for segment in list(self.running.values()):
            ready, _ = ray.wait(segment.refs, num_returns=len(segment.refs), timeout=0)
            if len(ready) == len(segment.refs):
                ended.append(segment)
            elif ready and self._any_failed(ready):
                # One process is gone: the others stop at their next collective, with an error.
                ended.append(segment)
        return ended

    @staticmethod
    def _any_failed(refs: list[Any]) -> bool:
        for ref in refs:
            try:
                ray.get(ref, timeout=0)
            except RayError:
                return True
        return False

    # --- rounds ------------------------------------------------------------------------------

    def _round(self, now: float, fired: tuple[str, ...]) -> None:
        self.rounds += 1
        snapshot = ClusterSnapshot(
            now=now,
            layout=self.layout,
            free_by_node=tuple(self.cluster.free_by_node),
            free_by_rack=tuple(self.cluster.free_by_rack),
            queued=tuple(self._view(job, now) for job in self.queued.values()),
            running=tuple(self._view(s.job, now) for s in self.running.values()),
            congestion=0.0,
            spread_jobs_by_node=tuple(self.cluster.spread_by_node),
            spread_running=tuple(
                self._view(s.job, now) for s in self.running.values() if len(s.placement) > 1
            ),
            finished=tuple(self.finished_since_round),
            fired_timers=fired,
        )
        self.finished_since_round = []
        began = time.monotonic()
        try:
            decision = self.policy.decide(snapshot, self.rng)
        except UnstallError:
            raise
        except Exception as exc:
            raise self._policy_failed(exc) from exc
        decided = time.monotonic()
        self._apply(decision, now)
        self.round_records.append(
            RoundRecord(
                time_s=now,
                decide_wall_s=decided - began,
                apply_wall_s=time.monotonic() - decided,
                starts=len(decision.starts),
                preemptions=len(decision.preemptions),
                migrations=len(decision.migrations),
            )
        )

    def _view(self, job: Job, now: float) -> JobView:
        view = job.make_view(False)
        if not self.oracle:
            return view
        # An oracle's remaining work, from the progress the running segment is predicted to
        # have made (the executors report only when a segment ends).
        done = job.done_iters
        segment = self.running.get(job.index)
        if segment is not None and job.iter_s > 0:
            done = (
                segment.start_iteration * self.records[job.job_id].scale
                + max(0.0, now - job.changed_s) / job.iter_s
            )
        remaining = max(0.0, job.work_iters - done) * job.cons_iter_s
        return dataclasses.replace(
            view,
            oracle_remaining_s=remaining,
            oracle_rate=job.cons_iter_s / job.iter_s if job.iter_s > 0 else 0.0,
            oracle_resume_s=now,
        )

    def _apply(self, decision: Decision, decided_at: float) -> None:
        """Carry ``decision`` out; ``decided_at`` is the snapshot's time (the cluster's clock
        has moved on while the policy decided)."""
        name = self.policy.name
        decision = check_decision_shape(name, decision)
        now = self.now()
        stopping: list[tuple[Segment, str]] = []
        for p in decision.preemptions:
            stopping.append((self._segment_of(p.job_id, "preempt"), "preempt"))
        for m in decision.migrations:
            stopping.append((self._segment_of(m.job_id, "migrate"), "migrate"))
        finished_instead = self._stop_segments(stopping)
        for m in decision.migrations:
            job = self.by_id[m.job_id]
            if job.index in finished_instead:
                continue  # it finished before it could be stopped: nothing to move
            self._launch(job, m.placement, now, migrating=True)
        for s in decision.starts:
            job = self._lookup(s.job_id)
            self._launch(job, s.placement, now, migrating=False)
        for timer in decision.timers:
            if timer.at_s < decided_at:
                raise PolicyError(
                    name,
                    None,
                    f"timer {timer.key!r} set for {timer.at_s} s, before now ({decided_at} s)",
                )
            self._timer_seq += 1
            heapq.heappush(self.timers, (float(timer.at_s), self._timer_seq, timer.key))
        for key, value in decision.telemetry:
            if self._telemetry_last.get(key) != value:  # a step function: record changes only
                self._telemetry_last[key] = value
                self.timeline.telemetry.append((decided_at, key, value))

    def _segment_of(self, job_id: str, verb: str) -> Segment:
        job = self.by_id.get(job_id)
        if job is None or job.index not in self.running:
            state = "not in the trace" if job is None else _STATE_WORDS[job.state]
            raise PolicyError(
                self.policy.name,
                job_id,
                f"cannot {verb} it: the job is {state}, only a running job can",
            )
        return self.running[job.index]

    def _lookup(self, job_id: str) -> Job:
        job = self.by_id.get(job_id)
        if job is None or job.state != JobState.QUEUED:
            state = "not in the trace" if job is None else _STATE_WORDS[job.state]
            raise PolicyError(
                self.policy.name,
                job_id,
                f"cannot start it: the job is {state}, only a queued job can",
            )
        return job

    # --- carrying decisions out ----------------------------------------------------------------

    def _stop_segments(self, stopping: list[tuple[Segment, str]]) -> set[int]:
        """Ask every process of these segments to stop, wait for their checkpoints, and account
        for each (a job that finished meanwhile finishes). Returns the jobs that finished."""
        for segment, _ in stopping:
            for node_slot in segment.executors:
                self.executors[node_slot].stop.remote(segment.segment_id)
        finished: set[int] = set()
        for segment, verb in stopping:
            # A failure here is seen again by _ended, which requeues the job.
            with contextlib.suppress(RayError, GetTimeoutError):
                ray.get(segment.refs, timeout=STOP_GRACE_S)
            at = self.now()
            job = segment.job
            outcome = self._ended(segment, at, moving=verb)
            if outcome == "finished":
                finished.add(job.index)
        return finished

    def _launch(self, job: Job, placement: Placement, now: float, *, migrating: bool) -> None:
        placement = check_placement(self.policy.name, job, placement, self.cluster)
        for node, _ in placement:
            if node in self.down:
                raise PolicyError(self.policy.name, job.job_id, f"node {node} has left the cluster")
        self.cluster.allocate(job, placement)
        if migrating:
            job.migrations += 1
            self.migrations += 1
        else:
            del self.queued[job.index]
            job.queued_total_s += now - job.queued_since_s
            if job.first_start_s < 0:
                job.first_start_s = now
        job.state = JobState.RUNNING
        job.placement = placement
        job.changed_s = now
        record = self.records[job.job_id]
        record.placements.append(placement_text(placement))
        record.start_progress.append(job.done_iters / job.work_iters if job.work_iters else 0.0)
        executors = [
            (node, self.free_slots[node].pop(0)) for node, k in placement for _ in range(k)
        ]
        iteration_s = self._place_on_links(job, placement)
        segment = Segment(
            job=job,
            placement=placement,
            executors=executors,
            refs=[],
            began_wall=time.monotonic(),
            start_iteration=job.done_iters / record.scale if record.scale else 0.0,
            segment_id=f"{job.job_id}#{len(record.placements)}",
            iteration_s=iteration_s,
        )
        self.running[job.index] = segment
        self._begin(segment)

    def _begin(self, segment: Segment) -> None:
        job = segment.job
        record = self.records[job.job_id]
        assert record.work is not None
        first = segment.executors[0]
        try:
            port = ray.get(self.executors[first].open_port.remote(), timeout=STOP_GRACE_S)
        except (RayError, GetTimeoutError) as exc:
            self._failed_start(segment, first, exc)
            return
        held = self.store.load.remote(job.job_id) if job.done_iters > 0 else None
        device = (
            "cuda" if self.live.nodes[first[0]].uses_gpus and not record.work.emulated else "cpu"
        )
        for rank, node_slot in enumerate(segment.executors):
            plan = SegmentPlan(
                work=record.work,
                rank=rank,
                world_size=len(segment.executors),
                master_addr=self.node_address[first[0]],
                master_port=port,
                iteration_wall_s=self._wall(segment.iteration_s),
                step_wall_s=self.config.step_wall_s,
                checkpoint_every_s=self.config.checkpoint_every_s,
                join_timeout_s=self.config.join_timeout_s,
                device=device,
            )
            segment.refs.append(
                self.executors[node_slot].run.remote(segment.segment_id, plan, held)
            )

    def _failed_start(self, segment: Segment, node_slot: tuple[int, int], exc: Exception) -> None:
        """Rank 0's executor did not answer before the segment began (its process or node is
        gone): the job goes back to the queue as it was, the executor is replaced."""
        job = segment.job
        self._release(segment)
        self._job_failed(job, f"could not start: {_first_line(exc)}", progressed=False, own=False)
        self._replace_executor(node_slot, node_gone=_node_died(exc))

    def _job_failed(self, job: Job, reason: str, *, progressed: bool, own: bool) -> None:
        """Count a failed segment of ``job`` and send the job back to the queue, or give it up
        after ``max_failures`` failures of its own in a row with no checkpoint gained (a job
        that cannot run must not hold GPUs in a loop of restarts)."""
        record = self.records[job.job_id]
        self.failures += 1
        record.failures += 1
        record.error = reason
        record.failed_in_a_row = 0 if progressed else record.failed_in_a_row + int(own)
        if record.failed_in_a_row >= self.config.max_failures:
            record.given_up = True
            job.state = JobState.PENDING  # neither queued nor running: out of the run
            job.placement = ()
            self.log(
                f"job {job.job_id}: gave up after {record.failed_in_a_row} failures in a row "
                f"({reason})"
            )
            return
        self.log(f"job {job.job_id}: a process failed ({reason}); back to the queue")
        self._requeue(job, self.now(), preempted=False)

    def _place_on_links(self, job: Job, placement: Placement) -> float:
        """Put the job's flow on the shared links and re-share them: returns its own iteration
        time (trace seconds) and updates the jobs whose share changed."""
        flow = self.speed.flow(job.model, job.num_gpus, placement)
        if flow is not None:
            self.net.add(job.index, flow)
        self._reshare(exclude=job.index)
        rate = self.net.rate(job.index)
        iteration_s = self.speed.iter_s(job.model, job.num_gpus, placement, rate)
        job.iter_s = iteration_s
        job.base_iter_s = self._base_iter_s(job, placement)
        return iteration_s

    def _base_iter_s(self, job: Job, placement: Placement) -> float:
        if self.speed.heterogeneous:
            return self.speed.base_iter_s(job.model, job.num_gpus, placement)
        return job.cons_iter_s

    def _reshare(self, exclude: int | None = None) -> None:
        """New shares of the links: running jobs whose iteration time changed are told so."""
        changed = self.net.recompute()
        for index, rate in changed.items():
            segment = self.running.get(index)
            if segment is None or index == exclude:
                continue
            job = segment.job
            iteration_s = self.speed.iter_s(job.model, job.num_gpus, segment.placement, rate)
            if iteration_s == segment.iteration_s:
                continue
            segment.iteration_s = iteration_s
            job.iter_s = iteration_s
            if self.config.emulated:
                wall = self._wall(iteration_s)
                for node_slot in segment.executors:
                    self.executors[node_slot].set_iteration_wall_s.remote(segment.segment_id, wall)

    def _release(self, segment: Segment) -> None:
        job = segment.job
        del self.running[job.index]
        self.cluster.release(segment.placement)
        for node, slot in segment.executors:
            if node not in self.down:
                self.free_slots[node].append(slot)
                self.free_slots[node].sort()
        if job.index in self.net._pairs:
            self.net.remove(job.index)
        self._reshare()

    # --- segments that ended -----------------------------------------------------------------

    def _ended(self, segment: Segment, now: float, moving: str | None = None) -> str:
        """Account for a segment whose processes returned: ``"finished"``, ``"stopped"`` (for a
        preemption or migration) or ``"failed"`` (a process died or raised)."""
        job = segment.job
        record = self.records[job.job_id]
        outcomes: list[SegmentOutcome] = []
        error: BaseException | None = None
        dead: list[tuple[int, int]] = []
        gone: set[int] = set()  # nodes whose death Ray reported with an executor's
        for node_slot, ref in zip(segment.executors, segment.refs, strict=True):
            # Once one process has failed the others are waiting in a collective that will
            # not complete: they get a short grace to notice, then they are replaced.
            grace = self.config.join_timeout_s if error is None else FAILED_PEER_GRACE_S
            try:
                outcomes.append(ray.get(ref, timeout=grace))
            except RayActorError as exc:
                dead.append(node_slot)
                error = error or exc
                if _node_died(exc):
                    gone.add(node_slot[0])
            except (RayError, GetTimeoutError) as exc:
                # A process that lost its peer reports that; the one that failed first says why.
                if error is None or _peer_gone(error):
                    error = exc
                if isinstance(exc, GetTimeoutError):
                    dead.append(node_slot)  # stuck: it is replaced
        self._release(segment)
        job.attained_gpu_s += (now - job.changed_s) * job.num_gpus
        job.changed_s = now
        if error is None:
            record.failed_in_a_row = 0
            first = outcomes[0]
            self._account_times(record, outcomes, segment)
            record.behind_s += max(o.behind_s for o in outcomes) * self.config.speedup
            done = first.iteration * record.scale
            if self.config.emulated:
                # Time beyond what the iterations take at the consolidated placement: the
                # simulator's communication overhead (real compute on other hardware than
                # the perf model's has no such baseline). The time the steps were scheduled
                # to take (the perf model's, links shared as they were), not the wall time:
                # the emulation's own latencies (its all-reduces, the last step's overrun;
                # milliseconds a segment, times the speedup) are no communication of the job.
                run_s = max(o.scheduled_s for o in outcomes) * self.config.speedup
                job.comm_overhead_s += max(0.0, run_s - (done - job.done_iters) * job.base_iter_s)
            job.done_iters = done
            if first.finished:
                self._finish(job, now)
                return "finished"
            if moving == "preempt":
                self._requeue(job, now, preempted=True)
            elif moving is None:
                # Stopped without being asked (cannot happen): back to the queue.
                self._requeue(job, now, preempted=False)
            return "stopped"
        # A process died or failed: the job goes back to the queue from its last checkpoint.
        for node_slot in dead:
            self._replace_executor(node_slot, node_gone=node_slot[0] in gone)
        held = ray.get(self.store.iteration.remote(job.job_id))
        job.done_iters = held * record.scale
        # A failure of the node is not the job's: only its own failures count towards giving up.
        own = not gone
        self._job_failed(
            job, _first_line(error), progressed=held > segment.start_iteration, own=own
        )
        return "failed"

    def _account_times(
        self, record: JobRecord, outcomes: list[SegmentOutcome], segment: Segment
    ) -> None:
        """A segment's cost beyond its training, as the driver saw it: from the call that
        started it to the moment it was seen to end, less the steps (handing the call over,
        joining the group, building the model or restoring the checkpoint, the final
        checkpoint, reporting back). The first segment's is the job's start-up, a later one's
        its restore."""
        speedup = self.config.speedup
        elapsed = time.monotonic() - segment.began_wall
        setup = max(0.0, elapsed - max(o.train_s for o in outcomes)) * speedup
        if math.isnan(record.startup_s):
            record.startup_s = setup
        else:
            record.restore_s.append(setup)
        if not outcomes[0].finished:
            record.checkpoint_s.append(max(o.save_s for o in outcomes) * speedup)

    def _finish(self, job: Job, now: float) -> None:
        self.finished_since_round.append(job.make_view(False))
        job.state = JobState.DONE
        job.finish_s = now
        job.done_iters = job.work_iters
        # The placement stays, as in the simulator: the job table names the GPU type it ended on.
        if self.on_finish is not None:
            self.on_finish(1)

    def _requeue(self, job: Job, now: float, *, preempted: bool) -> None:
        job.state = JobState.QUEUED
        job.placement = ()
        job.queued_since_s = now
        if preempted:
            job.preemptions += 1
            self.preemptions += 1
        self.queued[job.index] = job

    def _arrive(self, job: Job) -> None:
        job.state = JobState.QUEUED
        job.queued_since_s = job.submit_s
        job.changed_s = job.submit_s
        self.queued[job.index] = job

    # --- faults --------------------------------------------------------------------------------

    def _replace_executor(self, node_slot: tuple[int, int], *, node_gone: bool = False) -> None:
        """A new process for a GPU whose executor died or hung; none when its node is gone
        (Ray said so with the executor's death, or no longer lists the node as alive: Ray
        notices a node's death only after missing heartbeats)."""
        node, slot = node_slot
        old = self.executors.pop(node_slot, None)
        if old is not None:
            ray.kill(old, no_restart=True)
        if node in self.down:
            return
        if node_gone or not self._node_alive(node):
            self._withdraw(node)
            return
        # Not waited for: the slot is free at once, and a segment placed on it begins when its
        # process is up (its start-up counts that wait). A process that cannot start fails
        # that segment, which brings the node's state back here.
        self.executors[node_slot] = self._new_executor(node, slot)

    def _node_alive(self, node: int) -> bool:
        wanted = self.live.nodes[node].ray_node_id
        return any(n["NodeID"] == wanted and n["Alive"] for n in ray.nodes())

    def _withdraw(self, node: int) -> None:
        """A node that left: its GPUs are taken from the policies' view for good."""
        if node in self.down:
            return
        self.down.add(node)
        self.nodes_lost.append(node)
        self.log(f"node {node} left the cluster: its GPUs are withdrawn")
        # Jobs still on it fail on their own (their processes are gone); then its GPUs go.
        for segment in [s for s in self.running.values() if any(n == node for n, _ in s.placement)]:
            self._ended(segment, self.now())
        free = self.cluster.free_by_node[node]
        self.cluster.free_by_node[node] = 0
        self.cluster.free_by_rack[self.layout.node_rack[node]] -= free
        self.free_slots[node] = []
        for key in [k for k in self.executors if k[0] == node]:
            ray.kill(self.executors.pop(key), no_restart=True)
        if len(self.down) == len(self.live.nodes):
            raise LiveRunError("every node of the cluster has left")

    def _stop_everything(self) -> None:
        for segment in self.running.values():
            for node_slot in segment.executors:
                handle = self.executors.get(node_slot)
                if handle is not None:
                    handle.stop.remote(segment.segment_id)
        refs = [ref for segment in self.running.values() for ref in segment.refs]
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=10)

    # --- results -------------------------------------------------------------------------------

    def _sample(self, now: float) -> None:
        tl = self.timeline
        tl.time_s.append(now)
        tl.busy_gpus.append(self.cluster.used_gpus)
        tl.queued.append(len(self.queued))
        tl.congestion.append(0.0)

    def _outcome(self, *, interrupted: bool) -> LiveOutcome:
        return LiveOutcome(
            engine=EngineOutcome(
                jobs=self.jobs,
                timeline=self.timeline,
                events=self.events,
                rounds=self.rounds,
                preemptions=self.preemptions,
                migrations=self.migrations,
            ),
            records=self.records,
            rounds=self.round_records,
            executor_start_wall_s=self.executor_start_wall_s,
            failures=self.failures,
            nodes_lost=list(self.nodes_lost),
            interrupted=interrupted,
        )

    def final_checkpoint(self, job_id: str) -> bytes | None:
        """The checkpoint a finished job left (its final state), if the store still holds it."""
        held = ray.get(self.store.load.remote(job_id))
        return held[1] if held is not None else None

    def _policy_failed(self, exc: Exception) -> PolicyCrashError:
        return policy_crash(self.policy, exc)


_STATE_WORDS = {
    JobState.PENDING: "not yet submitted",
    JobState.QUEUED: "queued",
    JobState.RUNNING: "running",
    JobState.DONE: "finished",
}


def _peer_gone(exc: BaseException) -> bool:
    """Whether a process failed only because another process of its job had gone."""
    text = str(exc)
    return "Connection closed by peer" in text or "Connection reset by peer" in text


def _node_died(exc: BaseException) -> bool:
    """Whether Ray gave a node's death as the reason an executor died, or its process cannot
    be reached at all (a node that has gone, before Ray's heartbeats notice)."""
    text = str(exc)
    return any(
        sign in text
        for sign in ("node has died", "node was terminated", "failed to connect to all addresses")
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[-1] if text else type(exc).__name__
