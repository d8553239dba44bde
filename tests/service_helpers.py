"""What the service's tests share: a service over a fresh store whose scheduler is built but not
started (no Ray: its executors never come up), its cluster two emulated nodes of 2 GPUs; that
service's app answering HTTP on 127.0.0.1 in a thread, for a real browser; and a real `unstall
serve` process on a local emulated cluster, with what waits for it."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import uvicorn

from live_runs import live_env
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


def unstarted_service(
    store: Path, tokens: dict[str, Caller] | None = None, config: LiveConfig | None = None
) -> Service:
    """A service over ``store`` whose scheduler is not started (no Ray); ``config``: how it
    would run its jobs (default: emulated compute)."""
    job_store = JobStore(store)
    scheduler = Scheduler(
        store=job_store,
        topology=two_nodes().topology,  # type: ignore[attr-defined]
        policy=make_policy("fifo"),
        config=config if config is not None else LiveConfig(),
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


# Wall seconds a service gets to answer after it starts (a local Ray cluster on a busy machine).
START_S = 240.0


def serve_process(
    store: Path, cluster: Path, log: Path, *extra: str
) -> tuple[subprocess.Popen[bytes], str]:
    """A service on ``store``, its output in ``log``; returns it and its URL once it answers."""
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
                "--checkpoint-every-s",
                "0.5",
                *extra,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=live_env(),
            preexec_fn=stopped_with_the_tests,
        )
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline and process.poll() is None:
        found = re.search(r"serving on (http://127\.0\.0\.1:\d+)", log.read_text())
        if found:
            return process, found.group(1)
        time.sleep(0.1)
    process.kill()
    raise AssertionError("the service did not answer:\n" + log.read_text())


def stopped_with_the_tests() -> None:
    """``preexec_fn`` of a service a test starts: a SIGTERM when the test process ends (Linux's
    parent-death signal), which the service takes as a stop and ends its local Ray with it. A
    test run killed at its time limit never reaches the tests' own stops, and left services and
    their Ray clusters running, gigabytes of them."""
    if sys.platform == "linux":
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def real_serve_process(
    tmp_path: Path, cluster: Path, *extra: str
) -> tuple[subprocess.Popen[bytes], str, Path]:
    """A real-compute service at speedup 1 (store and log in ``tmp_path``) whose processes, and
    those of its Ray, inherit UNSTALL_TEST_MARKER: a user's file that writes its importer's pid
    there tells which processes loaded it. Returns the service, its URL and the marker file."""
    marker = tmp_path / "imported-by"
    os.environ["UNSTALL_TEST_MARKER"] = str(marker)
    try:
        process, url = serve_process(
            tmp_path / "store",
            cluster,
            tmp_path / "serve.log",
            "--compute",
            "real",
            "--speedup",
            "1",
            *extra,
        )
    finally:
        del os.environ["UNSTALL_TEST_MARKER"]
    return process, url, marker


def jobs_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``unstall jobs ...`` as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "unstall", "jobs", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=live_env(),
    )


def wait_for(condition: object, timeout_s: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.25)
    said = log.read_text() if log is not None else ""
    raise AssertionError(f"timed out waiting for {what}; the service said:\n{said}")
