"""Fixtures shared by the whole suite: the public data folder, one local Ray session and one
multi-node Ray test cluster."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import settings

# No per-example deadline anywhere: these are correctness properties, and a deadline only turns a
# busy machine (CI, or a benchmark running beside the tests) into a spurious failure. Speed is
# checked by benchmarks/, not by tests.
settings.register_profile("unstall", deadline=None)
settings.load_profile("unstall")

# Every Ray the tests start (ray.cluster_utils.Cluster nodes included) binds the loopback
# interface only: Ray reads this when it is imported, and a test module may import Ray before
# unstall.ray_connect sets it.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = (REPO_ROOT / ".." / "shared" / "data").resolve()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data, or skip: it holds public data for tests and is not part of the repo."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"needs the public data in {SHARED_DATA}: not present on this machine")
    return SHARED_DATA


def shared_file(*parts: str) -> Path:
    """A file under ../shared/data, or skip the test with the reason."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"needs {path}: not present on this machine")
    return path


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/NAME.py`` as a module (the benchmarks are scripts, not a package), for
    tests of their pure parts."""
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def ray_session() -> Iterator[Any]:
    """One local Ray instance for every test that needs it (starting Ray costs seconds)."""
    ray = pytest.importorskip("ray")
    from unstall.ray_connect import connect_ray

    # A new local instance on loopback, even if `ray start` left one on this machine, with the
    # parameter server's zero-copy tensors; RAY_ADDRESS is not joined by surprise.
    saved = os.environ.pop("RAY_ADDRESS", None)
    try:
        connect_ray(num_cpus=4, torch_tensors=True)
    finally:
        if saved is not None:
            os.environ["RAY_ADDRESS"] = saved
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def ray_test_cluster() -> Iterator[Any]:
    """The suite's one multi-node Ray cluster (see tests/ray_cluster.py), started once a
    session (once per pytest-xdist worker that runs a test needing it) and reached by its
    ``address`` from processes of the tests' own."""
    pytest.importorskip("ray")
    from ray_cluster import started_test_cluster

    with started_test_cluster() as cluster:
        yield cluster
