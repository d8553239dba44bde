"""Connecting to Ray (unstall.ray_connect): a Ctrl-C while Ray starts is held until the start
is over, then Ray is stopped and the interrupt raised, never a crash half-way through."""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
import os, signal, sys, threading
import ray
from unstall.ray_connect import connect_ray

started = []
real_init = ray.init
ray.init = lambda *a, **k: started.append(real_init(*a, **k))  # returns only once Ray is up
threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
try:
    connect_ray(num_cpus=1)
except KeyboardInterrupt:
    print("interrupted; start finished:", bool(started), "; ray running:", ray.is_initialized())
    sys.exit(0)
print("not interrupted")
"""


def test_ctrl_c_while_ray_starts_stops_it_cleanly() -> None:
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    env.pop("RAY_ADDRESS", None)
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=180
    )
    assert out.returncode == 0, out.stdout + out.stderr  # not killed by a signal (SIGSEGV: -11)
    last = out.stdout.strip().splitlines()[-1]
    assert last == "interrupted; start finished: True ; ray running: False", out.stderr


SIGTERM_SCRIPT = """
import signal
import ray
from unstall.ray_connect import connect_ray

def mine(signum, frame):
    raise KeyboardInterrupt

signal.signal(signal.SIGTERM, mine)
connect_ray(num_cpus=1)
print("kept:", signal.getsignal(signal.SIGTERM) is mine)
ray.shutdown()
"""


def test_a_programs_sigterm_handler_survives_rays_start() -> None:
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    env.pop("RAY_ADDRESS", None)
    out = subprocess.run(
        [sys.executable, "-c", SIGTERM_SCRIPT], env=env, capture_output=True, text=True, timeout=180
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().splitlines()[-1] == "kept: True"
