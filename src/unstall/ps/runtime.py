"""Ray for a run: connecting or starting it, and the actors kept across runs.

:func:`ensure_ray` connects to a cluster (``address`` or ``RAY_ADDRESS``) or starts a local Ray
on the loopback interface; :func:`ray_for_run` does it once for a run (or a grid of runs) and
hands out the actor pool the run takes its workers and servers from.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from unstall.errors import UnstallError
from unstall.ps.links import ServerSpec
from unstall.ps.optim import SGDConfig
from unstall.ps.server import PSServer
from unstall.ps.worker import PSWorker

PING_TIMEOUT_S = 10.0


class _DropDefaultAuthNotice(logging.Filter):
    """Ray announces on every local start that token authentication is on by default (it stays
    on); the notice means nothing to a user of unstall, so it is not shown. Ray's other
    warnings about authentication (a missing or wrong token) still are."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Set RAY_AUTH_MODE=disabled to opt out" not in record.getMessage()


logging.getLogger("ray._private.authentication.authentication_token_setup").addFilter(
    _DropDefaultAuthNotice()
)


def is_loopback(address: str) -> bool:
    """Whether a Ray address (``HOST:PORT``, ``ray://HOST:PORT``) names this machine's loopback
    interface (127.0.0.0/8, ::1 or ``localhost``)."""
    host = address.split("://", 1)[-1]
    if host.startswith("["):  # [IPv6]:PORT
        host = host[1 : host.find("]")]
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def ensure_ray(
    address: str | None = None,
    num_cpus: int | None = None,
    object_store_bytes: int | None = None,
    runtime_env: Mapping[str, Any] | None = None,
) -> bool:
    """Connect to Ray: ``address`` (or ``RAY_ADDRESS``) for an existing cluster, with
    ``runtime_env`` (Ray's runtime environment: ``working_dir``, ``py_modules``, ...), else a
    new local instance on the loopback interface (with ``num_cpus`` and an object store of
    ``object_store_bytes``; None: Ray's defaults), also when a Ray started with ``ray start``
    runs on this machine: without an address nothing joins a cluster by surprise. True when
    this call connected or started it (to shut down after); False when this process was
    connected already."""
    # Torch tensors through the object store without a copy; read when Ray starts.
    os.environ.setdefault("RAY_ENABLE_ZERO_COPY_TORCH_TENSORS", "1")
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or None
    common: dict[str, Any] = {"log_to_driver": False, "configure_logging": False}
    if address:
        check_reachable(address)
        if not is_loopback(address):
            from ray._private import ray_constants

            # A cluster across machines needs this node's routable address, not loopback (see
            # ps/__init__). Never for a loopback address: Ray would then rewrite 127.0.0.1 to
            # the machine's network address, where a loopback cluster does not listen.
            ray_constants.ENABLE_RAY_CLUSTER = True
        try:
            ray.init(address=address, runtime_env=dict(runtime_env or {}) or None, **common)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise UnstallError(
                f"cannot connect to the Ray cluster at {address}: {first_line(exc)} "
                "(a cluster started with `ray start` wants RAY_AUTH_MODE=token and its token)"
            ) from exc
    else:
        # "local": start a new instance even when `ray start` left a cluster on this machine
        # (Ray would join it, and then refuse num_cpus).
        ray.init(
            address="local",
            runtime_env=dict(runtime_env or {}) or None,
            num_cpus=num_cpus or os.cpu_count() or 1,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            object_store_memory=object_store_bytes,
            **common,
        )
    return True


def split_address(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a Ray address ``HOST:PORT`` or ``ray://HOST:PORT`` (IPv6 in
    brackets); None for Ray's words ``auto`` and ``local``. A malformed address raises
    :class:`~unstall.errors.UnstallError` saying what is expected."""
    if address in ("auto", "local"):
        return None
    rest = address.split("://", 1)[-1]
    host, sep, port = rest.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UnstallError(
            f"--address {address!r}: want HOST:PORT (as `ray start --head` prints it) or "
            "ray://HOST:PORT"
        )
    return host, int(port)


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail in seconds, not minutes of Ray's retries, when nothing listens at ``address``."""
    parts = split_address(address)
    if parts is None:
        return
    try:
        with socket.create_connection(parts, timeout=timeout_s):
            pass
    except OSError as exc:
        raise UnstallError(
            f"cannot reach the Ray cluster at {address}: {exc.strerror or exc} (is it up? "
            "`ray status --address ADDRESS` tells)"
        ) from exc


def first_line(exc: BaseException) -> str:
    """The root cause in one line: a remote task's error unwrapped to what it caught."""
    exc = root_cause(exc)
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def root_cause(exc: BaseException) -> BaseException:
    """A remote task's error unwrapped to the exception the task raised."""
    while isinstance(exc, RayTaskError) and isinstance(exc.cause, BaseException):
        exc = exc.cause
    return exc


class ActorPool:
    """Worker and server actors kept across runs: starting an actor starts a process (and a
    worker imports torch), seconds each, so a benchmark grid or a test module reuses them.
    Actors found dead are replaced; ``close`` kills them all."""

    def __init__(self, worker_cpus: float | None = None) -> None:
        self.worker_cpus = worker_cpus  # None: one CPU each, less when the cluster has fewer
        self.workers: list[Any] = []
        self.idle_servers: list[Any] = []

    def take_workers(self, count: int) -> list[Any]:
        """``count`` live worker actors, spread over the cluster's nodes."""
        self.workers = [w for w in self.workers if _alive(w)]
        cpus = self.worker_cpus
        if cpus is None:
            cpus = min(1.0, float(ray.cluster_resources().get("CPU", 1.0)) / count)
        while len(self.workers) < count:
            self.workers.append(
                PSWorker.options(  # type: ignore[attr-defined]
                    num_cpus=cpus, scheduling_strategy="SPREAD"
                ).remote()
            )
        return self.workers[:count]

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
        for actor in [*self.workers, *self.idle_servers]:
            ray.kill(actor)
        self.workers, self.idle_servers = [], []


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
) -> Iterator[ActorPool]:
    """Ray for one run or one grid of runs, connected (or started) once, and the actors to take:
    ``pool``, else the Ray session's pool (a Ray that was running before keeps its actors for
    the next run; a Ray started here stops at the end, with them)."""
    started = ensure_ray(address, num_cpus=num_cpus, runtime_env=runtime_env)
    try:
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
