"""Helpers of the service's end-to-end tests: a `unstall serve` process on a local emulated
cluster, and waiting for what it does."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

from live_runs import live_env

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
        )
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline and process.poll() is None:
        found = re.search(r"serving on (http://127\.0\.0\.1:\d+)", log.read_text())
        if found:
            return process, found.group(1)
        time.sleep(0.1)
    process.kill()
    raise AssertionError("the service did not answer:\n" + log.read_text())


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
