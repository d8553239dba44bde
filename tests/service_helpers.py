"""What the service's tests share: a service over a fresh store whose scheduler is built but not
started (no Ray: its executors never come up), its cluster two emulated nodes of 2 GPUs; and
that service's app answering HTTP on 127.0.0.1 in a thread, for a real browser."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import uvicorn

from unstall.live.cluster import NODE_LABEL, RACK_LABEL, discover
from unstall.live.config import LiveConfig
from unstall.sched import make_policy
from unstall.service.api import create_app
from unstall.service.scheduler import Scheduler
from unstall.service.service import Caller, Service
from unstall.service.store import JobStore


def two_nodes() -> object:
    """Two emulated nodes of 2 GPUs in one rack, as Ray would list them."""
    nodes = [
        {
            "NodeID": f"n{i}",
            "NodeManagerAddress": "127.0.0.1",
            "Alive": True,
            "Resources": {"CPU": 1.0, "unstall_gpu": 2.0},
            "Labels": {NODE_LABEL: str(i), RACK_LABEL: "0"},
        }
        for i in range(2)
    ]
    return discover(nodes, topology=None, slot_resource="unstall_gpu", loopback=True)


def unstarted_service(store: Path, tokens: dict[str, Caller] | None = None) -> Service:
    """A service over ``store`` whose scheduler is not started (no Ray)."""
    job_store = JobStore(store)
    scheduler = Scheduler(
        store=job_store,
        topology=two_nodes().topology,  # type: ignore[attr-defined]
        policy=make_policy("fifo"),
        config=LiveConfig(),
    )
    service = Service(store=job_store, scheduler=scheduler, tokens=tokens)
    service.load()
    return service


@contextlib.contextmanager
def serving(service: Service) -> Iterator[str]:
    """The service's app on 127.0.0.1 (a free port) in a thread; yields its URL."""
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(service), host="127.0.0.1", port=0, log_level="warning", access_log=False
        )
    )
    thread = threading.Thread(target=server.run, name="test-http", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise AssertionError("the test server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


# Wall seconds a service on a local emulated cluster gets to answer (Ray on a busy machine).
SERVE_START_S = 240.0


def start_serve(
    store: Path, cluster: Path, log: Path, *extra: str
) -> tuple[subprocess.Popen[bytes], str]:
    """``unstall serve`` on ``store`` (fifo, speedup 20), its output in ``log``; returns the
    process and its URL once it answers."""
    from live_runs import live_env

    with open(log, "ab") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "unstall",
                "serve",
                "--cluster",
                str(cluster),
                "--store",
                str(store),
                "--port",
                "0",
                "--policy",
                "fifo",
                "--speedup",
                "20",
                *extra,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=live_env(),
        )
    deadline = time.monotonic() + SERVE_START_S
    while time.monotonic() < deadline and process.poll() is None:
        found = re.search(r"serving on (http://127\.0\.0\.1:\d+)", log.read_text())
        if found:
            return process, found.group(1)
        time.sleep(0.1)
    process.kill()
    raise AssertionError("the service did not answer:\n" + log.read_text())
