"""Connecting to Ray, for every part that runs work on it (the parameter server's runs, the
simulator's sweeps): one way to start a local Ray, join a cluster, check an address, and turn a
remote error into one line.

:func:`connect_ray` joins an existing cluster (``address`` or ``RAY_ADDRESS``) or starts a new
local Ray on the loopback interface: the one way every part starts or joins Ray, and the one
place that sets Ray's environment flags (:data:`RAY_FLAGS`). A local Ray it starts imports what
the driver imports: the folders the driver added to ``sys.path`` reach its workers (a cluster's
nodes get a folder through Ray's runtime environment instead: :func:`working_dir_env`).
:func:`check_reachable` fails in seconds when nothing listens at an address; :func:`first_line`
and :func:`root_cause` unwrap a remote task's error.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import signal
import socket
import sys
import sysconfig
import threading
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

# RAY_FLAGS's loopback flag: Ray reads it when imported, so it is set before the import below
# (and again, in Ray's constants, when Ray starts: Ray may have been imported before this).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import ray
from ray.exceptions import RayTaskError

from unstall.errors import ConfigError, UnstallError

# Ray's environment flags that unstall sets, all here (a flag the user set is kept):
# - loopback: a local Ray advertises 127.0.0.1, not the machine's first network address, with
#   its multi-node mode off (turned back on to join a cluster on other machines);
# - zero-copy: torch tensors cross the object store without a copy (the parameter server's;
#   only where asked, since it makes every Ray worker import torch).
LOOPBACK_FLAG = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
ZERO_COPY_FLAG = "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS"
RAY_FLAGS = {LOOPBACK_FLAG: "0", ZERO_COPY_FLAG: "1"}


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


def connect_ray(
    address: str | None = None,
    num_cpus: int | None = None,
    object_store_bytes: int | None = None,
    runtime_env: Mapping[str, Any] | None = None,
    *,
    torch_tensors: bool = False,
) -> bool:
    """Connect to Ray: ``address`` (or ``RAY_ADDRESS``) for an existing cluster, with
    ``runtime_env`` (Ray's runtime environment: ``working_dir``, ``py_modules``, ...), else a
    new local instance on the loopback interface (with ``num_cpus`` and an object store of
    ``object_store_bytes``; None: Ray's defaults), also when a Ray started with ``ray start``
    runs on this machine: without an address nothing joins a cluster by surprise. True when
    this call connected or started it (to shut down after); False when this process was
    connected already (a ``runtime_env`` then cannot be applied: Ray takes it only when it
    starts, so a warning says so). ``torch_tensors``: torch tensors cross the object store
    without a copy (every Ray worker then imports torch). A local Ray started here gets the
    folders this process added to ``sys.path`` on its workers' ``PYTHONPATH``, so a function
    imported from one runs there too."""
    if ray.is_initialized():
        if runtime_env:
            warnings.warn(
                f"Ray was started in this process before: the runtime environment "
                f"{dict(runtime_env)!r} is not applied (give it to ray.init(runtime_env=...), "
                "or let unstall start Ray)",
                stacklevel=3,
            )
        return False
    _set_flags(torch_tensors)
    with _interrupt_held(), sigterm_kept():
        return _connect(address, num_cpus, object_store_bytes, runtime_env)


def _flag_on(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true")


def _set_flags(torch_tensors: bool) -> None:
    """:data:`RAY_FLAGS` into the environment (for the processes a local Ray starts) and into
    Ray's constants (for this process, which read them when Ray was imported)."""
    from ray._private import ray_constants

    os.environ.setdefault(LOOPBACK_FLAG, RAY_FLAGS[LOOPBACK_FLAG])
    ray_constants.ENABLE_RAY_CLUSTER = _flag_on(LOOPBACK_FLAG)
    if torch_tensors:
        os.environ.setdefault(ZERO_COPY_FLAG, RAY_FLAGS[ZERO_COPY_FLAG])
        ray_constants.RAY_ENABLE_ZERO_COPY_TORCH_TENSORS = _flag_on(ZERO_COPY_FLAG)


def driver_path_additions() -> list[str]:
    """The folders on this process's ``sys.path`` that a fresh interpreter of the same Python
    does not have from its own installation (the standard library, site-packages): a script's
    folder, the working folder of ``python -c``/``-m``, what ``PYTHONPATH`` or the program
    added. Absolute, in ``sys.path``'s order, existing ones only."""
    scheme = sysconfig.get_paths()
    own = {
        Path(scheme[key]).resolve()
        for key in ("stdlib", "platstdlib", "purelib", "platlib")
        if key in scheme
    }
    added: list[str] = []
    for entry in sys.path:
        path = Path(entry or os.getcwd()).resolve()
        if not path.is_dir() or any(path == base or base in path.parents for base in own):
            continue
        if str(path) not in added:
            added.append(str(path))
    return added


def _with_driver_path(runtime_env: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``runtime_env`` for a local Ray, with :func:`driver_path_additions` first on its
    workers' ``PYTHONPATH`` (before one the runtime environment or this process gives)."""
    added = driver_path_additions()
    env = dict(runtime_env or {})
    if not added:
        return env or None
    env_vars = dict(env.get("env_vars") or {})
    env_vars["PYTHONPATH"] = _path_with(added, env_vars.get("PYTHONPATH"))
    env["env_vars"] = env_vars
    return env


def _path_with(added: list[str], rest: str | None) -> str:
    rest = rest if rest is not None else os.environ.get("PYTHONPATH")
    return os.pathsep.join([*added, *([rest] if rest else [])])


@contextmanager
def _driver_path_inherited() -> Iterator[None]:
    """:func:`driver_path_additions` first on ``PYTHONPATH`` while a local Ray starts: its
    processes, and the workers they start, inherit it (a runtime environment would do the same
    at seconds more per start). This process's own ``PYTHONPATH`` is put back after."""
    before = os.environ.get("PYTHONPATH")
    added = driver_path_additions()
    if added:
        os.environ["PYTHONPATH"] = _path_with(added, before)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def working_dir_env(
    path: str | Path | None, *, owner: str, field: str = "working_dir"
) -> dict[str, Any] | None:
    """Ray's runtime environment that ships the folder ``path`` to every node and runs there
    in it (``--working-dir``: for user code that imports its own modules on a cluster); None
    for None. A path that is no folder is a :class:`ConfigError` naming ``owner.field``."""
    if path is None:
        return None
    folder = Path(path)
    if not folder.is_dir():
        why = (
            f"a file: give the folder that holds your modules, e.g. {folder.parent}"
            if folder.exists()
            else "nothing is there"
        )
        raise ConfigError(owner, field, f"{path} is not a folder ({why})")
    return {"working_dir": str(folder.resolve())}


def cluster_address(address: str | None) -> str | None:
    """The address of the cluster :func:`connect_ray` joins for ``address``: itself, else
    ``RAY_ADDRESS``; None when it starts a local Ray (for a run's record of where it ran)."""
    return address or os.environ.get("RAY_ADDRESS") or None


def _connect(
    address: str | None,
    num_cpus: int | None,
    object_store_bytes: int | None,
    runtime_env: Mapping[str, Any] | None,
) -> bool:
    origin = "--address" if address else "RAY_ADDRESS"
    address = cluster_address(address)
    common: dict[str, Any] = {"log_to_driver": False, "configure_logging": False}
    if address:
        check_reachable(address, origin=origin)
        if not is_loopback(address):
            from ray._private import ray_constants

            # A cluster across machines needs this node's routable address, not loopback (see
            # above). Never for a loopback address: Ray would then rewrite 127.0.0.1 to
            # the machine's network address, where a loopback cluster does not listen.
            ray_constants.ENABLE_RAY_CLUSTER = True
        try:
            ray.init(address=address, runtime_env=dict(runtime_env or {}) or None, **common)
        except (ConnectionError, RuntimeError, ValueError, ray.exceptions.RayError) as exc:
            # RayError: AuthenticationError, when the driver is in token mode and has no token.
            why = first_line(exc)
            # Ray 2.60's `ray start` turns token authentication on, and a driver without the
            # token is refused: say how to give it, but only where no Ray was found to refuse.
            # Not sent unasked to a loopback cluster either: a driver in token mode also
            # demands the token of the cluster's workers, and a cluster without authentication
            # then fails to fetch the driver's objects (OwnerDiedError).
            if "Could not find any running Ray instance" in why:
                hint = ""
            else:
                hint = (
                    " (a cluster started with `ray start` has token authentication on: export "
                    "RAY_AUTH_MODE=token, with the cluster's token in ~/.ray/auth_token or "
                    "RAY_AUTH_TOKEN)"
                )
            raise UnstallError(
                f"cannot connect to the Ray cluster at {address} ({origin}): {why}{hint}"
            ) from exc
    else:
        # "local": start a new instance even when `ray start` left a cluster on this machine
        # (Ray would join it, and then refuse num_cpus).
        # The driver's folders reach the workers: through the runtime environment when one is
        # given (Ray builds the workers' PYTHONPATH from it), else by inheritance.
        inherited = _driver_path_inherited() if not runtime_env else nullcontext()
        with inherited:
            ray.init(
                address="local",
                runtime_env=_with_driver_path(runtime_env) if runtime_env else None,
                num_cpus=num_cpus or os.cpu_count() or 1,
                include_dashboard=False,
                _node_ip_address="127.0.0.1",
                object_store_memory=object_store_bytes,
                **common,
            )
    return True


@contextmanager
def _interrupt_held() -> Iterator[None]:
    """Hold a Ctrl-C until Ray has started (or joined), then stop it cleanly and raise
    KeyboardInterrupt: interrupted half-way, Ray's start can crash its core (a segmentation
    fault) and leave its processes behind. A second Ctrl-C stops at once (a join can wait on
    an unanswering cluster for minutes; the user then takes the risk). Only the main thread can
    take signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []

    def hold(signum: int, frame: object) -> None:
        caught.append(signum)
        if len(caught) > 1:
            raise KeyboardInterrupt
        sys.stderr.write("stopping once Ray has started (Ctrl-C again to stop now)\n")

    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield
    except KeyboardInterrupt:
        ray.shutdown()
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        ray.shutdown()
        raise KeyboardInterrupt


@contextmanager
def sigterm_kept() -> Iterator[None]:
    """Ray's core installs its own SIGTERM handler when it starts (it prints a stack dump and
    dies), and so does each node a local cluster starts in this process (it drains the node
    for 30 s and exits); a Python handler the program had (the CLI's: stop as on Ctrl-C) is put
    back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if callable(previous):
            signal.signal(signal.SIGTERM, previous)


def split_address(address: str, origin: str = "--address") -> tuple[str, int] | None:
    """``(host, port)`` of a Ray address ``HOST:PORT`` or ``ray://HOST:PORT`` (IPv6 in
    brackets); None for Ray's words ``auto`` and ``local``. A malformed address raises
    :class:`~unstall.errors.UnstallError` saying what is expected, and where the address came
    from (``origin``: the option, or the RAY_ADDRESS variable)."""
    if address in ("auto", "local"):
        return None
    rest = address.split("://", 1)[-1]
    host, sep, port = rest.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UnstallError(
            f"{origin} {address!r}: want HOST:PORT (the head node's address and GCS port, "
            "6379 unless `ray start --head --port` set another) or ray://HOST:PORT"
        )
    return host, int(port)


# The client connection preface of HTTP/2 and an empty SETTINGS frame (RFC 9113, 3.4 and 6.5).
# Ray's GCS and its Ray Client server are gRPC servers, so they answer it with their own
# SETTINGS frame (frame type 4 in the fourth byte of the 9-byte frame header) at once.
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
_SETTINGS_FRAME = 4


def check_reachable(address: str, timeout_s: float = 5.0, *, origin: str = "--address") -> None:
    """Fail in seconds, not minutes of Ray's retries, when nothing listens at ``address``, or
    something that is no Ray cluster does (a web server, Ray's dashboard, another program):
    Ray's join would retry it for minutes. With TLS on (``RAY_USE_TLS``) only the connection
    is checked: the plain-text probe would be refused."""
    parts = split_address(address, origin)
    if parts is None:
        return
    tls = os.environ.get("RAY_USE_TLS", "0").strip().lower() in ("1", "true")
    try:
        with socket.create_connection(parts, timeout=timeout_s) as conn:
            answer = None if tls else _http2_answer(conn, timeout_s)
    except OSError as exc:
        raise UnstallError(
            f"cannot reach the Ray cluster at {address}: {exc.strerror or exc} (is it up? "
            "`ray status --address ADDRESS` tells)"
        ) from exc
    if answer is None or (len(answer) == 9 and answer[3] == _SETTINGS_FRAME):
        return
    if not answer:
        what = f"it sent no answer to a gRPC greeting within {timeout_s:g} s"
    else:
        shown = answer.decode("ascii", "replace").splitlines()[0] if answer.isascii() else ""
        what = f"it answered {shown!r}" if shown.isprintable() and shown else "it answered"
        what += ", not as a gRPC server"
    raise UnstallError(
        f"{origin} {address}: something listens there but it is not a Ray cluster ({what}); "
        "give the head node's GCS address (port 6379 unless `ray start --head --port` set "
        "another; the dashboard's 8265 is not it) or ray://HOST:10001 for Ray Client"
    )


def _http2_answer(conn: socket.socket, timeout_s: float) -> bytes:
    """The first 9 bytes a server sends back to the HTTP/2 preface (fewer when it closes or
    says nothing within ``timeout_s``)."""
    conn.settimeout(timeout_s)
    conn.sendall(_HTTP2_PREFACE)
    answer = b""
    try:
        while len(answer) < 9:
            chunk = conn.recv(9 - len(answer))
            if not chunk:
                break
            answer += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return answer


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
