"""``unstall serve``: the service started, answering on HTTP, until Ctrl-C or SIGTERM.

Without an address the cluster file's (or preset's) nodes are emulated on a local Ray on
loopback, one Ray node each, as ``unstall live run`` does; with one (or ``RAY_ADDRESS``) the
service joins that Ray cluster. What a killed earlier service left running on a local cluster is
ended first (:func:`unstall.live.cluster.reap_orphans`).
"""

from __future__ import annotations

import contextlib
import gc
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from unstall.errors import ConfigError, UnstallError
from unstall.live.cluster import LocalRayCluster, discover, reap_orphans
from unstall.live.config import LiveConfig
from unstall.net import TopologyConfig
from unstall.ray_connect import cluster_address, connect_ray, is_loopback
from unstall.sched.base import Policy
from unstall.service.api import create_app
from unstall.service.estimates import EstimateSettings
from unstall.service.scheduler import DEFAULT_MODEL, Scheduler
from unstall.service.service import Caller, Service
from unstall.service.store import JobStore

DEFAULT_PORT = 8470
# Seconds a thread holds the GIL while another waits for it, in `unstall serve` (see serve()):
# 1 ms took 449-459 submissions/s where Python's 5 ms took 335-341, back to back under load.
SWITCH_INTERVAL_S = 0.001
DEFAULT_STORE = "~/.unstall/service"
OWNER = "serve"


@dataclass(frozen=True, kw_only=True)
class ServeConfig:
    """Where the service answers and keeps its jobs. ``store``: the store directory;
    ``database``: a URL for the records instead of SQLite in it (``postgresql://...``)."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    store: Path = Path(DEFAULT_STORE)
    database: str | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(OWNER, "port", f"must be in 0..65535, got {self.port}")


def check_exposure(host: str, tokens: dict[str, Caller] | None) -> None:
    """Any address other than loopback needs a token file: a scheduler that runs code on a
    cluster must not take jobs from anyone who can reach it."""
    if tokens is None and not is_loopback(host):
        raise ConfigError(
            OWNER,
            "host",
            f"{host} is reachable from other machines: give --token-file (lines TOKEN or "
            "TOKEN USER) to serve there",
        )


@contextlib.contextmanager
def ray_cluster(
    topology: TopologyConfig, address: str | None, config: LiveConfig, say: Callable[[str], None]
) -> Iterator[object]:
    """The service's Ray cluster: joined, or emulated locally; yields the LiveCluster."""
    import ray

    joined = cluster_address(address)
    local = None
    if joined is None:
        say(f"starting a local Ray cluster of {topology.n_nodes} nodes on 127.0.0.1")
        local = LocalRayCluster(topology, config.slot_resource)
    try:
        connected = connect_ray(local.address if local is not None else joined)
        try:
            yield discover(
                ray.nodes(),
                topology=topology,
                slot_resource=config.slot_resource,
                loopback=local is not None or (joined is not None and is_loopback(joined)),
            )
        finally:
            if connected:
                ray.shutdown()
    finally:
        if local is not None:
            local.shutdown()


@dataclass
class Running:
    """A service that runs (see :func:`serving`): where it answers, and its parts."""

    url: str
    service: Service
    http: threading.Thread

    def check(self) -> None:
        """Raise if the scheduler or the HTTP server stopped on its own."""
        if self.service.scheduler.error is not None:
            raise UnstallError(f"the scheduler stopped: {self.service.scheduler.error}")
        if not self.http.is_alive():
            raise UnstallError("the HTTP server stopped")


