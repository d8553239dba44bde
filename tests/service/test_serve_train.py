"""A user's own training loop submitted to `unstall serve` with its file: it runs in the
executors (never in the service's process), reports into its job's log, and succeeds."""

from __future__ import annotations

import signal
from pathlib import Path

from live_runs import TWO_NODES
from service_helpers import START_S, real_serve_process
from unstall.service import Client

ROOT = Path(__file__).resolve().parents[2]

# The example loop, which also says which process imported it.
MARKED_LOOP = (
    (ROOT / "examples" / "train_loop.py").read_text()
    + """

import os as _os

with open(_os.environ.get("UNSTALL_TEST_MARKER", "/dev/null"), "a") as _marker:
    _marker.write(f"{_os.getpid()}\\n")
"""
)


def test_a_training_loop_with_its_file_runs_in_the_executors_only(tmp_path: Path) -> None:
    cluster = tmp_path / "two.toml"
    cluster.write_text(TWO_NODES)
    service, url, marker = real_serve_process(tmp_path, cluster)
    try:
        client = Client(url, user="ann")
        job = client.submit(
            gpus=2, train="loop.py:train", iterations=200, files={"loop.py": MARKED_LOOP}
        )
        done = client.wait(job.id, timeout_s=START_S)
        assert done.state == "succeeded", done
        assert done.iterations_done == 200
        log, _ = client.logs(job.id)
        assert "rank 0 of 2 starts at step 0" in log and "rank 1 of 2 starts at step 0" in log
        assert "loss" in log  # the loop's reports
        assert "[unstall] succeeded" in log  # the service's own events
        importers = {int(pid) for pid in marker.read_text().split()}
        assert importers and service.pid not in importers
    finally:
        service.send_signal(signal.SIGINT)
        service.wait(120)
