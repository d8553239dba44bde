"""Connecting to Ray (unstall.ray_connect): a Ctrl-C while Ray starts is held until the start
is over, then Ray is stopped and the interrupt raised, never a crash half-way through (a second
one stops at once); an address where something other than Ray listens is refused in seconds."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from interrupting import default_signals
from unstall.errors import UnstallError
from unstall.ray_connect import check_reachable


def run_script(script: str, timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
    """``script`` in a fresh Python with no RAY_ADDRESS (a local Ray, on loopback)."""
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    env.pop("RAY_ADDRESS", None)
    return subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        preexec_fn=default_signals,  # its Ctrl-C is heard also when pytest runs in the background
    )


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
    out = run_script(SCRIPT)
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
    out = run_script(SIGTERM_SCRIPT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().splitlines()[-1] == "kept: True"


HURRY_SCRIPT = """
import os, signal, sys, threading, time
import ray
from unstall.ray_connect import connect_ray

ray.init = lambda *a, **k: time.sleep(120)  # a join that waits on an unanswering cluster
ray.shutdown = lambda: print("shut down")
ctrl_c = lambda: os.kill(os.getpid(), signal.SIGINT)
threading.Timer(0.3, ctrl_c).start()
threading.Timer(0.8, ctrl_c).start()
started = time.monotonic()
try:
    connect_ray(num_cpus=1)
except KeyboardInterrupt:
    print(f"interrupted after {time.monotonic() - started:.0f} s")
    sys.exit(0)
print("not interrupted")
"""


def test_a_second_ctrl_c_stops_a_start_that_hangs() -> None:
    out = run_script(HURRY_SCRIPT, timeout_s=100)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().splitlines()[-2:] == ["shut down", "interrupted after 1 s"]
    # the first Ctrl-C says what it waits for
    assert "stopping once Ray has started (Ctrl-C again to stop now)" in out.stderr


@contextmanager
def listening(answer: bytes | None) -> Iterator[str]:
    """A loopback listener that sends ``answer`` to whoever connects (None: says nothing)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(1024)
                if answer is not None:
                    conn.sendall(answer)
                stop.wait(1.0)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        server.close()


def test_an_address_where_no_ray_listens_is_refused_in_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RAY_USE_TLS", raising=False)
    web_page = b"HTTP/1.1 200 OK\r\n\r\n<html>dashboard</html>"
    with listening(web_page) as address, pytest.raises(UnstallError) as web:
        check_reachable(address)
    message = str(web.value)
    assert message.startswith(f"--address {address}: something listens there but it is not")
    assert "it answered 'HTTP/1.1 '" in message and "8265 is not it" in message
    silent = pytest.raises(UnstallError, match=r"sent no answer to a gRPC greeting within 0.5 s")
    with listening(None) as address, silent:
        check_reachable(address, timeout_s=0.5, origin="RAY_ADDRESS")
    # with TLS on the plain-text greeting would be refused: only the connection is checked
    monkeypatch.setenv("RAY_USE_TLS", "1")
    with listening(None) as address:
        check_reachable(address, timeout_s=0.5)


def test_a_ray_gcs_answers_the_greeting(ray_session: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_USE_TLS", raising=False)
    gcs = ray_session.get_runtime_context().gcs_address
    check_reachable(gcs)  # a Ray GCS is a gRPC server: it answers with its HTTP/2 settings


JOIN_SCRIPT = """
import sys
from unstall.ray_connect import connect_ray
import ray

connect_ray(sys.argv[1])
print("joined:", ray.get(ray.remote(lambda: 40 + 2).remote()))
ray.shutdown()
"""


def test_a_join_refused_for_want_of_a_token_says_how_to_give_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The slow test below's refusal, without a cluster: Ray's AuthenticationError on joining
    becomes one line that names the address and says how to give the token; a Ray that is not
    there gets no such hint."""
    import ray

    from unstall import ray_connect

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray_connect, "check_reachable", lambda *a, **k: None)

    def refuse(*args: object, **kwargs: object) -> None:
        raise ray.exceptions.AuthenticationError("Authentication required: no token found")

    monkeypatch.setattr(ray, "init", refuse)
    with pytest.raises(UnstallError) as refused:
        ray_connect.connect_ray("127.0.0.1:6390")
    said = str(refused.value)
    assert "\n" not in said and "cannot connect to the Ray cluster at 127.0.0.1:6390" in said
    assert "Authentication required" in said and "export RAY_AUTH_MODE=token" in said

    def absent(*args: object, **kwargs: object) -> None:
        raise ConnectionError("Could not find any running Ray instance. Please specify ...")

    monkeypatch.setattr(ray, "init", absent)
    with pytest.raises(UnstallError, match="Could not find any running Ray") as missing:
        ray_connect.connect_ray("127.0.0.1:6390")
    assert "RAY_AUTH_MODE" not in str(missing.value)


@pytest.mark.slow
def test_a_ray_start_cluster_with_token_authentication(tmp_path: Path) -> None:
    # `ray start` turns token authentication on when a token is in $HOME/.ray (a local
    # ray.init writes one). Without RAY_AUTH_MODE=token the driver is refused, and the error
    # line says how to give the token; with it, the run joins. (unstall does not turn token
    # mode on by itself, not even for a loopback cluster: see _connect.) HOME is the test's
    # own, so no token of the machine's is touched.
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text(secrets.token_hex(32))
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "HOME": str(tmp_path)}
    for name in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        env.pop(name, None)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ray_bin = Path(sys.executable).with_name("ray")
    head = subprocess.Popen(
        [str(ray_bin), "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
         "--num-cpus=1", "--include-dashboard=false", "--block"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        address = f"127.0.0.1:{port}"
        for _ in range(60):  # the head takes seconds to listen
            try:
                check_reachable(address, timeout_s=1.0)
                break
            except UnstallError:
                time.sleep(1.0)
        refused = subprocess.run(
            [sys.executable, "-c", JOIN_SCRIPT, address],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert refused.returncode != 0
        assert "export RAY_AUTH_MODE=token" in refused.stderr.splitlines()[-1]
        joined = subprocess.run(
            [sys.executable, "-c", JOIN_SCRIPT, address],
            env={**env, "RAY_AUTH_MODE": "token"}, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert joined.returncode == 0, joined.stdout + joined.stderr
        assert joined.stdout.strip().splitlines()[-1] == "joined: 42"
    finally:
        os.killpg(head.pid, signal.SIGTERM)  # --block stops its processes with it
        head.wait(timeout=180)  # its processes take half a minute to stop


def test_a_runtime_env_for_a_ray_already_started_is_not_dropped_silently(
    ray_session: Any,
) -> None:
    from unstall.ray_connect import connect_ray

    with pytest.warns(UserWarning, match=r"runtime environment .*working_dir.* is not applied"):
        assert connect_ray(runtime_env={"working_dir": "."}) is False
    assert connect_ray() is False  # nothing to say without one
