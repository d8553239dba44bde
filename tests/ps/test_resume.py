"""Optimizers and checkpoints on Ray: Adam and SGD's variants stay exact through PSLD's
migrations and scaling, and a run stopped and resumed from its checkpoint ends where an
unstopped run ends (parameters, optimizer state, buffers and batches included)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from ps_helpers import scripted_controller, tiny_run
from unstall import ps
from unstall.errors import ConfigError
from unstall.ps.scenarios import Scenario
from unstall.usercode import load_callable

pytestmark = pytest.mark.usefixtures("ray_session")

USER_FILE = """
import torch
from torch import nn


def build():
    return nn.Sequential(nn.Linear(5, 12), nn.BatchNorm1d(12), nn.ReLU(), nn.Dropout(0.3),
                         nn.Linear(12, 3))


def batches(rank, world_size):
    # an endless stream whose draws come from the generator unstall seeds per iteration
    while True:
        x = torch.randn(6, 5)
        yield x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
"""


@pytest.fixture(scope="module")
def user_code(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    path = tmp_path_factory.mktemp("resume") / "bn_model.py"
    path.write_text(USER_FILE)
    return load_callable(f"{path}:build"), load_callable(f"{path}:batches")


@pytest.mark.parametrize(
    "optimizer",
    [
        ps.AdamConfig(lr=0.01, weight_decay=0.01),
        ps.SGDConfig(lr=0.05, nesterov=True, weight_decay=1e-3),
    ],
    ids=["adam", "sgd-nesterov-wd"],
)
def test_optimizers_stay_exact_through_migrations_and_scaling(
    ps_pool: Any, fast_scenario: Scenario, optimizer: Any
) -> None:
    _, strategy = scripted_controller()
    r = tiny_run(
        fast_scenario,
        strategy=strategy,
        optimizer=optimizer,
        iterations=5,
        spares=1,
        check_reference=True,
        pool=ps_pool,
    )
    assert r.optimizer == optimizer.name
    assert r.params_match_reference is True, r.reference_max_rel_err
    assert r.migrations >= 4 and (r.scale_outs, r.scale_ins) == (1, 1)
    assert set(r.nodes) >= {"worker 0", "worker 1", "server 0", "server 3"}
    assert r.node_count == 1


def test_a_resumed_run_ends_where_an_unstopped_one_does(
    ps_pool: Any, fast_scenario: Scenario, user_code: tuple[Any, Any], tmp_path: Path
) -> None:
    model, data = user_code
    common: dict[str, Any] = {
        "workers": 2,
        "scenario": fast_scenario,
        "optimizer": ps.AdamConfig(lr=0.02),
        "seed": 4,
        "pool": ps_pool,
        "timeout_s": 300.0,
    }
    whole = ps.fit(model, data, iterations=6, **common)
    saved: list[ps.PSCheckpoint] = []
    first = ps.fit(
        model, data, iterations=3, checkpoint_every=2, on_checkpoint=saved.append, **common
    )
    assert [c.iteration for c in saved] == [2, 3] and first.checkpoints == 2
    path = saved[-1].save(tmp_path / "run.pt")
    resumed = ps.fit(
        model,
        data,
        iterations=6,
        resume=ps.PSCheckpoint.load(path),
        check_reference=True,
        strategy=ps.STRATEGIES["round-robin"],  # a placement of its own: the step is exact anyway
        **{k: v for k, v in common.items() if k != "optimizer"},  # the checkpoint's optimizer
    )
    assert resumed.start_iteration == 3 and resumed.iterations == 3
    assert resumed.params_match_reference is True
    for name, value in whole.state_dict.items():
        np.testing.assert_allclose(
            resumed.state_dict[name], value, rtol=1e-6, atol=1e-7, err_msg=name
        )
    # The buffers came through the checkpoint: BatchNorm's running mean moved from its start.
    assert not torch.equal(resumed.state_dict["1.running_mean"], torch.zeros(12))


def test_resume_refuses_another_run(
    ps_pool: Any, fast_scenario: Scenario, user_code: tuple[Any, Any]
) -> None:
    model, data = user_code
    saved: list[ps.PSCheckpoint] = []
    ps.fit(
        model,
        data,
        iterations=2,
        checkpoint_every=2,
        on_checkpoint=saved.append,
        scenario=fast_scenario,
        pool=ps_pool,
    )
    with pytest.raises(ConfigError, match="made with 2 workers, not 3"):
        ps.fit(
            model,
            data,
            workers=3,
            iterations=4,
            resume=saved[0],
            scenario=fast_scenario,
            pool=ps_pool,
        )
    with pytest.raises(ConfigError, match="sgd's, not adam's"):
        ps.fit(
            model,
            data,
            iterations=4,
            resume=saved[0],
            optimizer=ps.AdamConfig(),
            scenario=fast_scenario,
            pool=ps_pool,
        )
    with pytest.raises(ConfigError, match="at iteration 2 already"):
        ps.fit(model, data, iterations=2, resume=saved[0], scenario=fast_scenario, pool=ps_pool)
