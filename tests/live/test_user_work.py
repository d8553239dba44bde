"""A user's model, data and loss as the built-in loop trains them (``run_segment``, one process,
gloo on loopback; no Ray): given as references (``FILE.py:FUNC``, loaded where the segment
runs, as the scheduler service gives them) or as the functions themselves (as ``unstall live
run`` does), the training is the same, bit for bit, and a resumed segment goes on exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from live_runs import free_port
from unstall.errors import UnstallError
from unstall.live.training import (
    JobWork,
    SegmentControl,
    SegmentOutcome,
    SegmentPlan,
    UserWork,
    final_parameters,
    run_segment,
)
from unstall.usercode import load_callable

# 30 batches a rank (a job of more iterations starts the data again: a new epoch), and a loss
# of the user's own.
USER_JOB = """\
import torch
import torch.nn.functional as F
from torch import nn


def make_model():
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def make_data(rank, world_size):
    g = torch.Generator().manual_seed(100 + rank)
    return [(torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g))
            for _ in range(30)]


def smoothed(outputs, targets):
    return F.cross_entropy(outputs, targets, label_smoothing=0.1)
"""


def _run(
    user: UserWork, iterations: int, held: SegmentOutcome | None = None, **options: Any
) -> SegmentOutcome:
    work = JobWork(
        job_id="j", model="mlp", iterations=float(iterations), emulated=False, seed=3, user=user,
        **options,
    )  # fmt: skip
    plan = SegmentPlan(
        work=work,
        rank=0,
        world_size=1,
        master_addr="127.0.0.1",
        master_port=free_port(),
        start_iteration=held.iteration if held is not None else 0.0,
        checkpoint=held.checkpoint if held is not None else None,
        checkpoint_every_s=3600.0,
    )
    return run_segment(plan, SegmentControl())


@pytest.fixture
def job_file(tmp_path: Path) -> Path:
    path = tmp_path / "job.py"
    path.write_text(USER_JOB)
    return path


def _references(path: Path, loss: str = "smoothed") -> UserWork:
    return UserWork(
        model_fn=f"{path}:make_model",
        data_fn=f"{path}:make_data",
        loss=loss if loss in ("cross_entropy", "mse") else f"{path}:{loss}",
    )


def test_references_train_as_the_functions_do_and_a_resumed_segment_goes_on_exactly(
    job_file: Path,
) -> None:
    torch.set_num_threads(1)
    by_reference = _references(job_file)
    functions = UserWork(
        model_fn=load_callable(f"{job_file}:make_model"),
        data_fn=load_callable(f"{job_file}:make_data"),
        loss=load_callable(f"{job_file}:smoothed"),
    )
    whole = _run(by_reference, 75)
    assert whole.finished and whole.iteration == 75.0 and whole.checkpoint is not None
    same = _run(functions, 75)
    assert same.checkpoint is not None
    ref_params, fn_params = final_parameters(whole.checkpoint), final_parameters(same.checkpoint)
    for name, tensor in ref_params.items():
        assert torch.equal(fn_params[name], tensor), name
    # Stopped at iteration 40 (in the data's second epoch), resumed from its checkpoint.
    first = _run(by_reference, 40)
    assert first.checkpoint is not None
    second = _run(by_reference, 75, held=first)
    assert second.finished and second.iteration == 75.0 and second.checkpoint is not None
    resumed = final_parameters(second.checkpoint)
    for name, tensor in ref_params.items():
        assert torch.equal(resumed[name], tensor), name  # bit for bit
    # It trained: the user's loss moved the weights away from the ones the seed builds.
    torch.manual_seed(JobWork(job_id="j", model="mlp", iterations=1.0, emulated=False, seed=3)
                      .data_seed)  # fmt: skip
    start = load_callable(f"{job_file}:make_model")().state_dict()["0.weight"]
    assert not torch.equal(start, ref_params["0.weight"])


def test_a_built_in_loss_by_name_is_the_same_as_that_loss_by_reference(job_file: Path) -> None:
    torch.set_num_threads(1)
    job_file.write_text(USER_JOB + "\n\ndef plain(outputs, targets):\n"
                        "    return F.cross_entropy(outputs, targets)\n")  # fmt: skip
    named, plain = (
        _run(_references(job_file, "cross_entropy"), 5),
        _run(_references(job_file, "plain"), 5),
    )
    assert named.checkpoint is not None and plain.checkpoint is not None
    a, b = final_parameters(named.checkpoint), final_parameters(plain.checkpoint)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_reference_to_a_missing_function_fails_the_segment_naming_the_file(
    job_file: Path, tmp_path: Path
) -> None:
    log = tmp_path / "j.log"
    user = UserWork(
        model_fn=f"{job_file}:no_such_model", data_fn=f"{job_file}:make_data", loss="mse"
    )
    with pytest.raises(UnstallError, match=r"job\.py has no model function 'no_such_model'"):
        _run(user, 3, log_path=str(log))
    assert "failed: UserCodeNameError" in log.read_text()  # the job's log says why


def test_emulated_compute_runs_no_user_model(job_file: Path) -> None:
    work = JobWork(
        job_id="j", model="mlp", iterations=3.0, emulated=True, user=_references(job_file)
    )
    plan = SegmentPlan(
        work=work, rank=0, world_size=1, master_addr="127.0.0.1", master_port=free_port()
    )
    with pytest.raises(ValueError, match="needs real compute"):
        run_segment(plan, SegmentControl())


def test_run_live_makes_the_references_files_absolute_and_refuses_what_is_no_function(
    job_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from unstall.errors import ConfigError
    from unstall.live.config import LiveConfig
    from unstall.live.run import _jobs_code

    monkeypatch.chdir(job_file.parent)
    real = LiveConfig(compute="real")
    smoothed = load_callable(f"{job_file}:smoothed")
    given = UserWork(model_fn="job.py:make_model", data_fn="job.py:make_data", loss="mse")
    code = _jobs_code(given, None, None, real)
    assert code.user == UserWork(
        model_fn=f"{job_file}:make_model", data_fn=f"{job_file}:make_data", loss="mse"
    )
    mixed = UserWork(model_fn="job.py:make_model", data_fn="job.py:make_data", loss=smoothed)
    assert _jobs_code(mixed, None, None, real).user.loss is smoothed  # type: ignore[union-attr]
    no_function = UserWork(model_fn="job.py:make_model", data_fn=42, loss="mse")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"run_live\.user_work: data function: want a function"):
        _jobs_code(no_function, None, None, real)
    with pytest.raises(UnstallError, match="model function 'make_model'"):
        _jobs_code(
            UserWork(model_fn="make_model", data_fn="job.py:d", loss="mse"), None, None, real
        )
