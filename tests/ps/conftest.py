"""Ray-side fixtures of the parameter-server tests: one actor pool for the module's runs, a tiny
model and fast links, so that a run of a few iterations takes about a second."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def ps_pool(ray_session: Any) -> Iterator[Any]:
    from unstall.ps.coordinator import ActorPool

    pool = ActorPool(worker_cpus=0.25)  # leave CPUs for other Ray users of the session
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def fast_scenario(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Three servers on fast links, server 2 slower: emulation on, but quick."""
    path = tmp_path_factory.mktemp("ps") / "fast.json"
    path.write_text(
        json.dumps(
            {
                "servers": 3,
                "base": {"bandwidth_mb_s": 500.0, "latency_ms": 0.1},
                "phases": [{"start": 0.0, "servers": [{"server": 2, "bandwidth_mb_s": 100.0}]}],
            }
        )
    )
    return str(path)
