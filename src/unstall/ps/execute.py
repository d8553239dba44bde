"""Carrying a run out on Ray, and carrying it on when an actor dies.

A run goes in segments: a segment starts a :class:`~unstall.ps.coordinator.PSCluster` from a
:class:`RunState` (the parameters and optimizer state, the placement, the servers, the batches
recorded so far) and runs iterations until the end or until a worker or server process dies.
With recovery on (``max_recoveries`` > 0), the state is snapshotted every ``snapshot_every``
iterations (the servers' state gathered to the driver: a transfer of everything they own), so a
run that loses an actor starts a new segment from the last snapshot with fresh actors and
re-runs the iterations since (at most ``snapshot_every``, the interrupted one included); the
step being exact on any placement and the batches a function of the iteration, the result is
the one an unstopped run gives. Without recovery a dead actor ends the run with one line naming
it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from unstall.ps.checkpoint import PSCheckpoint
from unstall.ps.config import RecoveryConfig, RuntimeConfig
from unstall.ps.coordinator import IterationTelemetry, PSCluster
from unstall.ps.elastic import Controller, WarmStarter, Watcher
from unstall.ps.errors import PSActorDiedError
from unstall.ps.optim import ServerOptimizer
from unstall.ps.replica import TrainingJob
from unstall.ps.runtime import ActorPool
from unstall.ps.scenarios import Scenario
from unstall.workload.named import label_of
from unstall.workload.zoo_jobs import Batch


@dataclass(frozen=True, kw_only=True)
class Recovery:
    """A lost actor that the run survived: the iteration it interrupted, the error, the
    iteration the run started again from, and the seconds from the failure to going on."""

    iteration: int
    failure: str
    restarted_at: int
    seconds: float


@dataclass(frozen=True, kw_only=True)
class Segment:
    """What the segments of a run need besides the state: the job, its optimizer and
    scenario, the run's length, and the config's sections on how to exchange (``runtime``) and
    checkpoint and recover (``recovery``), handed on whole."""

    job: TrainingJob
    optimizer: ServerOptimizer
    scenario: Scenario
    first_iteration: int
    iterations: int
    chunks: Sequence[Any]
    has_buffers: bool
    check_reference: bool
    runtime: RuntimeConfig
    recovery: RecoveryConfig


@dataclass(kw_only=True)
class RunState:
    """Where a run stands, in the driver: the start of the next segment."""

    iteration: int
    params: Sequence[np.ndarray]
    slots: Sequence[Sequence[np.ndarray]] | None
    buffers: dict[str, Any]
    owner: dict[int, int]
    servers: tuple[int, ...]
    batches: list[list[Batch]]
    telemetry: list[IterationTelemetry] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class Finished:
    """A run's last segment, gathered: parameters, ownership, batches, buffers, nodes."""

    params: list[np.ndarray]
    owned: dict[int, int]
    batches: list[list[Batch]]
    buffers: dict[str, Any]
    nodes: dict[str, str]
    telemetry: list[IterationTelemetry]
    checkpoints: int
    recoveries: tuple[Recovery, ...]


def run_segments(
    seg: Segment,
    state: RunState,
    pool: ActorPool,
    controller: Controller | None,
    progress: Callable[[int], None] | None,
    on_checkpoint: Callable[[PSCheckpoint], None] | None,
) -> Finished:
    """Run from ``state`` to the end, starting again from the last snapshot after a dead
    actor, at most ``seg.recovery.max_recoveries`` times."""
    recoveries: list[Recovery] = []
    saved = 0
    reported = state.iteration

    def report(iteration: int) -> None:
        """``progress`` once per iteration: not again for those re-run after a recovery."""
        nonlocal reported
        if progress is not None and iteration >= reported:
            reported = iteration + 1
            progress(1)

    nodes: dict[str, str] = {}
    failure: tuple[int, str, float] | None = None  # (iteration, error, when) of the last loss
    # The controller places the chunks itself before the run's first iteration (once: a
    # restarted segment goes on from the placement of its snapshot).
    place = controller.warm_start if isinstance(controller, WarmStarter) else None
    while True:
        cluster = _start(seg, state, pool, place)
        place = None
        if failure is not None:  # going on again: the recovery took until now
            lost, error, failed_at = failure
            seconds = time.perf_counter() - failed_at
            recoveries.append(
                Recovery(
                    iteration=lost, failure=error, restarted_at=state.iteration, seconds=seconds
                )
            )
            failure = None
        snapshots = _Snapshots(seg, cluster, state, on_checkpoint)
        try:
            _iterate(seg, cluster, state, controller, report, snapshots)
            finished = _gather(seg, cluster, state)
        except PSActorDiedError as exc:
            failure = (cluster.iteration, str(exc), time.perf_counter())
            cluster.close(failed=True)
            saved += snapshots.saved
            nodes.update(cluster.nodes)
            if len(recoveries) >= seg.recovery.max_recoveries:
                raise
            del state.telemetry[state.iteration - seg.first_iteration :]
            continue
        except BaseException:
            cluster.close(failed=True)
            raise
        cluster.close()
        nodes.update(cluster.nodes)
        return Finished(
            **finished,
            nodes=nodes,
            telemetry=state.telemetry,
            checkpoints=saved + snapshots.saved,
            recoveries=tuple(recoveries),
        )


