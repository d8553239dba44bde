"""Faults of a live run on the suite's test cluster, timed by events rather than sleeps: a
Ctrl-C once the first job has finished, and a node taken away once both jobs run on it and the
other. A policy (``MARKING_FIFO``) writes a file at the moment the run is where the test needs
it; the test acts when the file appears."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from live_runs import (
    MARKING_FIFO,
    TWO_NODES,
    executors_left,
    live_env,
    ray_node_of,
    wait_for_file,
)
from ray_cluster import add_node

LONG_TRACE = """\
job_id,submit_s,num_gpus,duration_s,model
short,0,1,5,mlp
long,0,2,100000,resnet50
waits,0,4,60,mlp
"""


def _start(
    tmp_path: Path, trace: str, address: str, marker: dict[str, str], *extra: str
) -> subprocess.Popen[str]:
    """``unstall live run`` of ``trace`` under MarkingFifo with ``marker``'s options."""
    (tmp_path / "two.toml").write_text(TWO_NODES)
    (tmp_path / "trace.csv").write_text(trace)
    (tmp_path / "marking.py").write_text(MARKING_FIFO)
    args = ["live", "run", "--policy", "marking.py:MarkingFifo", "--trace", "trace.csv"]
    args += ["--cluster", "two.toml", "--address", address, "--json", "live.json", *extra]
    for key, value in marker.items():
        args += ["--policy-option", f"{key}={value}"]
    return subprocess.Popen(
        [sys.executable, "-m", "unstall", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=live_env(),
        cwd=tmp_path,
        # The child must act on Ctrl-C whatever this process ignores (a background job's shell
        # ignores SIGINT, and children inherit that).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def test_ctrl_c_stops_every_process_and_writes_what_finished(
    ray_test_cluster: Any, tmp_path: Path
) -> None:
    address = ray_test_cluster.address
    marker = {"marker": str(tmp_path / "short-done"), "finished": "1", "running": "1"}
    child = _start(
        tmp_path, LONG_TRACE, address, marker, "--speedup", "10", "--jobs-out", "jobs.csv"
    )
    wait_for_file(tmp_path / "short-done", child)  # the short job finished, the long one runs
    child.send_signal(signal.SIGINT)
    output, _ = child.communicate(timeout=120)
    assert child.returncode == 130, output
    assert "interrupted:" in output and "Traceback" not in output, output
    body = json.loads((tmp_path / "live.json").read_text())
    assert body["live"]["interrupted"] is True
    assert body["result"]["jobs_finished"] == 1
    assert executors_left(address, tmp_path) == []
    # The 4-GPU job waited behind the long one from its arrival to the Ctrl-C, never 0.
    jobs = pd.read_csv(tmp_path / "jobs.csv").set_index("job_id")
    assert jobs.loc["waits", "outcome"] == "unfinished" and jobs.loc["waits", "queue_s"] > 1


TWO_JOBS = """\
job_id,submit_s,num_gpus,duration_s,model
a,0,2,40,resnet50
b,0,2,40,resnet50
"""


def test_a_node_that_leaves_sends_its_jobs_back_and_the_run_goes_on(
    ray_test_cluster: Any, tmp_path: Path
) -> None:
    """It takes node 1 away from the shared cluster, and gives it back."""
    address = ray_test_cluster.address
    node_1 = next(
        node
        for node in ray_test_cluster.worker_nodes
        if node.node_id == ray_node_of(address, "1", tmp_path)
    )
    # Both jobs have run for a trace second (a tenth of a wall second), one on each node.
    marker = {"marker": str(tmp_path / "both-run"), "running": "2"}
    child = _start(
        tmp_path, TWO_JOBS, address, marker, "--speedup", "10", "--jobs-out", "jobs.out.csv"
    )
    try:
        wait_for_file(tmp_path / "both-run", child)
        ray_test_cluster.remove_node(node_1, allow_graceful=False)
        output, _ = child.communicate(timeout=300)
    finally:
        add_node(ray_test_cluster, 1)
        ray_test_cluster.wait_for_nodes(timeout=120)
    assert child.returncode == 0, output
    assert "node 1 left the cluster" in output, output
    body = json.loads((tmp_path / "live.json").read_text())
    assert body["live"]["nodes_lost"] == [1]
    assert body["result"]["jobs_finished"] == 2
    jobs = pd.read_csv(tmp_path / "jobs.out.csv")
    moved = jobs[jobs["failures"] > 0]
    # It failed on node 1 (once, or again while Ray had not yet noticed that the node had gone)
    # and finished on node 0.
    assert len(moved) == 1, jobs
    placements = moved.iloc[0]["placements"].split()
    assert placements[0] == "1:2" and placements[-1] == "0:2", placements
