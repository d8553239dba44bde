"""Ray started by the tests and by `unstall ps` listens on loopback only."""

from __future__ import annotations

from typing import Any


def test_local_ray_uses_the_loopback_address(ray_session: Any) -> None:
    addresses = {node["NodeManagerAddress"] for node in ray_session.nodes()}
    assert addresses == {"127.0.0.1"}
