"""Connecting to Ray, for any part that runs work on it (the simulator's sweeps; the parameter
server has its own copy in ``unstall.ps.runtime``, which could move here).

:func:`connect_ray` joins an existing cluster (``address`` or ``RAY_ADDRESS``) or starts a local
Ray on the loopback interface; :func:`first_line` turns a remote task's error into one line.
"""

from __future__ import annotations

import ipaddress
import os
import re
from typing import Any

# A local Ray advertises 127.0.0.1, not the machine's first network address, with its
# multi-node mode off; Ray reads the flag when imported, so it is set before the import below.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import ray
from ray.exceptions import RayTaskError

from unstall.errors import UnstallError


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


def connect_ray(address: str | None = None, num_cpus: int | None = None) -> bool:
    """Connect to Ray: ``address`` (or ``RAY_ADDRESS``) for an existing cluster, else a local
    instance on the loopback interface with ``num_cpus`` (None: every core). True when this
    call started or joined it (the caller then shuts it down); False when Ray was already
    connected (a test's cluster, a notebook's session)."""
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or None
    common: dict[str, Any] = {"log_to_driver": False, "configure_logging": False}
    if address is None:
        ray.init(
            # "local" starts a Ray of our own: without it Ray joins whatever cluster the
            # machine's /tmp/ray/ray_current_cluster names (another user's test cluster).
            address="local",
            num_cpus=num_cpus or os.cpu_count() or 1,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            **common,
        )
        return True
    if not is_loopback(address):
        from ray._private import ray_constants

        # Across machines this node must advertise a routable address, not loopback.
        ray_constants.ENABLE_RAY_CLUSTER = True
    try:
        ray.init(address=address, **common)
    except (ConnectionError, RuntimeError) as exc:
        raise UnstallError(
            f"cannot connect to the Ray cluster at {address}: {first_line(exc)} "
            "(a cluster started with `ray start` wants RAY_AUTH_MODE=token and its token)"
        ) from exc
    return True


def first_line(exc: BaseException) -> str:
    """The root cause in one line: a remote task's error unwrapped to what the task raised."""
    while isinstance(exc, RayTaskError) and isinstance(exc.cause, BaseException):
        exc = exc.cause
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
