"""The processes that run jobs: one long-lived executor per GPU, pinned to its node, and the
store that keeps the jobs' checkpoints.

An executor is started once and runs one job segment after another; each segment joins a
fresh ``torch.distributed`` group, so starting a job costs a group's formation and the model's
set-up, not a process's start (which is measured once, when the executors come up). An
executor's methods run on threads of their own (a threaded Ray actor), so that the backend can
ask a running segment to stop, or change its emulated iteration time, while it trains.

The checkpoint store is an actor on the driver's node that the driver owns: a checkpoint kept
there outlives the executor (and the node) that wrote it, which is what lets a job whose process
died resume from its last checkpoint. Given a directory, it also writes each checkpoint to a
file there, which outlives the driver itself.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import ray

from unstall.errors import UnstallError
from unstall.live.training import SegmentControl, SegmentOutcome, SegmentPlan, run_segment

# Threads of an executor: the segment, and the backend's stop and speed calls beside it.
EXECUTOR_THREADS = 4
# A checkpoint file: this line, a JSON header line (job id, iteration), then torch.save's bytes.
CHECKPOINT_MAGIC = b"unstall-checkpoint 1\n"
CHECKPOINT_SUFFIX = ".ckpt"


class CheckpointStore:
    """The latest checkpoint of each job, as ``(iteration, blob)``.

    Given a ``directory``, every checkpoint it keeps is also written to
    ``directory/<job_id>.ckpt`` (atomically: a temporary file, fsync, rename), and a new store
    over the same directory starts from the checkpoints found there: the jobs' state outlives
    the process that held the store (a driver killed mid-run)."""

    def __init__(self, directory: str | Path | None = None) -> None:
        self._latest: dict[str, tuple[float, bytes]] = {}
        self._directory = Path(directory) if directory is not None else None
        if self._directory is not None:
            self._directory.mkdir(parents=True, exist_ok=True)
            for path in sorted(self._directory.glob("*" + CHECKPOINT_SUFFIX)):
                job_id, iteration, blob = read_checkpoint_file(path)
                self._latest[job_id] = (iteration, blob)

    def save(self, job_id: str, iteration: float, blob: bytes) -> None:
        held = self._latest.get(job_id)
        if held is None or iteration >= held[0]:
            self._latest[job_id] = (iteration, blob)
            if self._directory is not None:
                write_checkpoint_file(self._directory, job_id, iteration, blob)

    def load(self, job_id: str) -> tuple[float, bytes] | None:
        return self._latest.get(job_id)

    def iteration(self, job_id: str) -> float:
        held = self._latest.get(job_id)
        return held[0] if held is not None else 0.0

    def drop(self, job_id: str) -> None:
        self._latest.pop(job_id, None)
        if self._directory is not None:
            checkpoint_path(self._directory, job_id).unlink(missing_ok=True)


def job_file_name(job_id: str, suffix: str) -> str:
    """``<job_id><suffix>``, with the characters a file name cannot hold %-escaped."""
    return urllib.parse.quote(job_id, safe="-_.") + suffix


def checkpoint_path(directory: Path, job_id: str) -> Path:
    """``directory/<job_id>.ckpt`` (the id itself is in the file)."""
    return directory / job_file_name(job_id, CHECKPOINT_SUFFIX)


def write_checkpoint_file(directory: Path, job_id: str, iteration: float, blob: bytes) -> None:
    """Write a job's checkpoint so that the file is either the old one or the new one, whole,
    even if the process dies or the machine loses power mid-write."""
    path = checkpoint_path(directory, job_id)
    header = json.dumps({"job_id": job_id, "iteration": iteration}).encode()
    temporary = directory / f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    with open(temporary, "wb") as file:
        file.write(CHECKPOINT_MAGIC + header + b"\n" + blob)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    # The rename itself is durable once the folder's entry is on disk.
    folder = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def read_checkpoint_file(path: Path) -> tuple[str, float, bytes]:
    """``(job_id, iteration, blob)`` of a checkpoint file; a file that is not one is an error
    naming it (the store does not guess at a job's state)."""
    data = path.read_bytes()
    if not data.startswith(CHECKPOINT_MAGIC) or b"\n" not in data[len(CHECKPOINT_MAGIC) :]:
        raise UnstallError(f"{path}: not an unstall checkpoint file")
    header, _, blob = data[len(CHECKPOINT_MAGIC) :].partition(b"\n")
    try:
        fields = json.loads(header)
        return str(fields["job_id"]), float(fields["iteration"]), blob
    except (ValueError, KeyError, TypeError) as exc:
        raise UnstallError(f"{path}: checkpoint header unreadable ({exc})") from None


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
        saving: list[ray.ObjectRef] = []  # the periodic save on its way, if any

        def keep(iteration: float, blob: bytes) -> None:
            # The store writes one save at a time (each synced to disk): while the last one is
            # still on its way, this one is skipped rather than queued behind it. Queued saves
            # piled up on a slow disk and held up the segment's final save, and so its end.
            if saving and not ray.wait(saving, timeout=0)[0]:
                return
            saving[:] = [self.store.save.remote(job_id, iteration, blob)]

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


# Remote versions, built once: the classes above stay plain (tests run them in-process).
RemoteStore = ray.remote(num_cpus=0)(CheckpointStore)
RemoteExecutor = ray.remote(  # type: ignore[call-overload]
    num_cpus=0, max_concurrency=EXECUTOR_THREADS, max_restarts=0
)(Executor)
