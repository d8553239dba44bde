"""A user's own training loop, ``train(ctx)``, run as the executors run it (``run_segment``, one
process, gloo on loopback; no Ray): what ``ctx`` gives, stopping and resuming exactly, the
job's log, errors naming the user's line; and the checkpoint store's files."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from live_runs import free_port
from unstall.errors import UnstallError
from unstall.live.executor import CheckpointStore, checkpoint_path
from unstall.live.train_loop import TrainContext
from unstall.live.training import (
    JobWork,
    SegmentControl,
    SegmentOutcome,
    SegmentPlan,
    run_segment,
)
from unstall.usercode import UserCodeError, load_callable

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_loop.py"


def _work(iterations: int, train: Any, **options: Any) -> JobWork:
    return JobWork(
        job_id="j", model="mlp", iterations=float(iterations), emulated=False, seed=3,
        train=train, **options,
    )  # fmt: skip


def _run(
    work: JobWork,
    control: SegmentControl | None = None,
    held: tuple[float, bytes] | None = None,
    kept: list[tuple[float, bytes]] | None = None,
) -> SegmentOutcome:
    plan = SegmentPlan(
        work=work,
        rank=0,
        world_size=1,
        master_addr="127.0.0.1",
        master_port=free_port(),
        start_iteration=held[0] if held else 0.0,
        checkpoint=held[1] if held else None,
        checkpoint_every_s=0.0 if kept is not None else 3600.0,
    )
    keep = None if kept is None else (lambda i, blob: kept.append((i, blob)))
    return run_segment(plan, control or SegmentControl(), keep)


def _state(blob: bytes | None) -> dict[str, Any]:
    assert blob is not None
    held: dict[str, Any] = torch.load(io.BytesIO(blob), weights_only=True)
    return held


class StopAt:
    """The example's loop, with the scheduler's stop request arriving once it has done
    ``step`` steps (set here from the loop's thread; the executor's stop call sets the same
    flag from another)."""

    def __init__(self, control: SegmentControl, step: int) -> None:
        self.control, self.step = control, step
        self.fn = load_callable(f"{EXAMPLE}:train", what="training function")

    def __call__(self, ctx: TrainContext) -> None:
        held = ctx.restore()
        done = [0 if held is None else int(held["step"])]
        agree = ctx.should_stop

        def should_stop() -> bool:
            done[0] += 1  # the example asks once a step, after the step
            if done[0] >= self.step:
                self.control.stop.set()
            return agree()

        ctx.should_stop = should_stop  # type: ignore[method-assign]
        self.fn(ctx)


def test_a_loop_stopped_and_resumed_ends_with_the_parameters_of_an_uninterrupted_run() -> None:
    torch.set_num_threads(1)
    whole = _run(_work(250, load_callable(f"{EXAMPLE}:train")))
    assert whole.finished and whole.iteration == 250.0
    assert [r["step"] for r in whole.reports] == [100.0, 200.0]
    assert all(r["loss"] > 0 for r in whole.reports)

    control = SegmentControl()
    first = _run(_work(250, StopAt(control, 120)), control)
    assert not first.finished and first.iteration == 120.0  # stopped after step 120, saved
    assert first.checkpoint is not None and _state(first.checkpoint)["iteration"] == 120.0
    second = _run(_work(250, load_callable(f"{EXAMPLE}:train")), held=(120.0, first.checkpoint))
    assert second.finished and second.iteration == 250.0
    assert [r["step"] for r in second.reports] == [200.0]
    resumed, uninterrupted = _state(second.checkpoint)["state"], _state(whole.checkpoint)["state"]
    assert resumed["step"] == uninterrupted["step"] == 250
    for name, tensor in uninterrupted["model"].items():
        assert torch.equal(resumed["model"][name], tensor), name  # bit for bit
    start = load_callable(f"{EXAMPLE}:make_model")
    torch.manual_seed(_work(1, None).data_seed)
    assert not torch.equal(start().state_dict()["0.weight"], resumed["model"]["0.weight"])


def test_ctx_gives_the_job_and_restores_nothing_on_a_fresh_start() -> None:
    seen: dict[str, Any] = {}

    def train(ctx: TrainContext) -> None:
        seen.update(
            rank=ctx.rank, world=ctx.world_size, device=str(ctx.device), job=ctx.job_id,
            iterations=ctx.iterations, restored=ctx.restore(), stop=ctx.should_stop(),
            group=ctx.group is torch.distributed.group.WORLD,
        )  # fmt: skip

    outcome = _run(_work(7, train))
    assert seen == {
        "rank": 0, "world": 1, "device": "cpu", "job": "j", "iterations": 7,
        "restored": None, "stop": False, "group": True,
    }  # fmt: skip
    # Returned without being told to stop: finished, with no checkpoint of its own.
    assert outcome.finished and outcome.iteration == 7.0 and outcome.checkpoint is None


def test_periodic_saves_go_to_the_store_and_the_one_on_a_stop_comes_back_with_the_outcome() -> None:
    control = SegmentControl()

    def train(ctx: TrainContext) -> None:
        for step in range(1, 6):
            ctx.save({"w": torch.full((2,), float(step))}, step=step)
            if step == 3:
                control.stop.set()  # the scheduler's request, seen at the next agreement
            if ctx.should_stop():
                ctx.save({"w": torch.full((2,), 10.0 * step)}, step=step)
                return

    kept: list[tuple[float, bytes]] = []
    outcome = _run(_work(5, train), control, kept=kept)
    assert [i for i, _ in kept] == [1.0, 2.0, 3.0]  # before the stop: to the store at once
    assert not outcome.finished and outcome.iteration == 3.0
    assert _state(outcome.checkpoint)["state"]["w"].tolist() == [30.0, 30.0]


def test_a_save_on_another_rank_does_nothing_and_a_bad_step_is_refused() -> None:
    work = _work(10, lambda ctx: None)
    plan = SegmentPlan(work=work, rank=1, world_size=2, master_addr="127.0.0.1", master_port=1)
    kept: list[float] = []
    ctx = TrainContext(plan, SegmentControl(), lambda i, blob: kept.append(i), None)
    ctx.save({"w": torch.ones(1)}, step=4)
    assert kept == [] and ctx.saved is None and ctx.saved_step == 4
    with pytest.raises(ValueError, match=r"ctx.save: step 11 is outside the job's 0..10"):
        ctx.save({}, step=11)
    with pytest.raises(ValueError, match=r"whole number of iterations, got 2.5"):
        ctx.report(step=2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"metric 'loss' is a tensor of 3 values"):
        ctx.report(step=2, loss=torch.ones(3))


BROKEN = """\
import torch


