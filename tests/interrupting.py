"""Ctrl-C as a terminal sends it: SIGINT to the whole process group of a CLI command started in
a session of its own, at a moment the command itself announces (a marker file appears). Then
what remains: every process that inherited the run's tag in its environment (the command's
children, Ray's processes, spawned workers) must be gone."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TAG = "UNSTALL_INTERRUPT_TEST"  # the environment variable that marks a run's processes


@dataclass(frozen=True)
class Interrupted:
    returncode: int
    stdout: str
    stderr: str
    left: list[str]  # "PID command" of the run's processes still alive after it exited


def default_signals() -> None:
    """``preexec_fn`` of a child that a test interrupts: SIGINT and SIGTERM as a fresh shell
    gives them, whatever this process inherited. A background job (``cmd &``, ``nohup``) runs
    with SIGINT ignored, and a Python started with SIGINT ignored keeps ignoring it (it installs
    its KeyboardInterrupt handler only over the default): the child would never see Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def interrupt_when(
    args: list[str],
    marker: Path,
    *,
    cwd: Path,
    env: dict[str, str] | None = None,
    signum: int = signal.SIGINT,
    group: bool = True,
    start_s: float = 120.0,
    stop_s: float = 60.0,
) -> Interrupted:
    """Run ``unstall ARGS`` in ``cwd`` (with ``env`` added to this environment); once ``marker``
    exists send ``signum`` to its process group (``group``: as a terminal's Ctrl-C does) or to
    the command alone (as ``kill`` does), wait for it to exit (at most ``stop_s``) and look for
    its processes left behind."""
    tag = uuid.uuid4().hex
    env = os.environ | (env or {}) | {TAG: tag, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "unstall", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=default_signals,
    )
    try:
        deadline = time.monotonic() + start_s
        while not marker.exists():
            if proc.poll() is not None:
                out, err = proc.communicate()
                raise AssertionError(f"ended before the marker, rc {proc.returncode}: {out}{err}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no marker {marker} after {start_s} s")
            time.sleep(0.05)
        if group:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        out, err = proc.communicate(timeout=stop_s)
    except BaseException:
        _kill_all(tag)
        raise
    left = _wait_gone(tag, wait_s=10.0)
    _kill_all(tag)  # what the assertion will report must not outlive the test
    return Interrupted(proc.returncode, out, err, left)


def _tagged(tag: str) -> list[tuple[int, str]]:
    """The live processes whose environment carries ``TAG=tag``."""
    needle = f"{TAG}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile, or not ours
            continue
        if needle in environ.split(b"\0") and "\nState:\tZ" not in status:
            found.append((int(entry.name), cmdline[:120]))
    return found


def _wait_gone(tag: str, wait_s: float) -> list[str]:
    deadline = time.monotonic() + wait_s
    while (alive := _tagged(tag)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [f"{pid} {cmd}" for pid, cmd in alive]


def _kill_all(tag: str) -> None:
    for pid, _ in _tagged(tag):
        with contextlib.suppress(OSError):  # gone meanwhile
            os.kill(pid, signal.SIGKILL)