@contextlib.contextmanager
def serving(
    *,
    topology: TopologyConfig,
    policy: Policy,
    live: LiveConfig,
    config: ServeConfig,
    address: str | None = None,
    tokens: dict[str, Caller] | None = None,
    say: Callable[[str], None] = print,
    estimates: EstimateSettings | None = None,
) -> Iterator[Running]:
    """The service, answering in threads of its own while the block runs: the HTTP API and the
    scheduler. Ray is started (or joined) in the calling thread, which must be the main one for
    a local cluster (Ray's own rule); on leaving, running jobs are stopped and kept.
    ``estimates``: how its start estimates are made (service/estimates.py)."""
    import uvicorn

    check_exposure(config.host, tokens)
    if cluster_address(address) is None:
        reap_orphans()  # what a killed service left running, before anything new starts
    store = JobStore(config.store, config.database)
    scheduler = Scheduler(
        store=store, topology=topology, policy=policy, config=live, log=say, estimates=estimates
    )
    service = Service(store=store, scheduler=scheduler, tokens=tokens)
    threading.Thread(
        target=_warm_up, args=(scheduler,), name="unstall-warm-up", daemon=True
    ).start()
    service.load()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(service),
            host=config.host,
            port=config.port,
            log_level="warning",
            access_log=False,
            # httptools parses HTTP where installed (a dependency); asyncio's own loop, never
            # uvloop's policy for the whole process (Ray's threads have loops of their own).
            http="auto",
            loop="asyncio",
        )
    )
    # Ray first (joining a running cluster takes a second or two; starting a local one longer,
    # and Ray's start holds this process meanwhile), then the API, which answers from the store
    # while the executors come up and the jobs are restored in the scheduler's thread.
    with ray_cluster(topology, address, live, say) as cluster:
        thread = threading.Thread(target=server.run, name="unstall-http", daemon=True)
        thread.start()
        try:
            while not server.started:
                if not thread.is_alive():
                    raise UnstallError(f"could not serve on {config.host}:{config.port}")
                time.sleep(0.02)
            url = f"http://{config.host}:{_port(server, config.port)}"
            say(f"serving on {url}")
            service.start(cluster)  # type: ignore[arg-type]
            yield Running(url=url, service=service, http=thread)
        finally:
            server.should_exit = True
            thread.join(timeout=10)
            service.close()  # the submissions waiting are written before the store closes
            scheduler.stop()
            store.close()


def _warm_up(scheduler: Scheduler) -> None:
    """What the service's start-up leaves behind, out of the way of its requests (in a thread
    of its own, while Ray starts).

    The perf model's first facts of a model import torch's model-building machinery (seconds
    at a first use), which the first submission's request would otherwise do while every
    request behind it waits (DEFAULT_MODEL: what a job without one is timed as). Then the
    objects of start-up (torch's, Ray's: some 400,000) are frozen out of the garbage
    collector's way: they live as long as the process, and a full collection walking them
    took 0.2 s, in the middle of whatever request or scheduling round set it off."""
    scheduler.speed.consolidated_iter_s(DEFAULT_MODEL, 1)
    gc.freeze()


def serve(
    *,
    topology: TopologyConfig,
    policy: Policy,
    live: LiveConfig,
    config: ServeConfig,
    address: str | None = None,
    tokens: dict[str, Caller] | None = None,
    say: Callable[[str], None] = print,
    stop: threading.Event | None = None,
) -> None:
    """Run the service until ``stop`` is set (or Ctrl-C / SIGTERM, as KeyboardInterrupt).

    The process's GIL switch interval is SWITCH_INTERVAL_S meanwhile: the event loop answering
    requests waits for the GIL each time it comes back from I/O, for up to the interval while
    another thread computes (the scheduler's rounds, Ray's actor creation as the executors come
    up), and a request does I/O several times: at Python's 5 ms, tens of milliseconds each."""
    stop = stop or threading.Event()
    switch_before = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        with serving(
            topology=topology,
            policy=policy,
            live=live,
            config=config,
            address=address,
            tokens=tokens,
            say=say,
        ) as running:
            while not stop.wait(0.5):
                running.check()
    finally:
        sys.setswitchinterval(switch_before)


def _port(server: object, asked: int) -> int:
    """The port the server listens on (the one picked where 0 was asked)."""
    with contextlib.suppress(Exception):
        sockets = server.servers[0].sockets  # type: ignore[attr-defined]
        return int(sockets[0].getsockname()[1])
    return asked
