"""The live driver: the scheduling core's clock and executor on a Ray cluster.

The clock is the wall clock times ``speedup`` (:class:`~unstall.live.clock.WallClock`); it waits
for the next arrival, timer or tick, or for a job's processes to return. A job progresses in its
executors, not by arithmetic: a segment is the job's run on one placement, one process per GPU;
it ends when its processes return (finished, stopped as asked, or failed). Preemptions and
migrations stop their segments together (every process stops after the same step; rank 0
checkpoints), then migrations and starts begin new ones, so a decision's starts may use the GPUs
its preemptions free, as in the simulator. Links are shared as the simulator shares them, and an
emulated job is told its new iteration time when its share changes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Sequence

import ray
from ray.exceptions import GetTimeoutError, RayError

from unstall.live.clock import WallClock
from unstall.live.config import LiveConfig
from unstall.live.pool import ExecutorPool, LiveRunError, NodeSlot, last_line
from unstall.live.segments import (
    Ended,
    JobRecord,
    Segment,
    any_failed,
    gather,
    node_died,
)
from unstall.live.training import SegmentOutcome, SegmentPlan
from unstall.loop import (
    NOTHING,
    Collected,
    Job,
    SchedulingCore,
    StopOutcome,
    placement_text,
)
from unstall.loop.driver import StopVerb
from unstall.sched.base import JobView, Placement
from unstall.sim import NetworkState, PerfSpeedModel

# Seconds a stopping job's processes get to finish their step and checkpoint before they are
# counted as failed (an emulated step is short; a real one can be a few seconds on a CPU).
STOP_GRACE_S = 120.0
# How long the loop sleeps at most between looks at its executors while nothing is due.
POLL_S = 0.5


class LiveDriver:
    """The clock and executor of a live run (see the module docstring)."""

    def __init__(
        self,
        core: SchedulingCore,
        *,
        pool: ExecutorPool,
        clock: WallClock,
        speed: PerfSpeedModel,
        config: LiveConfig,
        records: dict[str, JobRecord],
        on_finish: Callable[[int], None] | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.core = core
        self.pool = pool
        self.clock = clock
        self.speed = speed
        self.config = config
        self.records = records
        self.on_finish = on_finish
        self.log = log or (lambda _text: None)
        self.net = NetworkState(speed.capacity)
        self.segments: dict[int, Segment] = {}
        self.nodes_lost: list[int] = []
        self._ended: list[Segment] = []

    # --- the clock -----------------------------------------------------------------------------

    def next_instant(self, due_s: float, until_s: float) -> float:
        core = self.core
        # Done when nothing is left to run: the policy's timers alone would keep the cluster
        # waiting for nothing (the simulator passes over them at no cost).
        if not (self.segments or core.queued) and core.arrivals_left == 0:
            return math.inf
        if due_s == math.inf and not self.segments:
            return math.inf  # jobs wait that the policy will never start: as in the simulator
        now = self.clock.now()
        wait = max(0.0, self.clock.wall(due_s - now)) if due_s < math.inf else POLL_S
        self._ended = self._wait(min(wait, POLL_S))
        return self.clock.now()

    def now(self) -> float:
        return self.clock.now()

    def congestion(self) -> float:
        return 0.0  # live runs have no background congestion

    def _wait(self, timeout_wall: float) -> list[Segment]:
        """The segments whose every process has returned (finished, stopped or failed)."""
        refs = [ref for segment in self.segments.values() for ref in segment.refs]
        if not refs:
            time.sleep(timeout_wall)
            return []
        ray.wait(refs, num_returns=1, timeout=timeout_wall)
        ended = []
        for segment in list(self.segments.values()):
            ready, _ = ray.wait(segment.refs, num_returns=len(segment.refs), timeout=0)
            if len(ready) == len(segment.refs):
                ended.append(segment)
            elif ready and any_failed(ready):
                # One process is gone: the others stop at their next collective, with an error.
                ended.append(segment)
        return ended

    # --- what happened --------------------------------------------------------------------------

    def collect(self, now: float) -> Collected:
        ended, self._ended = self._ended, []
        for segment in ended:
            if self.segments.get(segment.job.index) is segment:  # not ended by a node's loss
                self._settle(segment, now, None)
        return Collected(wake=True, events=len(ended)) if ended else NOTHING

    def _settle(self, segment: Segment, now: float, verb: StopVerb | None) -> StopOutcome:
        """A segment that ended by itself: the core is told how, then dead processes are
        replaced (which may find that their node has gone)."""
        ended = gather(segment, self.config.join_timeout_s)
        outcome = self._account(segment, ended, now, verb)
        self.core.settle(segment.job, outcome)
        self._after(outcome, segment)
        self._replace_dead(ended)
        return outcome

    def before_round(self, now: float) -> None:
        if not self.core.oracle:
            return
        # An oracle's remaining work, from the progress the running segment is predicted to
        # have made (the executors report only when a segment ends).
        for job in [*self.core.queued.values(), *self.core.running.values()]:
            self.core.set_view(job, self._oracle_view(job, now))

    def _oracle_view(self, job: Job, now: float) -> JobView:
        done = job.done_iters
        segment = self.segments.get(job.index)
        if segment is not None and job.iter_s > 0:
            done = (
                segment.start_iteration * self.records[job.job_id].scale
                + max(0.0, now - job.changed_s) / job.iter_s
            )
        remaining = max(0.0, job.work_iters - done) * job.cons_iter_s
        return dataclasses.replace(
            job.make_view(False),
            oracle_remaining_s=remaining,
            oracle_rate=job.cons_iter_s / job.iter_s if job.iter_s > 0 else 0.0,
            oracle_resume_s=now,
        )

    def close_instant(self, now: float) -> None:
        pass  # links are re-shared as jobs come and go

    # --- carrying decisions out ---------------------------------------------------------------

    def stopping(self, jobs: Sequence[Job]) -> None:
        """Ask every process of these jobs to stop after its current step."""
        for job in jobs:
            segment = self.segments[job.index]
            for node_slot in segment.executors:
                self.pool[node_slot].stop.remote(segment.segment_id)

    def stop(self, job: Job, now: float, verb: StopVerb) -> StopOutcome:
        """Wait for the job's checkpoint; the core then requeues, moves or ends it."""
        segment = self.segments[job.index]
        # A failure here is seen again below, which fails the job.
        with contextlib.suppress(RayError, GetTimeoutError):
            ray.get(segment.refs, timeout=STOP_GRACE_S)
        ended = gather(segment, self.config.join_timeout_s)
        outcome = self._account(segment, ended, self.clock.now(), verb)
        self._after(outcome, segment)
        self._replace_dead(ended)
        return outcome

    def launch(self, job: Job, placement: Placement, now: float, *, migrating: bool) -> None:
        record = self.records[job.job_id]
        record.placements.append(placement_text(placement))
        record.start_progress.append(job.done_iters / job.work_iters if job.work_iters else 0.0)
        segment = Segment(
            job=job,
            placement=placement,
            executors=self.pool.take(placement),
            refs=[],
            began_wall=time.monotonic(),
            start_iteration=job.done_iters / record.scale if record.scale else 0.0,
            segment_id=f"{job.job_id}#{len(record.placements)}",
            iteration_s=self._place_on_links(job, placement),
            began_s=now,
        )
        self.segments[job.index] = segment
        self._begin(segment)

    def _begin(self, segment: Segment) -> None:
        job = segment.job
        record = self.records[job.job_id]
        assert record.work is not None
        first = segment.executors[0]
        try:
            port = ray.get(self.pool[first].open_port.remote(), timeout=STOP_GRACE_S)
        except (RayError, GetTimeoutError) as exc:
            # Rank 0's executor did not answer (its process or node is gone): the job goes back
            # to the queue as it was, the executor is replaced.
            self._free(segment)
            reason = f"could not start: {last_line(exc)}"
            self.core.fail(job, self.clock.now(), reason, progressed=False, own=False)
            self._replace(first, node_gone=node_died(exc))
            return
        held = self.pool.store.load.remote(job.job_id) if job.done_iters > 0 else None
        on_gpu = self.pool.cluster.nodes[first[0]].uses_gpus and not record.work.emulated
        for rank, node_slot in enumerate(segment.executors):
            plan = SegmentPlan(
                work=record.work,
                rank=rank,
                world_size=len(segment.executors),
                master_addr=self.pool.node_address[first[0]],
                master_port=port,
                iteration_wall_s=self.clock.wall(segment.iteration_s),
                step_wall_s=self.config.step_wall_s,
                checkpoint_every_s=self.config.checkpoint_every_s,
                join_timeout_s=self.config.join_timeout_s,
                device="cuda" if on_gpu else "cpu",
            )
            segment.refs.append(self.pool[node_slot].run.remote(segment.segment_id, plan, held))

    # --- links ---------------------------------------------------------------------------------

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
        if self.speed.heterogeneous:
            job.base_iter_s = self.speed.base_iter_s(job.model, job.num_gpus, placement)
        else:
            job.base_iter_s = job.cons_iter_s
        return iteration_s

    def _reshare(self, exclude: int | None = None) -> None:
        """New shares of the links: running jobs whose iteration time changed are told so."""
        for index, rate in self.net.recompute().items():
            segment = self.segments.get(index)
            if segment is None or index == exclude:
                continue
            job = segment.job
            iteration_s = self.speed.iter_s(job.model, job.num_gpus, segment.placement, rate)
            if iteration_s == segment.iteration_s:
                continue
            segment.iteration_s = iteration_s
            job.iter_s = iteration_s
            if self.config.emulated:
                wall = self.clock.wall(iteration_s)
                for node_slot in segment.executors:
                    self.pool[node_slot].set_iteration_wall_s.remote(segment.segment_id, wall)

    def _free(self, segment: Segment) -> None:
        """The segment's processes and link share are free again."""
        job = segment.job
        del self.segments[job.index]
        self.pool.give_back(segment.executors)
        self.net.remove(job.index)
        self._reshare()

    # --- segments that ended -----------------------------------------------------------------

    def _account(
        self, segment: Segment, ended: Ended, now: float, verb: StopVerb | None
    ) -> StopOutcome:
        """The segment's progress and how it ended (the job's GPUs are the core's to free)."""
        job = segment.job
        record = self.records[job.job_id]
        self._free(segment)
        if ended.error is not None:
            # A process died or failed: the job goes back from its last checkpoint. A failure
            # of the node is not the job's: only its own count towards giving up.
            held = self.pool.held_iteration(job.job_id)
            job.done_iters = held * record.scale
            return StopOutcome(
                kind="failed",
                at_s=now,
                reason=last_line(ended.error),
                progressed=held > segment.start_iteration,
                own=not ended.gone,
            )
        outcomes = ended.outcomes
        first = outcomes[0]
        self._account_times(record, outcomes, segment)
        record.behind_s += self.clock.trace(max(o.behind_s for o in outcomes))
        done = first.iteration * record.scale
        if self.config.emulated:
            # Time beyond what the iterations take at the consolidated placement: the
            # simulator's communication overhead. The time the steps were scheduled to take
            # (the perf model's, links shared as they were), not the wall time: the emulation's
            # own latencies (its all-reduces, the last step's overrun) are no communication.
            run_s = self.clock.trace(max(o.scheduled_s for o in outcomes))
            job.comm_overhead_s += max(0.0, run_s - (done - job.done_iters) * job.base_iter_s)
        job.done_iters = done
        return StopOutcome(kind="finished" if first.finished else "stopped", at_s=now)

    def _account_times(
        self, record: JobRecord, outcomes: list[SegmentOutcome], segment: Segment
    ) -> None:
        """A segment's cost beyond its training, as the driver saw it: from the call that
        started it to the moment it was seen to end, less the steps (handing the call over,
        joining the group, building the model or restoring the checkpoint, the final
        checkpoint, reporting back). The first segment's is the job's start-up, a later one's
        its restore."""
        elapsed = time.monotonic() - segment.began_wall
        setup_wall = max(0.0, elapsed - max(o.train_s for o in outcomes))
        setup = self.clock.trace(setup_wall)
        restoring = not math.isnan(record.startup_s)
        if restoring:
            record.restore_s.append(setup)
        else:
            record.startup_s = setup
        record.setups.append((segment.placement, setup_wall, restoring, segment.began_s))
        if not outcomes[0].finished:
            record.checkpoint_s.append(self.clock.trace(max(o.save_s for o in outcomes)))

    def _after(self, outcome: StopOutcome, segment: Segment) -> None:
        if outcome.kind == "finished" and self.on_finish is not None:
            self.on_finish(1)

    # --- faults --------------------------------------------------------------------------------

    def _replace_dead(self, ended: Ended) -> None:
        for node_slot in ended.dead:
            self._replace(node_slot, node_gone=node_slot[0] in ended.gone)

    def _replace(self, node_slot: NodeSlot, *, node_gone: bool) -> None:
        if not self.pool.replace(node_slot, node_gone=node_gone):
            self._withdraw(node_slot[0])

    def _withdraw(self, node: int) -> None:
        """A node that left: its GPUs are taken from the policies' view for good."""
        if node in self.pool.down:
            return
        self.nodes_lost.append(node)
        self.log(f"node {node} left the cluster: its GPUs are withdrawn")
        self.pool.down.add(node)
        # Jobs still on it fail on their own (their processes are gone); then its GPUs go.
        on_node = [s for s in self.segments.values() if any(n == node for n, _ in s.placement)]
        for segment in on_node:
            self._settle(segment, self.clock.now(), None)
        self.core.withdraw_node(node)
        self.pool.withdraw(node)
        if len(self.pool.down) == len(self.pool.cluster.nodes):
            raise LiveRunError("every node of the cluster has left")

    def stop_everything(self) -> None:
        """Stop every running segment (a Ctrl-C): each process checkpoints and returns."""
        for segment in self.segments.values():
            for node_slot in segment.executors:
                handle = self.pool.get(node_slot)
                if handle is not None:
                    handle.stop.remote(segment.segment_id)
        refs = [ref for segment in self.segments.values() for ref in segment.refs]
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=10)
