"""fit() with the user's own model, data and loss, loaded from a file as the command line loads
them: exact against the reference, the trained weights load into a fresh model, and errors in
the user's code are one line naming the function, the file and the line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from unstall import ps
from unstall.usercode import UserCodeError, load_callable

pytestmark = pytest.mark.usefixtures("ray_session")

USER_FILE = """
import torch
from torch import nn


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.2))
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.body(x))


def build():
    return Tiny()


def batches(rank, world_size):
    # two batches per worker: a run of three iterations starts a second epoch
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(16, 6, generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
    return [(x[:8], y[:8]), (x[8:], y[8:])]


def smooth_loss(outputs, targets):
    return nn.functional.cross_entropy(outputs, targets, label_smoothing=0.1)


def broken_batches(rank, world_size):
    yield torch.zeros(2, 6), torch.zeros(2, dtype=torch.long)
    raise ValueError("the disk is gone")


def broken_build():
    return int("not a number")


def broken_loss(outputs, targets):
    return outputs.sum() / targets.float().sum().item() * {}["missing"]
"""


@pytest.fixture(scope="module")
def user_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("user") / "my_model.py"
    path.write_text(USER_FILE)
    return path


def load(path: Path, name: str) -> Any:
    return load_callable(f"{path}:{name}")


def test_a_user_model_data_and_loss_train_exactly(ps_pool: Any, user_file: Path) -> None:
    model = load(user_file, "build")
    result = ps.fit(
        model,
        load(user_file, "batches"),
        loss=load(user_file, "smooth_loss"),
        workers=2,
        iterations=3,
        strategy=ps.STRATEGIES["psld"],
        check_reference=True,
        pool=ps_pool,
    )
    assert result.params_match_reference is True
    assert (result.model, result.data, result.iterations) == ("build", "batches", 3)
    fresh = model()
    fresh.load_state_dict(result.state_dict)  # buffers (BatchNorm's statistics) included
    assert result.state_dict["body.1.num_batches_tracked"].item() == 3  # worker 0's
    trained = dict(fresh.named_parameters())["head.weight"]
    assert torch.equal(trained, result.state_dict["head.weight"])
    with torch.random.fork_rng():
        torch.manual_seed(0)  # the run's seed: its starting point
        assert not torch.equal(trained, model().head.weight)  # it did train


def test_a_data_function_that_raises_names_its_file_and_line(ps_pool: Any, user_file: Path) -> None:
    with pytest.raises(UserCodeError) as info:
        ps.fit(
            load(user_file, "build"),
            load(user_file, "broken_batches"),
            workers=2,
            iterations=3,
            pool=ps_pool,
        )
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("worker ")
    assert "data function broken_batches" in message and str(user_file) in message
    assert "line 34" in message and "ValueError: the disk is gone" in message


def test_a_model_function_that_raises_fails_before_ray_is_used(user_file: Path) -> None:
    with pytest.raises(UserCodeError) as info:
        ps.fit(load(user_file, "broken_build"), load(user_file, "batches"))
    message = str(info.value)
    assert "\n" not in message and "model function broken_build" in message
    assert str(user_file) in message and "line 38" in message and "ValueError" in message


def test_a_model_function_that_returns_no_module_says_so(user_file: Path) -> None:
    with pytest.raises(UserCodeError, match=r"returned a list, not a torch\.nn\.Module"):
        ps.fit(list, load(user_file, "batches"))


def test_a_loss_that_raises_names_its_file_and_line(ps_pool: Any, user_file: Path) -> None:
    with pytest.raises(UserCodeError) as info:
        ps.fit(
            load(user_file, "build"),
            load(user_file, "batches"),
            loss=load(user_file, "broken_loss"),
            workers=2,
            iterations=2,
            pool=ps_pool,
        )
    message = str(info.value)
    assert "\n" not in message and message.startswith("worker ")
    assert "loss function broken_loss" in message and str(user_file) in message
    assert "line 42" in message and "KeyError" in message
