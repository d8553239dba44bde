"""A zoo model as a job (model function, synthetic data, loss), the one seed rule of synthetic
batches, the losses by name and the loss contract every training loop checks."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from unstall.errors import ConfigError
from unstall.workload.losses import LOSSES, loss_problem, resolve_loss
from unstall.workload.named import Named
from unstall.workload.zoo_jobs import SyntheticData, ZooJob, derive_seed, zoo_data, zoo_job


def test_a_zoo_job_is_a_model_function_its_data_and_its_loss() -> None:
    job = zoo_job("mlp", batch=4, seed=1, width=16)
    assert isinstance(job, ZooJob)
    model_fn, data_fn, loss = job
    assert isinstance(model_fn, Named) and model_fn.label == "mlp"
    assert dict(model_fn.options) == {"width": 16}
    inputs, targets = next(iter(data_fn(0, 2)))
    assert inputs.shape[0] == 4 and targets.shape == (4,)
    value = loss(model_fn()(inputs), targets)
    assert value.dim() == 0 and loss_problem(value) is None
    with pytest.raises(ConfigError):
        zoo_job("nosuch", batch=4)
    with pytest.raises(ConfigError, match="widht"):
        zoo_job("mlp", batch=4, widht=3)


def test_batches_are_a_function_of_seed_rank_and_step_so_a_job_resumes_anywhere() -> None:
    data = zoo_data("mlp", 3, seed=7)
    first = list(itertools.islice(data(1, 2), 5))
    again = list(itertools.islice(data(1, 2), 5))
    resumed = list(itertools.islice(data(1, 2, start=3), 2))
    for (x, y), (x2, y2) in zip(first, again, strict=True):
        assert torch.equal(x, x2) and torch.equal(y, y2)
    for (x, _), (x2, _) in zip(first[3:], resumed, strict=True):
        assert torch.equal(x, x2)
    assert torch.equal(data.batch(1, 4)[0], first[4][0])
    assert not torch.equal(data.batch(0, 4)[0], first[4][0])  # another rank, other batches
    assert not torch.equal(zoo_data("mlp", 3, seed=8).batch(1, 0)[0], first[0][0])
    # the rule: step i of rank r is drawn from derive_seed(seed, i, r)
    gen = torch.Generator().manual_seed(derive_seed(7, 2, 1))
    assert torch.equal(data.make_batch(3, generator=gen)[0], first[2][0])


def test_synthetic_data_checks_its_fields() -> None:
    with pytest.raises(ConfigError, match=r"SyntheticData\.batch_size: must be >= 1"):
        SyntheticData(lambda n, generator: (None, None), batch_size=0)
    with pytest.raises(ConfigError, match=r"SyntheticData\.make_batch: must be a function"):
        SyntheticData("mlp")  # type: ignore[arg-type]


def test_losses_by_name_by_reference_or_as_given(tmp_path: Path) -> None:
    assert resolve_loss("mse", owner="t") == Named(F.mse_loss, "mse")
    assert set(LOSSES) == {"cross_entropy", "mse"}
    mine = nn.L1Loss()
    assert resolve_loss(mine, owner="t") is mine
    path = tmp_path / "losses.py"
    path.write_text("def loss(outputs, targets):\n    return (outputs - targets).abs().sum()\n")
    loaded = resolve_loss(f"{path}:loss", owner="t")
    assert isinstance(loaded, Named) and loaded.label == f"{path}:loss"
    with pytest.raises(ConfigError, match=r"t\.loss: 'hinge' is neither a loss"):
        resolve_loss("hinge", owner="t")
    with pytest.raises(ConfigError, match=r"t\.loss: .*got the class L1Loss: build one"):
        resolve_loss(nn.L1Loss, owner="t")
    with pytest.raises(ConfigError, match=r"t\.crit: must be a function .* got int 3"):
        resolve_loss(3, owner="t", field="crit")


def test_the_loss_contract() -> None:
    weight = torch.ones(3, requires_grad=True)
    assert loss_problem((weight * 2).sum()) is None
    assert "reduce it to one value" in str(loss_problem(weight * 2))
    assert "without .item()" in str(loss_problem(1.5))
    assert "does not require grad" in str(loss_problem(torch.tensor(1.0)))
    assert loss_problem(weight.sum() * float("nan")) == "returned nan"
