"""The processes that run jobs: one long-lived executor per GPU, pinned to its node, and the
store that keeps the jobs' checkpoints.

An executor is started once and runs one job segment after another; each segment joins a
fresh ``torch.distributed`` group, so starting a job costs a group's formation and the model's
set-up, not a process's start (which is measured once, when the executors come up). An
executor's methods run on threads of their own (a threaded Ray actor), so that the backend can
ask a running segment to stop, or change its emulated iteration time, while it trains.

The checkpoint store is an actor on the driver's node that the driver owns: a checkpoint kept
there outlives the executor (and the node) that wrote it, which is what lets a job whose process
died resume from its last checkpoint. Given a directory (the service's store), it also keeps them
as files, which outlive the driver.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

import ray

from unstall.live.training import SegmentControl, SegmentOutcome, SegmentPlan, run_segment

# Threads of an executor: the segment, and the backend's stop and speed calls beside it.
EXECUTOR_THREADS = 4


class CheckpointStore:
    """The latest checkpoint of each job, as ``(iteration, blob)``. With a ``directory``, each
    is also a durable file there (``<job>.ckpt``, written whole or not at all), and a new store
    over the same directory finds them again: a service's jobs resume from them after the
    service (and this actor with it) died."""

    def __init__(self, directory: str | None = None) -> None:
        self._latest: dict[str, tuple[float, bytes]] = {}
        self._directory = directory
        if directory is not None:
            for path in sorted(Path(directory).glob("*.ckpt")):
                held = _read_checkpoint(path)
                if held is not None:
                    self._latest[path.stem] = held

    def save(self, job_id: str, iteration: float, blob: bytes) -> None:
        held = self._latest.get(job_id)
        if held is None or iteration >= held[0]:
            self._latest[job_id] = (iteration, blob)
            if self._directory is not None:
                _write_checkpoint(Path(self._directory) / f"{job_id}.ckpt", iteration, blob)

    def load(self, job_id: str) -> tuple[float, bytes] | None:
        return self._latest.get(job_id)

    def iteration(self, job_id: str) -> float:
        held = self._latest.get(job_id)
        return held[0] if held is not None else 0.0

    def drop(self, job_id: str) -> None:
        self._latest.pop(job_id, None)


class Executor:
    """One GPU's worth of a node: runs the segments the backend gives it, one at a time."""

    def __init__(self, label: str, store: Any, loopback: bool) -> None:
        import torch

        # Many executors share a machine's cores (emulated GPUs on a laptop, CPU training):
        # one thread each keeps them from fighting over them.
        torch.set_num_threads(1)
        if loopback:
            # A cluster on this machine's loopback: the job groups must meet there too.
            os.environ["GLOO_SOCKET_IFNAME"] = "lo"
        self.label = label
        self.store = store
        self._lock = threading.Lock()
        self._segment: str | None = None
        self._control = SegmentControl()
        # Stops and speeds for segments whose run() has not begun yet.
        self._early: dict[str, SegmentControl] = {}
        self.started = time.time()

    def describe(self) -> dict[str, Any]:
        """Where this executor runs: its node's address, its process and its device."""
        import torch

        ctx = ray.get_runtime_context()
        return {
            "label": self.label,
            "node_id": ctx.get_node_id(),
            "address": ray.util.get_node_ip_address(),
            "pid": os.getpid(),
            "device": "cuda" if torch.cuda.is_available() else "cpu",
        }

    def open_port(self) -> int:
        """A free TCP port on this executor's host, for a job group whose rank 0 it runs."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("", 0))
            return int(sock.getsockname()[1])

    def run(
        self, segment: str, plan: SegmentPlan, held: tuple[float, bytes] | None
    ) -> SegmentOutcome:
        """Run one segment (``segment``: its id, unique in the run) from ``held`` (the job's
        checkpoint in the store, None for a fresh start) to its end or its stop. Rank 0 leaves
        periodic checkpoints in the store as it goes, and the last one before it returns; the
        outcome itself carries no checkpoint."""
        if held is not None:
            plan = dataclasses.replace(plan, start_iteration=held[0], checkpoint=held[1])
        with self._lock:
            if self._segment is not None:
                raise RuntimeError(f"executor {self.label} already runs {self._segment}")
            self._segment = segment
            # A stop or a new speed may have come first: Ray runs this call only once its
            # checkpoint argument is here, and the backend's later calls do not wait for it.
            early = self._early.pop(segment, None)
            self._control = early if early is not None else SegmentControl()
            if self._control.iteration_wall_s <= 0:
                self._control.iteration_wall_s = plan.iteration_wall_s
        job_id = plan.work.job_id

        def keep(iteration: float, blob: bytes) -> None:
            self.store.save.remote(job_id, iteration, blob)

        try:
            outcome = run_segment(plan, self._control, keep if plan.rank == 0 else None)
        finally:
            with self._lock:
                self._segment = None
        if outcome.checkpoint is not None:
            # Kept before the segment reports its end: the job's next segment reads it.
            ray.get(self.store.save.remote(job_id, outcome.iteration, outcome.checkpoint))
            outcome = dataclasses.replace(outcome, checkpoint=None)
        return outcome

    def _control_of(self, segment: str) -> SegmentControl:
        """The running segment's control, or the one kept for a segment not started yet."""
        if self._segment == segment:
            return self._control
        return self._early.setdefault(segment, SegmentControl())

    def stop(self, segment: str) -> None:
        """Ask ``segment`` to stop after its current step (at its first, if it has not begun)."""
        with self._lock:
            self._control_of(segment).stop.set()

    def set_iteration_wall_s(self, segment: str, seconds: float) -> None:
        """The emulated iteration time of ``segment`` from its next step on."""
        with self._lock:
            self._control_of(segment).iteration_wall_s = seconds


def _write_checkpoint(path: Path, iteration: float, blob: bytes) -> None:
    """``iteration`` (8 bytes) then the blob, to a temporary file made durable, then renamed
    over the last one: a kill at any moment leaves the old checkpoint or the new one."""
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as out:
        out.write(struct.pack("<d", iteration))
        out.write(blob)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def _read_checkpoint(path: Path) -> tuple[float, bytes] | None:
    data = path.read_bytes()
    if len(data) < 8:
        return None
    return struct.unpack("<d", data[:8])[0], data[8:]


# Remote versions, built once: the classes above stay plain (tests run them in-process).
RemoteStore = ray.remote(num_cpus=0)(CheckpointStore)
RemoteExecutor = ray.remote(  # type: ignore[call-overload]
    num_cpus=0, max_concurrency=EXECUTOR_THREADS, max_restarts=0
)(Executor)