def _start(
    seg: Segment,
    state: RunState,
    pool: ActorPool,
    place: Callable[[PSCluster], Mapping[int, int]] | None = None,
) -> PSCluster:
    """A cluster at ``state``: workers set up to go on at its iteration, its servers (with
    their ids) holding its chunks (where ``place``, a warm start, puts them, if given)."""
    cluster = PSCluster(
        seg.job,
        seg.optimizer,
        pool,
        timeout_s=seg.runtime.timeout_s,
        piece_bytes=seg.runtime.piece_bytes,
        step_threads=seg.runtime.step_threads,
        start_iteration=state.iteration,
        buffers=state.buffers,
    )
    try:
        specs = [seg.scenario.spec(s, state.iteration, seg.iterations) for s in state.servers]
        cluster.start(
            seg.chunks, state.owner, specs, state.params, state.slots, state.servers, place
        )
    except BaseException:
        cluster.close(failed=True)
        raise
    return cluster


def _iterate(
    seg: Segment,
    cluster: PSCluster,
    state: RunState,
    controller: Controller | None,
    report: Callable[[int], None],
    snapshots: _Snapshots,
) -> None:
    n = seg.iterations
    boundary_s = 0.0
    first = state.iteration  # (a snapshot moves ``state.iteration`` on as the loop goes)
    watcher = controller if isinstance(controller, Watcher) else None
    for iteration in range(first, n):
        started = time.perf_counter()
        if iteration == first:  # the servers started with this iteration's specs
            _set_specs(seg, cluster, iteration)
        tripwire = None if watcher is None else watcher.tripwire(cluster, iteration)
        boundary_s += time.perf_counter() - started
        step = cluster.step(iteration, tripwire)
        state.telemetry.append(dataclasses.replace(step, boundary_s=boundary_s))
        started = time.perf_counter()
        # The scenario's conditions of the next iteration come into force at the boundary,
        # before the controller acts (a probe there sees them; the iterations' samples only
        # after the next iteration).
        if iteration + 1 < n:
            _set_specs(seg, cluster, iteration + 1)
        if controller is not None:
            controller(cluster, step)
        boundary_s = time.perf_counter() - started
        snapshots.after(iteration)
        report(iteration)


def _set_specs(seg: Segment, cluster: PSCluster, iteration: int) -> None:
    for sid in list(cluster.servers):
        cluster.set_spec(sid, seg.scenario.spec(sid, iteration, seg.iterations))


def _gather(seg: Segment, cluster: PSCluster, state: RunState) -> dict[str, Any]:
    batches = state.batches
    if seg.check_reference:
        batches = _joined(batches, cluster.batches())
    return {
        "params": cluster.params(),
        "owned": cluster.owned_bytes(),
        "batches": batches,
        "buffers": cluster.buffers() if seg.has_buffers else {},
    }


def _joined(before: list[list[Batch]], after: list[list[Batch]]) -> list[list[Batch]]:
    """Each rank's batches recorded before a snapshot, then after it."""
    if not before:
        return after
    return [b + a for b, a in zip(before, after, strict=True)]


class _Snapshots:
    """After every iteration: the caller's checkpoint when one is due (every
    ``checkpoint_every`` iterations and after the last), and with recovery on, every
    ``snapshot_every`` iterations, the state a restart goes on from."""

    def __init__(
        self,
        seg: Segment,
        cluster: PSCluster,
        state: RunState,
        on_checkpoint: Callable[[PSCheckpoint], None] | None,
    ) -> None:
        self.seg, self.cluster, self.state = seg, cluster, state
        self.on_checkpoint = on_checkpoint
        self.saved = 0

    def after(self, iteration: int) -> None:
        done = iteration + 1
        every = self.seg.recovery.checkpoint_every
        due = (
            every is not None
            and self.on_checkpoint is not None
            and (done % every == 0 or done == self.seg.iterations)
        )
        # A checkpoint gathers the state anyway: a snapshot then costs nothing more.
        keep = (
            self.seg.recovery.max_recoveries > 0
            and done < self.seg.iterations
            and (done % self.seg.recovery.snapshot_every == 0 or due)
        )
        if not (due or keep):
            return
        checkpoint = self._checkpoint(done)
        if due and self.on_checkpoint is not None:
            self.on_checkpoint(checkpoint)
            self.saved += 1
        if keep:
            self._keep(checkpoint)

    def _checkpoint(self, done: int) -> PSCheckpoint:
        params, slots = self.cluster.state()
        return PSCheckpoint(
            iteration=done,
            params=tuple(params),
            state=tuple(tuple(slot) for slot in slots),
            optimizer=self.seg.optimizer,
            buffers=self.cluster.buffers() if self.seg.has_buffers else {},
            seed=self.seg.job.seed,
            workers=self.seg.job.workers,
            model=label_of(self.seg.job.model),
        )

    def _keep(self, checkpoint: PSCheckpoint) -> None:
        """Make ``checkpoint`` (and the cluster's placement) the state a restart starts from."""
        state = self.state
        if self.seg.check_reference:  # the workers' batches so far, which a dead one would lose
            state.batches = _joined(state.batches, self.cluster.batches(clear=True))
        state.iteration = checkpoint.iteration
        state.params, state.slots = checkpoint.params, checkpoint.state
        state.buffers = dict(checkpoint.buffers)
        state.owner = dict(self.cluster.owner)
        state.servers = tuple(sorted(self.cluster.servers))
