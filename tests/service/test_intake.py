"""How submissions come in: the group commit that lets submissions arriving together share one
transaction, the store's batch of jobs, and the scheduler's intake of a batch (built at once,
at most MAX_INTAKE an instant), without a Ray cluster."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from service_helpers import unstarted_service
from unstall.service.group_commit import GroupCommit
from unstall.service.models import JobSpec
from unstall.service.scheduler import MAX_INTAKE
from unstall.service.service import Caller
from unstall.service.store import JobStore


class _Writes:
    """A write that records its batches; the first one waits until ``release`` is set."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, items: Sequence[int]) -> list[int]:
        self.started.set()
        self.release.wait(10)
        self.batches.append(list(items))
        return [10 * item for item in items]


def test_submissions_arriving_during_a_commit_share_the_next_one() -> None:
    writes = _Writes()
    commit: GroupCommit[int, int] = GroupCommit(writes, name="test-commit")
    results: dict[int, int] = {}

    def submit(item: int) -> None:
        results[item] = commit.submit(item)

    first = threading.Thread(target=submit, args=(1,))
    first.start()
    assert writes.started.wait(10)  # item 1 is being written ...
    rest = [threading.Thread(target=submit, args=(i,)) for i in (2, 3, 4, 5)]
    for thread in rest:
        thread.start()
    deadline = time.monotonic() + 10
    while commit._waiting.qsize() < 4 and time.monotonic() < deadline:  # ... while 4 wait
        time.sleep(0.01)
    writes.release.set()
    for thread in [first, *rest]:
        thread.join(10)
    commit.close()
    assert writes.batches[0] == [1]
    assert sorted(writes.batches[1]) == [2, 3, 4, 5]  # one transaction for the four
    assert results == {1: 10, 2: 20, 3: 30, 4: 40, 5: 50}  # each its own result
    assert (commit.batches, commit.items) == (2, 5)


def test_a_failed_write_fails_each_waiter_of_its_batch_and_the_writer_goes_on() -> None:
    calls = []

    def write(items: Sequence[str]) -> list[str]:
        calls.append(list(items))
        if "bad" in items:
            raise OSError("disk full")
        return [item.upper() for item in items]

    commit: GroupCommit[str, str] = GroupCommit(write, name="test-commit")
    with pytest.raises(OSError, match="disk full"):
        commit.submit("bad")
    assert commit.submit("good") == "GOOD"
    commit.close()
    assert calls == [["bad"], ["good"]]


def test_a_write_must_answer_each_item() -> None:
    commit: GroupCommit[int, int] = GroupCommit(lambda items: [], name="test-commit")
    with pytest.raises(RuntimeError, match="0 results for 1 items"):
        commit.submit(7)
    commit.close()


def test_waiters_in_an_event_loop_get_their_own_results() -> None:
    batches: list[int] = []

    def write(items: Sequence[int]) -> list[int]:
        batches.append(len(items))
        time.sleep(0.01)  # a commit takes a while: the others queue meanwhile
        return [item + 1 for item in items]

    commit: GroupCommit[int, int] = GroupCommit(write, name="test-commit")

    async def many() -> list[int]:
        return list(await asyncio.gather(*(commit.submit_async(i) for i in range(50))))

    # A loop of its own in a thread of its own (another test's may be running in this one).
    found: list[int] = []
    runner = threading.Thread(target=lambda: found.extend(asyncio.run(many())))
    runner.start()
    runner.join(30)
    assert found == list(range(1, 51))
    commit.close()
    assert sum(batches) == 50 and len(batches) < 50  # some shared a transaction


def test_a_closed_group_commit_takes_nothing() -> None:
    commit: GroupCommit[int, int] = GroupCommit(lambda items: list(items), name="test-commit")
    assert commit.submit(3) == 3
    commit.close()
    with pytest.raises(RuntimeError, match="closed"):
        commit.submit(4)


def _spec(**fields: object) -> JobSpec:
    base: dict[str, object] = {"gpus": 1, "model": "resnet50", "duration_s": 60.0, "user": "ann"}
    return JobSpec(**{**base, **fields})  # type: ignore[arg-type]


