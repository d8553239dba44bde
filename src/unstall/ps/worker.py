"""The worker actor: pulls its parameters from every server that owns some, computes real
gradients of a real torch model on its shard of the global batch, pushes each server the gradient
slices of the chunks it owns, and times every transfer per server (what a load balancer reads).

A worker is set up for a run (model, data, rank) and can be set up again for the next one, so a
benchmark grid does not start a process (and import torch) per run.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import ray
import torch

from unstall.ps.chunks import Chunk
from unstall.ps.data import Dataset
from unstall.ps.replica import ModelJob, ModelReplica


@dataclass(frozen=True, kw_only=True)
class Transfer:
    """One worker's pull from and push to one server in one iteration: seconds from sending
    the request to having the reply (queueing on the server's link included), and bytes."""

    worker: int
    server: int
    pull_s: float
    push_s: float
    pull_bytes: int
    push_bytes: int


@dataclass(frozen=True, kw_only=True)
class WorkerIteration:
    """What one worker did in one iteration."""

    worker: int
    loss: float
    pull_s: float  # from the first pull request to the last reply
    compute_s: float
    push_s: float
    transfers: tuple[Transfer, ...] = field(default=())


Route = tuple[Any, tuple[Chunk, ...]]  # (server actor handle, the chunks it owns)


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
        self.routes: dict[int, Route] = {}

    def ping(self) -> int:
        return self.rank

    def setup(self, rank: int, job: ModelJob, dataset: Dataset | None) -> None:
        """Build the model for a new run (``dataset`` arrives zero-copy from the object store)."""
        self.rank = rank
        self.replica = ModelReplica(job, dataset)
        self.routes = {}

    def set_routes(self, routes: dict[int, Route]) -> None:
        """The routing table: server id -> (handle, chunks). Set at iteration boundaries."""
        self.routes = {sid: route for sid, route in routes.items() if route[1]}

    def step(self, iteration: int) -> WorkerIteration:
        replica = self.replica
        assert replica is not None, "setup() first"
        started = time.perf_counter()
        pulls = {sid: handle.pull.remote(iteration) for sid, (handle, _) in self.routes.items()}
        pulled = wait_timed(pulls, started)
        pull_bytes = {}
        for sid, (_, values) in pulled.items():
            for chunk in self.routes[sid][1]:
                replica.load(chunk, values[chunk.id])
            pull_bytes[sid] = sum(v.nbytes for v in values.values())
        computed = time.perf_counter()
        loss, grads = replica.gradients(iteration, self.rank)
        pushed_at = time.perf_counter()
        pushes, push_bytes = {}, {}
        for sid, (handle, chunks) in self.routes.items():
            slices = {c.id: grads[c.tensor][c.start : c.stop] for c in chunks}
            push_bytes[sid] = sum(s.nbytes for s in slices.values())
            pushes[sid] = handle.push.remote(iteration, self.rank, slices)
        pushed = wait_timed(pushes, pushed_at)
        done = time.perf_counter()
        transfers = tuple(
            Transfer(
                worker=self.rank,
                server=sid,
                pull_s=pulled[sid][0],
                push_s=pushed[sid][0],
                pull_bytes=pull_bytes[sid],
                push_bytes=push_bytes[sid],
            )
            for sid in sorted(self.routes)
        )
        return WorkerIteration(
            worker=self.rank,
            loss=loss,
            pull_s=computed - started,
            compute_s=pushed_at - computed,
            push_s=done - pushed_at,
            transfers=transfers,
        )
