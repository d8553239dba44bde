"""The suite's multi-node Ray test cluster (``ray.cluster_utils.Cluster``, on loopback): a head
and one more node, each with two CPUs and two emulated GPUs, labelled node 0 / rack 0 and node
1 / rack 1. The ``ray_test_cluster`` fixture (tests/conftest.py) starts it once a session; this
process never joins it (a driver joins one cluster only, and this process may hold the suite's
local session), tests reach it by its ``address`` from processes of their own."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# The emulated GPUs of its nodes (the live backend's default slot resource).
SLOT = "unstall_gpu"
NODES = 2


def cluster_node_args(node: int) -> dict[str, Any]:
    """Ray's arguments for node ``node`` (0: the head)."""
    return {
        "num_cpus": 2,
        "resources": {SLOT: 2},
        "labels": {"unstall.node": str(node), "unstall.rack": str(node)},
    }


@contextmanager
def ray_tmpdir(folder: str) -> Iterator[None]:
    """``RAY_TMPDIR`` set to ``folder`` while Ray's test-cluster launcher starts nodes: it writes
    the cluster's address there, where a later ``ray.init()`` without an address (the suite's
    own local session, other people's tests on this machine) would otherwise find and join it.
    Short: Ray's socket paths live under it and must stay under 108 characters."""
    before = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = folder
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = before


@contextmanager
def started_test_cluster() -> Iterator[Any]:
    """The cluster, shut down and its folder removed on leaving."""
    from ray.cluster_utils import Cluster

    folder = tempfile.mkdtemp(prefix="us-", dir="/tmp")
    try:
        with ray_tmpdir(folder):
            cluster = Cluster(
                initialize_head=True,
                connect=False,
                head_node_args={**cluster_node_args(0), "include_dashboard": False},
            )
        try:
            for node in range(1, NODES):
                add_node(cluster, node, folder)
            cluster.wait_for_nodes(timeout=120)
            cluster.unstall_tmpdir = folder
            yield cluster
        finally:
            cluster.shutdown()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def add_node(cluster: Any, node: int, folder: str | None = None) -> None:
    """Add node ``node`` (again: a test that took it away gives it back)."""
    with ray_tmpdir(folder or cluster.unstall_tmpdir):
        cluster.add_node(**cluster_node_args(node))