def test_a_batch_is_stored_in_one_go_with_ids_after_the_stored_ones(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    assert store.submit(_spec(name="a"), at=1.0) == "job-1"
    ids = store.submit_many(
        [(_spec(name="b"), 2.0), (_spec(name="c", files={"x.py": "X = 1"}), 2.0)]
    )
    assert ids == ["job-2", "job-3"] and store.submit_many([]) == []
    found = JobStore(tmp_path).load()
    assert [(j.id, j.spec.name, j.submitted_at) for j in found.values()] == [
        ("job-1", "a", 1.0),
        ("job-2", "b", 2.0),
        ("job-3", "c", 2.0),
    ]
    assert all([e.kind for e in j.events] == ["submitted"] for j in found.values())
    assert (store.code_dir("job-3") / "x.py").read_text() == "X = 1"
    assert store.submit(_spec(name="d"), at=3.0) == "job-4"


def test_each_submission_of_a_batch_has_its_place_after_those_not_taken_in(
    tmp_path: Path,
) -> None:
    service = unstarted_service(tmp_path / "store")  # its scheduler takes nothing in
    first = service.submit(_spec(name="a"), Caller("ann", admin=False))
    batch = service.submit_many([_spec(name="b"), _spec(name="c")])
    assert [first.position, *(r.position for r in batch)] == [1, 2, 3]
    listed = {r.name: r.position for r in service.jobs()}
    assert listed == {"a": 1, "b": 2, "c": 3}
    # A service started again finds them pending; a new one comes after them.
    again = unstarted_service(tmp_path / "store")
    assert again.submit(_spec(name="d"), Caller("ann", admin=False)).position == 4


def test_a_batch_taken_in_builds_the_same_jobs_as_one_by_one(tmp_path: Path) -> None:
    service = unstarted_service(tmp_path / "store")
    scheduler = service.scheduler
    specs = [
        _spec(gpus=1, model="resnet50", duration_s=600.0),
        _spec(gpus=2, model="vgg16", duration_s=300.0, priority=5),
        _spec(gpus=2, model="vgg16", iterations=1000, duration_s=None),
        _spec(gpus=1, model="resnet50", duration_s=30.0),
    ]
    service.submit_many(specs)
    assert not scheduler.take_inbox(0.0)  # no cancel among them
    jobs = [scheduler.core.by_id[f"job-{i}"] for i in range(1, 5)]
    assert [j.index for j in jobs] == [0, 1, 2, 3]
    for job, spec in zip(jobs, specs, strict=True):
        assert job.model == spec.model and job.num_gpus == spec.gpus
        assert job.priority == spec.priority
        cons = scheduler.speed.consolidated_iter_s(job.model, job.num_gpus)
        assert job.cons_iter_s == pytest.approx(cons)
        iterations = spec.iterations if spec.iterations is not None else spec.duration_s / cons
        assert job.duration_s == pytest.approx(iterations * cons)
        work = scheduler.records[job.job_id].work
        assert work is not None and work.iterations == pytest.approx(job.work_iters)
        assert work.log_path == str(service.store.log_path(job.job_id))


def test_a_burst_is_taken_in_max_intake_an_instant(tmp_path: Path) -> None:
    service = unstarted_service(tmp_path / "store")
    scheduler = service.scheduler
    service.submit_many([_spec()] * (MAX_INTAKE + 3))
    scheduler.take_inbox(0.0)
    assert len(scheduler.core.jobs) == MAX_INTAKE and scheduler.intake_left
    scheduler.take_inbox(0.0)
    assert len(scheduler.core.jobs) == MAX_INTAKE + 3 and not scheduler.intake_left
    # A job handed over twice (stored just before the scheduler started: found in the store
    # and in the inbox) is added once.
    scheduler.submit("job-1", _spec(), 0.0)
    scheduler.take_inbox(0.0)
    assert len(scheduler.core.jobs) == MAX_INTAKE + 3


def test_a_cancel_after_a_submission_in_the_same_instant_finds_its_job(tmp_path: Path) -> None:
    service = unstarted_service(tmp_path / "store")
    scheduler = service.scheduler
    record = service.submit(_spec(), Caller("ann", admin=False))
    scheduler.cancel(record.id, "ann")
    service.submit(_spec(), Caller("ann", admin=False))
    assert scheduler.take_inbox(0.0)  # the cancel took effect: its job was added before it
    assert len(scheduler.core.jobs) == 2
