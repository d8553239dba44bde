"""The live backend's executors: one long-lived Ray actor per GPU, pinned to its node.

The pool starts them, hands out the GPU slots a placement asks for, replaces a process that died
or hung, and withdraws the executors of a node that left the cluster. It knows nothing of jobs'
lifecycles: the live driver (:mod:`unstall.live.driver`) asks it for processes.
"""

from __future__ import annotations

import itertools
import time
import uuid
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from unstall.errors import UnstallError
from unstall.live.cluster import LiveCluster
from unstall.live.executor import RemoteExecutor, RemoteStore
from unstall.sched.base import Placement

# Executors are named EXECUTOR_PREFIX + run token + node and GPU.
EXECUTOR_PREFIX = "unstall-live-"
# Wall seconds the executors get to start and answer.
START_TIMEOUT_S = 600.0

NodeSlot = tuple[int, int]


class LiveRunError(UnstallError):
    """The live run cannot go on (no executor could start, every node is gone)."""


class ExecutorPool:
    """One executor per GPU of ``cluster`` and the store of the jobs' checkpoints."""

    def __init__(self, cluster: LiveCluster, *, checkpoint_dir: Path | None = None) -> None:
        self.cluster = cluster
        # Where the checkpoint store also keeps its checkpoints as files (None: in memory only).
        self.checkpoint_dir = checkpoint_dir
        self.executors: dict[NodeSlot, Any] = {}
        self.free_slots: dict[int, list[int]] = {}
        self.node_address: dict[int, str] = {}
        self.down: set[int] = set()
        self.store: Any = None
        self.start_wall_s = 0.0
        self.run_token = uuid.uuid4().hex[:8]
        self._spawned = itertools.count()

    def start(self) -> None:
        """One executor per GPU, pinned to its node; returns when all of them answer."""
        began = time.monotonic()
        self.store = RemoteStore.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(
                ray.get_runtime_context().get_node_id(), soft=False
            ),
            **store_restarts(self.checkpoint_dir is not None),
        ).remote(None if self.checkpoint_dir is None else str(self.checkpoint_dir))
        pending = []
        for node in self.cluster.nodes:
            self.node_address[node.index] = node.address
            self.free_slots[node.index] = list(range(node.gpus))
            for slot in range(node.gpus):
                handle = self._new_executor(node.index, slot)
                self.executors[(node.index, slot)] = handle
                pending.append(handle.describe.remote())
        try:
            ray.get(pending, timeout=START_TIMEOUT_S)
        except (RayError, GetTimeoutError) as exc:
            raise LiveRunError(f"the executors did not start: {last_line(exc)}") from exc
        self.start_wall_s = time.monotonic() - began

    def _new_executor(self, node: int, slot: int) -> Any:
        info = self.cluster.nodes[node]
        options: dict[str, Any] = {
            "scheduling_strategy": NodeAffinitySchedulingStrategy(info.ray_node_id, soft=False),
        }
        if info.uses_gpus:
            options["num_gpus"] = 1
        else:
            options["resources"] = {self.cluster.slot_resource: 1}
        # Named, so that a person (or a test) can find the process of a GPU: ``ray list
        # actors``, ``ray.get_actor(name)``. A run's own token keeps two runs apart.
        name = f"{EXECUTOR_PREFIX}{self.run_token}-n{node}-g{slot}-{next(self._spawned)}"
        return RemoteExecutor.options(name=name, **options).remote(
            name, self.store, self.cluster.loopback
        )

    def __getitem__(self, node_slot: NodeSlot) -> Any:
        return self.executors[node_slot]

    def get(self, node_slot: NodeSlot) -> Any:
        return self.executors.get(node_slot)

    def take(self, placement: Placement) -> list[NodeSlot]:
        """The GPU slots of ``placement``, lowest first on each node, in rank order."""
        return [(node, self.free_slots[node].pop(0)) for node, k in placement for _ in range(k)]

    def give_back(self, slots: list[NodeSlot]) -> None:
        for node, slot in slots:
            if node not in self.down:
                self.free_slots[node].append(slot)
                self.free_slots[node].sort()

    def replace(self, node_slot: NodeSlot, *, node_gone: bool) -> bool:
        """A new process for a GPU whose executor died or hung; False when its node is gone
        instead (Ray said so with the executor's death, or no longer lists the node as alive:
        Ray notices a node's death only after missing heartbeats)."""
        node, slot = node_slot
        old = self.executors.pop(node_slot, None)
        if old is not None:
            ray.kill(old, no_restart=True)
        if node in self.down:
            return True
        if node_gone or not self._node_alive(node):
            return False
        # Not waited for: the slot is free at once, and a segment placed on it begins when its
        # process is up (its start-up counts that wait). A process that cannot start fails
        # that segment, which brings the node's state back here.
        self.executors[node_slot] = self._new_executor(node, slot)
        return True

    def _node_alive(self, node: int) -> bool:
        wanted = self.cluster.nodes[node].ray_node_id
        return any(n["NodeID"] == wanted and n["Alive"] for n in ray.nodes())

    def withdraw(self, node: int) -> None:
        """A node that left: its slots and executors are gone for good."""
        self.down.add(node)
        self.free_slots[node] = []
        for key in [k for k in self.executors if k[0] == node]:
            ray.kill(self.executors.pop(key), no_restart=True)

    def shutdown(self) -> None:
        for handle in self.executors.values():
            ray.kill(handle, no_restart=True)
        if self.store is not None:
            ray.kill(self.store, no_restart=True)
        self.executors.clear()

    def held_iteration(self, job_id: str) -> float:
        """The iteration of the job's last checkpoint in the store (0: none)."""
        return float(ray.get(self.store.iteration.remote(job_id)))

    def final_checkpoint(self, job_id: str) -> bytes | None:
        """The checkpoint a finished job left (its final state), if the store still holds it."""
        held = ray.get(self.store.load.remote(job_id))
        return held[1] if held is not None else None


def store_restarts(durable: bool) -> dict[str, int]:
    """The checkpoint store's restart options. A store over durable files starts again from
    them, so Ray restarts it where its process dies (the node ran low on memory and Ray killed
    it) and retries the calls in flight: the service goes on. One in memory would come back
    empty, its jobs' progress lost: it is not restarted, and the run fails as it did."""
    return {"max_restarts": -1, "max_task_retries": -1} if durable else {"max_restarts": 0}


def last_line(exc: BaseException) -> str:
    """The last line of an exception's text (Ray puts the cause there, after its traceback)."""
    text = str(exc).strip().splitlines()
    return text[-1] if text else type(exc).__name__
