"""The worker actor: pulls its parameters from every server that owns some (once, at the start
of a run), computes real gradients of the user's torch model on its batch of the iteration, and
each iteration exchanges with every server the gradient slices of the chunks it owns for their
new values (one push-pull round trip a piece: one piece unless the server owns more than a
piece's bytes; see :func:`~unstall.ps.chunks.plan_pieces`), loading each piece as it comes
back, and times each exchange per server (what a load balancer reads).

A worker is set up for a run (model, data, loss, rank) and can be set up again for the next one,
so a benchmark grid does not start a process (and import torch) per run. For the reference check
it keeps the batches it trained on, which the driver fetches at the end.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import ray
import torch

from unstall.ps.chunks import Chunk, Segment, wire_parts
from unstall.ps.data import BatchStream
from unstall.ps.replica import ModelReplica, TrainingJob
from unstall.workload.zoo_jobs import Batch


@dataclass(frozen=True, kw_only=True)
class Transfer:
    """One worker's exchange with one server in one iteration.

    ``push_pull_s``: from sending the gradients to having the new parameters, as the worker
    measures it (both links' queueing and transfer, waiting for the other workers' pushes, the
    step, Ray's own overhead). ``ingress_s``, ``wait_s``, ``egress_s``: the same exchange as the
    server saw it (see :class:`~unstall.ps.server.PushPullTiming`). ``pull_s``: the separate
    first pull of a run (0 in later iterations).
    """

    worker: int
    server: int
    push_pull_s: float
    ingress_s: float
    wait_s: float
    egress_s: float
    pull_s: float
    push_bytes: int
    pull_bytes: int


@dataclass(frozen=True, kw_only=True)
class WorkerIteration:
    """What one worker did in one iteration (seconds on its clock)."""

    worker: int
    loss: float
    pull_s: float  # the first pull of a run; 0 afterwards
    compute_s: float
    push_pull_s: float  # from the first push to having every server's parameters loaded
    transfers: tuple[Transfer, ...] = field(default=())
    # True: a probe of the step's :class:`StepWatch` tripped, nothing was pushed yet; the
    # gradients wait in the worker for :meth:`PSWorker.exchange`.
    held: bool = False


@dataclass(frozen=True, kw_only=True)
class StepWatch:
    """Probes of the servers, issued as the step was, and how long each may take.

    ``probes``: server id -> the ObjectRef of that server's probe reply (``(payload,
    ProbeTiming)``), inside this object so that Ray does not wait for them before the step
    starts: they travel while the worker computes. ``limits``: server id -> the most seconds
    its probe's :attr:`~unstall.ps.server.ProbeTiming.busy_s` may be. Every worker reads the
    same replies against the same limits, so all of them hold their pushes back, or none.
    """

    probes: Mapping[int, Any]
    limits: Mapping[int, float]

    def tripped(self) -> bool:
        """Wait for the probes; whether one took longer than its limit."""
        sids = list(self.probes)
        replies = ray.get([self.probes[s] for s in sids])
        return any(reply[1].busy_s > self.limits[s] for s, reply in zip(sids, replies, strict=True))


# A step held back by its watch: (iteration, loss, gradients, pull_s, compute_s, the first
# pull's seconds per server).
Held = tuple[int, float, list[np.ndarray], float, float, dict[int, float]]
# (server actor handle, the chunks it owns, the pieces of its push-pull: see plan_pieces)
Route = tuple[Any, tuple[Chunk, ...], tuple[tuple[Segment, ...], ...]]


def wait_timed(refs: Mapping[int, Any], since: float) -> dict[int, tuple[float, Any]]:
    """Wait for every ref; per key, seconds from ``since`` to its arrival, and its value."""
    pending = {ref: key for key, ref in refs.items()}
    out: dict[int, tuple[float, Any]] = {}
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        now = time.perf_counter()
        for ref in ready:
            out[pending.pop(ref)] = (now - since, ray.get(ref))
    return out


@ray.remote(max_concurrency=2)  # type: ignore[call-overload]  # a second thread answers ping() while a step runs
class PSWorker:
    def __init__(self) -> None:
        torch.set_num_threads(1)  # as the reference computes: the same float32 operations
        self.rank = -1
        self.replica: ModelReplica | None = None
        self.stream: BatchStream | None = None
        self.recorded: list[Batch] | None = None
        self.routes: dict[int, Route] = {}
        self.fresh = False
        self.held: Held | None = None

    def ping(self) -> int:
        return self.rank

    def node(self) -> str:
        """The id of the Ray node this worker runs on."""
        return str(ray.get_runtime_context().get_node_id())

    def setup(
        self,
        rank: int,
        job: TrainingJob,
        start_iteration: int = 0,
        buffers: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        """Build the model and open the data for a new run. A run resumed at
        ``start_iteration`` first draws (and drops) the batches of the iterations before it,
        which replays the data function's draws as the stopped run made them, and sets the
        model's ``buffers`` (e.g. BatchNorm's running statistics) as they were."""
        self.rank = rank
        self.replica, self.stream, self.recorded = None, None, None
        self.routes = {}
        self.fresh = False  # parameters not pulled yet
        self.held = None
        self.replica = ModelReplica(job)
        self.stream = BatchStream(job.data, rank, job.workers, job.seed)
        for iteration in range(start_iteration):
            self.stream.next(iteration)
        if buffers:
            self.replica.set_buffers(buffers)
        self.recorded = [] if job.record_batches else None

    def batches(self, clear: bool = False) -> list[Batch]:
        """The batches trained on so far (since the last ``clear``), one an iteration (kept
        with ``record_batches``); ``clear`` hands them over and forgets them."""
        out = self.recorded or []
        if clear and self.recorded is not None:
            self.recorded = []
        return out

    def pid(self) -> int:
        """This worker's process id (what a test kills)."""
        return os.getpid()

    def buffers(self) -> dict[str, torch.Tensor]:
        """The model's buffers (e.g. BatchNorm's running statistics) as this worker has them."""
        assert self.replica is not None, "setup() first"
        return self.replica.buffers()

    def set_routes(self, routes: dict[int, Route]) -> None:
        """The routing table: server id -> (handle, chunks). Set at iteration boundaries; the
        parameters the worker holds stay valid (chunks change owner, not value)."""
        self.routes = {sid: route for sid, route in routes.items() if route[1]}

    def _load(self, sid: int, values: dict[int, np.ndarray]) -> int:
        replica = self.replica
        assert replica is not None
        for chunk in self.routes[sid][1]:
            replica.load(chunk, values[chunk.id])
        return sum(v.nbytes for v in values.values())

    def _load_piece(self, sid: int, segments: tuple[Segment, ...], values: np.ndarray) -> int:
        """Load a piece's parameters (the segments' one after the other): a segment that is a
        whole tensor becomes a view of ``values`` (zero-copy), a part of one is copied."""
        replica = self.replica
        assert replica is not None
        chunks = {c.id: c for c in self.routes[sid][1]}
        pos = 0
        for cid, lo, hi in segments:
            replica.load_part(chunks[cid], lo, hi, values[pos : pos + hi - lo])
            pos += hi - lo
        return int(values.nbytes)

    def step(self, iteration: int, watch: StepWatch | None = None) -> WorkerIteration:
        """Compute this worker's gradients and exchange them for the next parameters. With a
        ``watch`` whose probes trip, the gradients are kept and nothing is pushed (the result
        says ``held``): :meth:`exchange` pushes them, on the routes set meanwhile."""
        replica, stream = self.replica, self.stream
        assert replica is not None and stream is not None, "setup() first"
        started = time.perf_counter()
        pulled: dict[int, tuple[float, Any]] = {}
        if not self.fresh:
            refs = {sid: route[0].pull.remote(iteration) for sid, route in self.routes.items()}
            pulled = wait_timed(refs, started)
            for sid, (_, values) in pulled.items():
                self._load(sid, values)
        computed = time.perf_counter()
        batch = stream.next(iteration)
        if self.recorded is not None:
            self.recorded.append(batch)
        loss, grads = replica.gradients(batch, iteration, self.rank)
        pushed = time.perf_counter()
        self.fresh = True
        pull_s = {sid: got[0] for sid, got in pulled.items()}
        if watch is not None and watch.tripped():
            self.held = (iteration, loss, grads, computed - started, pushed - computed, pull_s)
            return WorkerIteration(
                worker=self.rank,
                loss=loss,
                pull_s=computed - started,
                compute_s=pushed - computed,
                push_pull_s=0.0,
                held=True,
            )
        return self._exchanged(
            iteration, loss, grads, computed - started, pushed - computed, pull_s
        )

    def exchange(self, iteration: int) -> WorkerIteration:
        """Push the gradients a tripped watch held back (see :meth:`step`) on the current
        routes and load the new parameters: the rest of the step."""
        assert self.held is not None and self.held[0] == iteration, "no step held back"
        _, loss, grads, pull_s, compute_s, pulled = self.held
        self.held = None
        return self._exchanged(iteration, loss, grads, pull_s, compute_s, pulled)

    def _exchanged(
        self,
        iteration: int,
        loss: float,
        grads: list[np.ndarray],
        pull_s: float,
        compute_s: float,
        pulled: Mapping[int, float],
    ) -> WorkerIteration:
        pushed = time.perf_counter()
        replies = self._push_pull(iteration, grads, pushed)
        transfers = [
            Transfer(worker=self.rank, server=sid, pull_s=pulled.get(sid, 0.0), **replies[sid])
            for sid in sorted(replies)
        ]
        return WorkerIteration(
            worker=self.rank,
            loss=loss,
            pull_s=pull_s,
            compute_s=compute_s,
            push_pull_s=time.perf_counter() - pushed,
            transfers=tuple(transfers),
        )

    def _push_pull(
        self, iteration: int, grads: list[np.ndarray], since: float
    ) -> dict[int, dict[str, Any]]:
        """Send every server its gradient pieces (the first piece of every server, then the
        second, ...: each server starts stepping early; a piece's gradients in parts of at most
        1 MiB, which Ray copies without starting threads) and load each piece's new parameters
        as it comes back, while later pieces still travel. Per server: the exchange's figures
        (with several pieces, seconds until its last piece is loaded, and the longest piece's
        ingress, wait and egress as the server saw them)."""
        refs: dict[Any, tuple[int, tuple[Segment, ...]]] = {}
        out: dict[int, dict[str, Any]] = {}
        depth = max((len(route[2]) for route in self.routes.values()), default=0)
        for k in range(depth):
            for sid, (handle, chunks, pieces) in self.routes.items():
                if k >= len(pieces):
                    continue
                by_id = {c.id: c for c in chunks}
                slices = [
                    grads[by_id[cid].tensor][by_id[cid].start + lo : by_id[cid].start + hi]
                    for cid, lo, hi in pieces[k]
                ]
                parts = wire_parts(slices)
                ref = handle.push_pull.remote(iteration, self.rank, k, pieces[k], parts)
                refs[ref] = (sid, pieces[k])
                row = out.setdefault(sid, {"push_bytes": 0, "pull_bytes": 0})
                row["push_bytes"] += sum(g.nbytes for g in slices)
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                sid, segments = refs[ref]
                values, timing = ray.get(ref)
                row = out[sid]
                row["pull_bytes"] += self._load_piece(sid, segments, values)
                row["push_pull_s"] = time.perf_counter() - since
                for key in ("ingress_s", "wait_s", "egress_s"):
                    row[key] = max(row.get(key, 0.0), getattr(timing, key))
        return out
