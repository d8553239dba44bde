"""The mistakes a user makes in their own model, data and loss, answered in one line that names
their function, file and line and says what to do: a forward that fails on batches of the wrong
shape or kind (named by the model function and the inputs, not by torch's ``Sequential``), a loss
that is no scalar or that is nan, a model whose parameters are all frozen. The replica is the
code every worker (and the reference) runs, tested here without Ray; one run on Ray shows that a
nan loss stops training before it reaches the servers, and the checkpoints written before are
the last ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from unstall import ps
from unstall.ps.replica import ModelReplica, TrainingJob, build_model
from unstall.usercode import UserCodeError, load_callable

USER_FILE = """
import torch
import torch.nn.functional as F
from torch import nn


def sequential():
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))


class Own(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(6, 3)

    def forward(self, x):
        h = x * 2
        return self.layer(h)


def frozen():
    model = nn.Linear(6, 3)
    model.requires_grad_(False)
    return model


def per_sample(outputs, targets):
    return F.cross_entropy(outputs, targets, reduction="none")


def as_float(outputs, targets):
    return F.cross_entropy(outputs, targets).item()


def nan_from_iteration_two(outputs, targets):
    loss = F.cross_entropy(outputs, targets)
    return loss * float("nan") if int(targets[0]) == 2 else loss


def marked(rank, world_size):
    # iteration i's labels all equal min(i, 2): the loss above turns nan at iteration 2
    for i in range(100):
        yield torch.randn(4, 6), torch.full((4,), min(i, 2), dtype=torch.long)
"""


@pytest.fixture(scope="module")
def user_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("user") / "mine.py"
    path.write_text(USER_FILE)
    return path


def line(text: str) -> int:
    """The line of USER_FILE that starts with ``text`` (stripped), as Python counts them."""
    lines = [n for n, got in enumerate(USER_FILE.splitlines(), 1) if got.strip().startswith(text)]
    assert len(lines) == 1, text
    return lines[0]


def load(path: Path, name: str) -> Any:
    return load_callable(f"{path}:{name}")


def failure(job: TrainingJob, batch: Any) -> str:
    """The one-line message of a worker's gradient step on ``batch`` that fails."""
    with pytest.raises(UserCodeError) as info:
        ModelReplica(job).gradients(batch, iteration=3, rank=1)
    message = str(info.value)
    assert "\n" not in message
    return message


def job(path: Path, model: str, loss: str | None = None) -> TrainingJob:
    data = ps.ArrayData(np.zeros((4, 6), np.float32), np.zeros(4, np.int64))
    chosen = load(path, loss) if loss else torch.nn.functional.cross_entropy
    return TrainingJob(model=load(path, model), data=data, loss=chosen)


def test_a_torch_container_that_fails_is_named_by_the_model_function_and_the_inputs(
    user_file: Path,
) -> None:
    message = failure(job(user_file, "sequential"), (torch.zeros(8, 5), torch.zeros(8).long()))
    assert message.startswith(
        f"model's forward (Sequential built by model function sequential ({user_file}:"
        f"{line('def sequential')})) "
        "failed on inputs a float32 tensor of shape (8, 5): RuntimeError: mat1 and mat2 shapes "
        "cannot be multiplied (8x5 and 6x16)"
    )
    assert "site-packages" not in message and "container.py" not in message


def test_a_forward_of_the_users_own_names_its_line(user_file: Path) -> None:
    batch = (torch.zeros(8, 6, dtype=torch.float64), torch.zeros(8).long())
    message = failure(job(user_file, "Own"), batch)
    assert message.startswith(
        f"model's forward (Own built by model function Own ({user_file})) failed at "
        f"{user_file}, line {line('return self.layer(h)')} on inputs a float64 tensor of "
        "shape (8, 6): RuntimeError:"
    )


def test_numpy_batches_are_named_with_what_to_yield(user_file: Path) -> None:
    batch = (np.zeros((8, 6), np.float32), np.zeros(8, np.int64))
    message = failure(job(user_file, "sequential"), batch)
    assert "on inputs a numpy float32 array of shape (8, 6): TypeError:" in message
    assert message.endswith("yield torch tensors, torch.from_numpy(array))")


@pytest.mark.parametrize(
    ("loss", "expected"),
    [
        (
            "per_sample",
            "returned a float32 tensor of shape (8,), not a scalar tensor that depends on the "
            "model (reduce it to one value, e.g. .mean())",
        ),
        (
            "as_float",
            "returned a float, not a scalar tensor that depends on the model (compute it from "
            "the outputs with torch, without .item(), float() or .detach())",
        ),
    ],
)
def test_a_loss_that_is_no_scalar_of_the_model_says_what_to_do(
    user_file: Path, loss: str, expected: str
) -> None:
    message = failure(
        job(user_file, "sequential", loss), (torch.zeros(8, 6), torch.zeros(8).long())
    )
    assert message == f"loss function {loss} ({user_file}:{line(f'def {loss}')}) {expected}"


def test_a_nan_loss_stops_the_step_naming_the_worker_and_iteration(user_file: Path) -> None:
    chosen = job(user_file, "sequential", "nan_from_iteration_two")
    replica = ModelReplica(chosen)
    replica.gradients((torch.zeros(4, 6), torch.zeros(4).long()), iteration=0, rank=1)  # finite
    message = failure(chosen, (torch.zeros(4, 6), torch.full((4,), 2)))
    assert message.startswith(
        f"loss function nan_from_iteration_two ({user_file}:{line('def nan_from')}) returned "
        "nan on worker 1's batch of iteration 3 (inputs: a float32 tensor of shape (4, 6)): "
        "training cannot go on"
    )


def test_a_model_whose_parameters_are_all_frozen_says_so(user_file: Path) -> None:
    with pytest.raises(UserCodeError) as info:
        build_model(load(user_file, "frozen"), seed=0)
    assert str(info.value) == (
        f"model function frozen ({user_file}:{line('def frozen')}): none of the model's 2 "
        "parameter tensors requires a gradient (all frozen: the servers train those that do)"
    )


def test_a_nan_loss_ends_the_run_and_keeps_the_checkpoints_before_it(
    ps_pool: Any, user_file: Path
) -> None:
    saved: list[ps.PSCheckpoint] = []
    with pytest.raises(UserCodeError) as info:
        ps.fit(
            load(user_file, "sequential"),
            load(user_file, "marked"),
            loss=load(user_file, "nan_from_iteration_two"),
            iterations=5,
            checkpoint_every=1,
            on_checkpoint=saved.append,
            pool=ps_pool,
        )
    assert str(info.value).startswith("worker ")
    assert "returned nan on worker" in str(info.value) and "of iteration 2" in str(info.value)
    assert [c.iteration for c in saved] == [1, 2]
    assert all(np.isfinite(p).all() for p in saved[-1].params)