def train(ctx):
    state = ctx.restore()
    print("starting", ctx.rank)
    ctx.report(step=1, loss=torch.tensor(0.5))
    raise ValueError("no data at /data/x")
"""


def test_an_error_in_the_loop_names_its_file_function_and_line_and_the_log_has_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "broken.py").write_text(BROKEN)
    log = tmp_path / "logs" / "j.log"
    work = _work(3, f"{tmp_path / 'broken.py'}:train", log_path=str(log))
    with pytest.raises(UserCodeError) as caught:
        _run(work)
    text = str(caught.value)
    assert f"training function train ({tmp_path / 'broken.py'}:4) failed, line 8" in text
    assert "ValueError: no data at /data/x" in text
    lines = log.read_text().splitlines()
    assert lines[0] == "[rank 0] segment from iteration 0 of 3, 1 process on cpu"
    assert "[rank 0] starting 0" in lines
    assert '[rank 0] report {"step": 1, "loss": 0.5}' in lines
    assert lines[-1].startswith("[rank 0] failed: UserCodeError: training function train")


def test_a_reference_to_nothing_fails_the_segment_naming_it(tmp_path: Path) -> None:
    (tmp_path / "loop.py").write_text("def other(ctx):\n    pass\n")
    with pytest.raises(UserCodeError, match=r"has no training function 'train'.*other"):
        _run(_work(3, f"{tmp_path / 'loop.py'}:train"))


def test_the_store_writes_each_checkpoint_to_its_file_and_a_new_store_finds_them(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "ckpt"
    store = CheckpointStore(folder)
    store.save("a", 10.0, b"ten")
    store.save("a", 20.0, b"twenty")
    store.save("a", 15.0, b"older")  # an earlier iteration never replaces a later one
    store.save("odd/id b", 3.0, b"\x00three\n")
    store.save("gone", 1.0, b"one")
    store.drop("gone")
    assert sorted(p.name for p in folder.iterdir()) == ["a.ckpt", "odd%2Fid%20b.ckpt"]
    again = CheckpointStore(folder)  # a driver that died, started again
    assert again.load("a") == (20.0, b"twenty")
    assert again.load("odd/id b") == (3.0, b"\x00three\n")
    assert again.load("gone") is None and again.iteration("gone") == 0.0
    assert CheckpointStore().load("a") is None  # without a folder: memory only


def test_a_checkpoint_file_is_replaced_whole_or_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CheckpointStore(tmp_path)
    store.save("a", 1.0, b"first")

    def dies(*_args: Any) -> None:
        raise OSError("the machine lost power")

    monkeypatch.setattr("unstall.live.executor.os.replace", dies)
    with pytest.raises(OSError, match="lost power"):
        store.save("a", 2.0, b"second")
    monkeypatch.undo()
    # The file holds the first checkpoint whole; the half-done write is a hidden temporary
    # file that a new store passes over.
    assert CheckpointStore(tmp_path).load("a") == (1.0, b"first")


def test_a_file_that_is_no_checkpoint_is_refused_naming_it(tmp_path: Path) -> None:
    checkpoint_path(tmp_path, "x").write_bytes(b"something else")
    with pytest.raises(UnstallError, match=r"x\.ckpt: not an unstall checkpoint file"):
        CheckpointStore(tmp_path)


def test_the_log_takes_the_lines_of_every_thread_whole(tmp_path: Path) -> None:
    from unstall.live.train_loop import JobLog, captured

    log = JobLog(str(tmp_path / "j.log"), rank=2)
    with captured(log):
        threads = [
            threading.Thread(target=lambda: [print("x" * 50) for _ in range(200)]) for _ in range(4)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        print("no newline at the end", end="")
    log.close()
    lines = (tmp_path / "j.log").read_text().splitlines()
    assert lines[-1] == "[rank 2] no newline at the end"
    assert sorted(set(lines[:-1])) == ["[rank 2] " + "x" * 50]


def test_report_lines_are_json(tmp_path: Path) -> None:
    def train(ctx: TrainContext) -> None:
        ctx.report(step=2, loss=0.25, accuracy=torch.tensor(0.5))

    log = tmp_path / "j.log"
    outcome = _run(_work(2, train, log_path=str(log)))
    assert outcome.reports == ({"step": 2.0, "loss": 0.25, "accuracy": 0.5},)
    line = next(x for x in log.read_text().splitlines() if " report " in x)
    assert json.loads(line.split(" report ", 1)[1]) == {"step": 2, "loss": 0.25, "accuracy": 0.5}
    assert log.read_text().splitlines()[-1] == "[rank 0] finished at iteration 2"


AGREEING = """
import json, os, socket
import torch
import torch.multiprocessing as mp
from unstall.live.training import JobWork, SegmentControl, SegmentPlan, run_segment


