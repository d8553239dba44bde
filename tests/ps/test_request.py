"""A parameter-server run described by names (:mod:`unstall.ps.request`): every name, file and
function becomes its object before Ray starts, and a bad one is one line naming the parameter."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from unstall.errors import ConfigError
from unstall.ps import AdamConfig, ArrayData, PSCheckpoint, PSRequest, resolve_run
from unstall.ps.request import resolve_optimizer
from unstall.usercode import UserCodeError

USER_FILE = """
import torch
from torch import nn


def build():
    return nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 2))


def batches(rank, world_size):
    g = torch.Generator().manual_seed(rank)
    while True:
        x = torch.randn(4, 5, generator=g)
        yield x, (x.sum(1) > 0).long()


def bad_batches(rank, world_size):
    raise RuntimeError("no data here")
"""


@pytest.fixture
def user_file(tmp_path: Path) -> Path:
    path = tmp_path / "mine.py"
    path.write_text(USER_FILE)
    return path


def test_the_scenarios_model_with_its_options_and_the_datas_needs() -> None:
    run = resolve_run(PSRequest(scenario="bandwidth", data="digits", model_options={"width": "64"}))
    assert run.model.label == "mlp" and run.data.label == "digits"
    assert dict(run.model.options) == {
        "in_features": 64,
        "width": 64,
        "depth": 4,
        "num_classes": 10,
    }
    assert run.model().layers[0].in_features == 64
    assert run.strategy.name == "tf-greedy" and run.scenario.name == "bandwidth"
    run = resolve_run(PSRequest(servers=6, spares=2, strategy="psld"))
    assert (run.scenario.servers, run.scenario.spares, run.strategy.name) == (6, 2, "psld")


@pytest.mark.parametrize(
    ("request_fields", "message"),
    [
        ({"scenario": "congested"}, "ps.scenario.*neither a preset"),
        ({"strategy": "hash"}, "ps.strategy.*unknown strategy 'hash'"),
        ({"loss": "hinge"}, "ps.loss.*neither a loss"),
        ({"data": "imagenet"}, "ps.data.*neither a source"),
        ({"model": "resnet18", "data": "digits"}, "needs a features model"),
        ({"model_options": {"widht": "3"}}, "widht"),
        ({"model_options": {"width": "wide"}}, "'wide' is not a int"),
    ],
)
def test_bad_names_are_one_line_naming_the_parameter(
    request_fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve_run(PSRequest(**request_fields))


def test_user_code_is_loaded_and_synthetic_data_needs_a_zoo_model(user_file: Path) -> None:
    run = resolve_run(PSRequest(model=f"{user_file}:build", data=f"{user_file}:batches"))
    assert run.model.label == f"{user_file}:build" and run.model()[0].in_features == 5
    with pytest.raises(ConfigError, match="synthetic batches need a zoo model"):
        resolve_run(PSRequest(model=f"{user_file}:build"))
    with pytest.raises(ConfigError, match=r"ps\.model_options: apply to zoo models"):
        resolve_run(PSRequest(model=f"{user_file}:build", model_options={"width": "3"}))
    with pytest.raises(UserCodeError, match="has no model function 'nothing'"):
        resolve_run(PSRequest(model=f"{user_file}:nothing"))
    # --batch-size sizes the built-in sources' batches; a data function's are its own.
    with pytest.raises(ConfigError, match=r"ps.batch_size: applies to the built-in data sources"):
        resolve_run(
            PSRequest(model=f"{user_file}:build", data=f"{user_file}:batches", batch_size=8)
        )
    for batch_size, expected in ((8, 8), (None, 32)):
        data = resolve_run(PSRequest(data="digits", batch_size=batch_size)).data.fn
        assert isinstance(data, ArrayData) and data.batch_size == expected


def test_resuming_keeps_the_checkpoints_settings_unless_given() -> None:
    params = (np.zeros(3, np.float32),)
    saved = PSCheckpoint(
        iteration=2,
        params=params,
        state=(params, params),
        optimizer=AdamConfig(lr=0.02, weight_decay=0.1),
    )
    assert resolve_optimizer(PSRequest(), saved) == AdamConfig(lr=0.02, weight_decay=0.1)
    given = resolve_optimizer(PSRequest(lr=0.5, weight_decay=0.0), saved)
    assert given == AdamConfig(lr=0.5, weight_decay=0.0)  # an explicit 0 is honoured
    assert resolve_optimizer(PSRequest()).name == "sgd"
