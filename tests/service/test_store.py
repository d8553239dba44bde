"""The job store: jobs and an append-only event table from which each job's state is rebuilt;
checkpoints as durable files."""

from __future__ import annotations

from pathlib import Path

import pytest

from unstall.errors import ConfigError
from unstall.live.executor import CheckpointStore
from unstall.service.models import JobSpec
from unstall.service.store import JobStore


def _spec(**fields: object) -> JobSpec:
    base: dict[str, object] = {"gpus": 2, "model": "resnet50", "duration_s": 60.0, "user": "ann"}
    return JobSpec(**{**base, **fields})  # type: ignore[arg-type]


def test_state_is_rebuilt_from_the_events_in_order(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    a = store.submit(_spec(name="a"), at=100.0)
    b = store.submit(_spec(name="b"), at=101.0)
    c = store.submit(_spec(name="c", files={"train.py": "def train(ctx): pass\n"}), at=102.0)
    assert (a, b, c) == ("job-1", "job-2", "job-3")
    store.record(
        [
            (a, 110.0, "started", "0:2"),
            (b, 111.0, "started", "1:2"),
            (a, 120.0, "preempted", ""),
            (a, 130.0, "started", "1:1+2:1"),
            (a, 140.0, "migrated", "2:2"),
            (b, 150.0, "succeeded", ""),
            (c, 151.0, "cancel_requested", "ann"),
            (c, 152.0, "cancelled", "ann"),
        ]
    )
    found = JobStore(tmp_path).load()  # another process's view: the same
    assert list(found) == [a, b, c]
    assert (found[a].state, found[a].placement, found[a].restarts) == ("running", "2:2", 2)
    assert found[a].started_at == 110.0 and found[a].ended_at is None
    assert (found[b].state, found[b].ended_at) == ("succeeded", 150.0)
    assert found[c].state == "cancelled" and found[c].cancel_requested
    assert [e.kind for e in found[a].events] == [
        "submitted",
        "started",
        "preempted",
        "started",
        "migrated",
    ]
    assert (store.code_dir(c) / "train.py").read_text().startswith("def train")
    assert found[a].spec.name == "a" and found[a].submitted_at == 100.0


def test_failures_and_restarts_read_back(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    job = store.submit(_spec(), at=1.0)
    store.record(
        [
            (job, 2.0, "started", "0:2"),
            (job, 3.0, "failed", "loss is nan"),
            (job, 4.0, "started", "0:2"),
            (job, 5.0, "requeued", "the service restarted"),
            (job, 6.0, "gave_up", "loss is nan"),
        ]
    )
    found = store.load()[job]
    assert found.state == "failed" and found.error == "loss is nan" and found.restarts == 2


def test_only_sqlite_or_postgresql_urls(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="url"):
        JobStore(tmp_path, url="mysql://db/jobs")


def test_checkpoints_in_a_directory_outlive_their_store(tmp_path: Path) -> None:
    first = CheckpointStore(str(tmp_path))
    first.save("job-1", 10.0, b"ten")
    first.save("job-1", 5.0, b"older")  # an older one never replaces a newer one
    first.save("job-2", 3.5, b"x" * 1000)
    again = CheckpointStore(str(tmp_path))
    assert again.load("job-1") == (10.0, b"ten")
    assert again.iteration("job-2") == 3.5 and again.iteration("job-3") == 0.0
    assert not list(tmp_path.glob("*.tmp"))