def train(ctx):
    steps = 0
    while steps < ctx.iterations:
        steps += 1
        ctx.report(step=steps)
        if ctx.should_stop():
            ctx.save({"steps": steps}, step=steps)
            return


def rank_main(rank, port):
    work = JobWork(job_id="j", model="mlp", iterations=50.0, emulated=False, train=train)
    plan = SegmentPlan(work=work, rank=rank, world_size=2, master_addr="127.0.0.1",
                       master_port=port, join_timeout_s=20)
    control = SegmentControl()
    if rank == 1:
        control.stop.set()  # only rank 1's executor was asked (so far)
    outcome = run_segment(plan, control)
    json.dump({"iteration": outcome.iteration, "finished": outcome.finished,
               "steps": [r["step"] for r in outcome.reports]}, open(f"rank{rank}.json", "w"))


if __name__ == "__main__":
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
    mp.spawn(rank_main, args=(port,), nprocs=2)
    json.dump([json.load(open(f"rank{r}.json")) for r in (0, 1)], open("out.json", "w"))
"""


def test_every_rank_stops_after_the_same_step_when_one_of_them_is_asked(tmp_path: Path) -> None:
    """Two processes of a job; the stop request has reached rank 1 only. Both hear it at the
    same call of ``should_stop`` (after the first step) and stop there, rank 0 too."""
    from live_runs import run_script

    found = run_script(AGREEING, tmp_path, timeout=200)
    assert found == [{"iteration": 1.0, "finished": False, "steps": [1.0]}] * 2


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"train": "loop.py:train"}, r"run_live\.train: needs real compute"),
        ({"train": 42, "real": True}, r"run_live\.train: want a function or FILE.py:FUNC"),
        ({"train": "loop.py:train", "user": True, "real": True}, r"train or user_work, not both"),
    ],
)
def test_run_live_refuses_a_training_loop_it_cannot_run_before_starting_ray(
    options: dict[str, Any], said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from unstall.errors import ConfigError
    from unstall.live import LiveConfig, UserWork, run
    from unstall.workload.losses import resolve_loss

    def no_ray(*_args: Any) -> None:
        raise AssertionError("a local Ray was started")

    monkeypatch.setattr(run, "LocalRayCluster", no_ray)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    user = UserWork(
        model_fn=lambda: None, data_fn=lambda r, w: [], loss=resolve_loss("mse", owner="test")
    )
    with pytest.raises(ConfigError, match=said):
        run.run_live(
            None,
            "fifo",
            config=LiveConfig(compute="real" if options.get("real") else "emulated"),
            train=options["train"],
            user_work=user if options.get("user") else None,
        )
