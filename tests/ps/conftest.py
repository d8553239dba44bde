"""Ray-side fixtures of the parameter-server tests: one actor pool for the module's runs, a tiny
model and fast links, so that a run of a few iterations takes about a second."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ps_helpers import FAST_SCENARIO


@pytest.fixture(scope="module")
def ps_pool(ray_session: Any) -> Iterator[Any]:
    from unstall.ps.runtime import session_pool

    # The session's pool, which the CLI's commands use too: worker processes (each imports
    # torch, seconds) start once for the whole test session.
    yield session_pool()


@pytest.fixture(scope="session")
def fast_scenario() -> Any:
    """Three servers on fast links, server 2 slower: emulation on, but quick."""
    from unstall.ps.scenarios import scenario_from_mapping

    return scenario_from_mapping(FAST_SCENARIO, "fast.json")
