"""Ray for a run: connecting or starting it, and the actors kept across runs.

:func:`ensure_ray` connects to a cluster (``address`` or ``RAY_ADDRESS``) or starts a local Ray
on the loopback interface (:mod:`unstall.ray_connect`, shared with the simulator's sweeps);
:func:`ray_for_run` does it once for a run (or a grid of runs) and hands out the actor pool the
run takes its workers and servers from.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from unstall.ps.device import CPU, CUDA, check_gpus, worker_options
from unstall.ps.links import ServerSpec
from unstall.ps.optim import SGDConfig
from unstall.ps.server import PSServer
from unstall.ps.worker import PSWorker
from unstall.ray_connect import connect_ray

PING_TIMEOUT_S = 10.0


def ensure_ray(
    address: str | None = None,
    num_cpus: int | None = None,
    object_store_bytes: int | None = None,
    runtime_env: Mapping[str, Any] | None = None,
) -> bool:
    """:func:`unstall.ray_connect.connect_ray`, with torch tensors crossing the object store
    without a copy."""
    return connect_ray(
        address,
        num_cpus=num_cpus,
        object_store_bytes=object_store_bytes,
        runtime_env=runtime_env,
        torch_tensors=True,
    )


class ActorPool:
    """Worker and server actors kept across runs: starting an actor starts a process (and a
    worker imports torch), seconds each, so a benchmark grid or a test module reuses them.
    Actors found dead are replaced; ``close`` kills them all. Workers on the CPU
    (``workers``) and workers holding a GPU each (``gpu_workers``) are kept apart: a run takes
    those of its device."""

    def __init__(self, worker_cpus: float | None = None) -> None:
        self.worker_cpus = worker_cpus  # None: one CPU each, less when the cluster has fewer
        self.workers: list[Any] = []
        self.gpu_workers: list[Any] = []
        self.idle_servers: list[Any] = []

    def take_workers(self, count: int, device: str = CPU) -> list[Any]:
        """``count`` live worker actors for ``device`` (``"cuda"``: one GPU each), spread
        over the cluster's nodes."""
        kept = [w for w in (self.gpu_workers if device == CUDA else self.workers) if _alive(w)]
        if len(kept) < count:
            cluster_cpus = float(ray.cluster_resources().get("CPU", 1.0))
            options = worker_options(device, count, cluster_cpus, self.worker_cpus)
            kept += [
                PSWorker.options(**options).remote()  # type: ignore[attr-defined]
                for _ in range(count - len(kept))
            ]
        if device == CUDA:
            self.gpu_workers = kept
        else:
            self.workers = kept
        return kept[:count]

    def take_server(self) -> Any:
        """An idle server actor (reset by its next owner before use)."""
        if self.idle_servers:
            return self.idle_servers.pop()
        return PSServer.options(scheduling_strategy="SPREAD").remote(  # type: ignore[attr-defined]
            -1, 1, ServerSpec(), SGDConfig()
        )

    def give_back_server(self, server: Any) -> None:
        """Keep ``server`` for a later run (unless it died)."""
        if _alive(server):
            self.idle_servers.append(server)

    def close(self) -> None:
        """Kill every actor of the pool."""
        for actor in [*self.workers, *self.gpu_workers, *self.idle_servers]:
            ray.kill(actor)
        self.workers, self.gpu_workers, self.idle_servers = [], [], []


# One pool per Ray session for callers that run many short jobs (the CLI's commands, the test
# suite): keyed by the session's job id, since a new ``ray.init`` means the old actors are gone.
_session_pools: dict[str, ActorPool] = {}


def session_pool() -> ActorPool:
    """The pool of the current Ray session; its actors live until :func:`close_session_pool`
    or until Ray shuts down."""
    job = ray.get_runtime_context().get_job_id()
    if job not in _session_pools:
        _session_pools.clear()
        _session_pools[job] = ActorPool()
    return _session_pools[job]


def close_session_pool() -> None:
    """Kill the actors of the session's pool."""
    for pool in _session_pools.values():
        pool.close()
    _session_pools.clear()


@contextmanager
def ray_for_run(
    address: str | None,
    num_cpus: int,
    pool: ActorPool | None = None,
    *,
    runtime_env: Mapping[str, Any] | None = None,
    device: str = CPU,
    workers: int = 1,
    owner: str = "fit",
) -> Iterator[ActorPool]:
    """Ray for one run or one grid of runs, connected (or started) once, and the actors to take:
    ``pool``, else the Ray session's pool (a Ray that was running before keeps its actors for
    the next run; a Ray started here stops at the end, with them). A ``"cuda"`` run of
    ``workers`` workers on a cluster with fewer GPUs is refused here, before any actor starts
    (a :class:`~unstall.errors.ConfigError` naming ``owner``'s ``device``)."""
    started = ensure_ray(address, num_cpus=num_cpus, runtime_env=runtime_env)
    try:
        if device == CUDA:
            check_gpus(owner, device, workers, float(ray.cluster_resources().get("GPU", 0)))
        if pool is not None:
            yield pool
        else:
            yield session_pool()
    finally:
        if started:
            close_session_pool()
            ray.shutdown()


def _alive(actor: Any) -> bool:
    try:
        ray.get(actor.ping.remote(), timeout=PING_TIMEOUT_S)
    except RayActorError:
        return False
    except GetTimeoutError:
        return True  # busy, not dead
    return True
