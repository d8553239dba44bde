"""Ray started by the tests and by `unstall ps` listens on loopback only, and connecting to a
cluster on loopback keeps Ray's multi-node mode off (on, Ray would rewrite 127.0.0.1 to the
machine's network address, where a loopback cluster does not listen, and hang)."""

from __future__ import annotations

from typing import Any

import pytest

from unstall import ray_connect
from unstall.ps.runtime import ensure_ray
from unstall.ray_connect import is_loopback


def test_local_ray_uses_the_loopback_address(ray_session: Any) -> None:
    addresses = {node["NodeManagerAddress"] for node in ray_session.nodes()}
    assert addresses == {"127.0.0.1"}


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("127.0.0.1:6379", True),
        ("127.0.1.1:6379", True),
        ("localhost:6379", True),
        ("ray://127.0.0.1:10001", True),
        ("[::1]:6379", True),
        ("10.0.0.5:6379", False),
        ("head.example:6379", False),
        ("auto", False),
    ],
)
def test_loopback_addresses(address: str, loopback: bool) -> None:
    assert is_loopback(address) is loopback


@pytest.mark.parametrize(
    ("address", "cluster_mode"), [("127.0.0.1:1", False), ("10.1.2.3:1", True)]
)
def test_multi_node_mode_only_for_an_address_off_this_machine(
    monkeypatch: pytest.MonkeyPatch, address: str, cluster_mode: bool
) -> None:
    import ray
    from ray._private import ray_constants

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(kwargs))
    # No connection attempt (10.1.2.3 is off this machine): only the mode is under test.
    monkeypatch.setattr(ray_connect, "check_reachable", lambda address, **kw: None)
    assert ensure_ray(address) is True
    assert calls[0]["address"] == address
    assert ray_constants.ENABLE_RAY_CLUSTER is cluster_mode
