"""`unstall serve` for real: a service on a local emulated cluster, jobs submitted through the
client and the CLI, a ``kill -9`` in the middle of a run, and a restart on the same store.

After the kill the restarted service finds every job, the one that was running resumes from its
last durable checkpoint (a ``requeued`` event says so), no job runs twice at once, every job
succeeds exactly once with exactly its iterations, and what the killed service left running
(its local Ray's processes, its executors) is gone.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from live_runs import TWO_NODES
from service_helpers import START_S, jobs_cli, serve_process, wait_for
from unstall.live.executor import CheckpointStore
from unstall.service import Client


def _folder_of(pid: int) -> str | None:
    """The local Ray folder (RAY_TMPDIR of all its processes) whose owner is ``pid``."""
    for folder in Path("/tmp").glob("us-live-*"):
        try:
            if int((folder / "owner.pid").read_text()) == pid:
                return str(folder)
        except (OSError, ValueError):
            continue
    return None


def _alive_in(folder: str) -> int:
    marker = f"RAY_TMPDIR={folder}".encode()
    count = 0
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                count += 1
        except OSError:
            continue
    return count


def test_a_killed_service_loses_nothing_and_runs_no_job_twice(tmp_path: Path) -> None:
    cluster = tmp_path / "two.toml"
    cluster.write_text(TWO_NODES)
    store = tmp_path / "store"
    log = tmp_path / "serve.log"
    first, url = serve_process(store, cluster, log)
    try:
        client = Client(url, user="ann")
        # Long enough to be killed mid-run: 600 run seconds at speedup 20 = 30 wall seconds.
        long = client.submit(gpus=2, model="resnet50", duration_s=600.0, name="long")
        short = client.submit(gpus=2, model="resnet50", duration_s=40.0, name="short")
        queued = client.submit(gpus=4, model="vgg16", duration_s=40.0, name="wide")
        listed = jobs_cli("list", "--server", url)
        assert listed.returncode == 0 and "long" in listed.stdout, listed.stdout + listed.stderr
        assert client.get(queued.id).state == "pending"
        # The API answers before the cluster is up: the job starts once the executors are.
        wait_for(
            lambda: client.get(long.id).state == "running",
            START_S,
            "the first start",
            log,
        )
        # While the wide job waits: why, in fifo's words, and when it starts, from a forecast.
        wait_for(lambda: client.get(queued.id).estimated_start is not None, 30, "an estimate", log)
        waiting = client.get(queued.id)
        assert waiting.state == "pending", waiting
        assert "waiting for GPUs: needs 4" in waiting.reason, waiting.reason
        assert waiting.estimated_end is not None and waiting.estimated_start is not None
        assert waiting.estimated_end > waiting.estimated_start
        assert waiting.estimated_start_at_submit is not None
        whatif = jobs_cli("whatif", "--policy", "consolidate", "--server", url)
        assert whatif.returncode == 0 and "fifo (serving)" in whatif.stdout, whatif.stderr
        wait_for(lambda: (store / "checkpoints" / f"{long.id}.ckpt").exists(), 60, "a checkpoint")
        assert client.get(long.id).state == "running"
        folder = _folder_of(first.pid)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    held = CheckpointStore(str(store / "checkpoints")).iteration(long.id)
    assert held > 0
    assert folder is not None
    assert _alive_in(folder) > 0  # what a kill -9 leaves behind ...

    log.write_text("")
    # Another policy on the restart: the jobs are the store's, not the policy's.
    second, url = serve_process(store, cluster, log, "--policy", "first-fit")
    try:
        assert _alive_in(folder) == 0  # ... the next service ends
        client = Client(url, user="ann")
        assert client.cluster().policy == "first-fit"
        wait_for(lambda: client.stats()["ready"], START_S, "the executors", log)
        # Resumed from its checkpoint: at least the iterations it held when it was killed.
        assert client.get(long.id).iterations_done >= held
        for job in (long, short, queued):
            done = client.wait(job.id, timeout_s=240)
            assert done.state == "succeeded", done
            assert done.iterations_done == pytest.approx(done.iterations_total)
        events = client.get(long.id).events
        kinds = [e.kind for e in events]
        assert "requeued" in kinds and kinds.count("succeeded") == 1
        # Never started again while it ran: each start follows a stop of some kind.
        running = False
        for kind in kinds:
            if kind in ("started",):
                assert not running, kinds
                running = True
            elif kind in ("preempted", "failed", "requeued", "succeeded"):
                running = False
        assert client.get(long.id).restarts >= 1
        # Another user may not cancel it; its own user is told it has ended.
        other = jobs_cli("cancel", long.id, "--server", url, "--user", "bob")
        assert other.returncode == 1 and "403" in other.stderr and "ann" in other.stderr
        cancel = jobs_cli("cancel", long.id, "--server", url, "--user", "ann")
        assert cancel.returncode == 1 and "ended" in cancel.stderr
    finally:
        # A stop as a job scheduler or `kill` sends it: the service's own (as on Ctrl-C), not
        # the one Ray's local nodes install (drain each node 30 s, then exit 1).
        second.send_signal(signal.SIGTERM)
        second.wait(60)
    assert second.returncode == 130
    assert "every job is kept in the store" in log.read_text()
    assert "draining" not in log.read_text()
