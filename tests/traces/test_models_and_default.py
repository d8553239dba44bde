from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from unstall.errors import ConfigError
from unstall.traces.default import (
    DEFAULT_TRACE_PATH,
    LOOKALIKE_FIRST_SEED,
    default_trace,
    default_trace_config,
    default_trace_text,
    lookalike_trace_config,
)
from unstall.traces.models import ZOO_MODELS, assign_models
from unstall.traces.schema import Trace


def unnamed(n: int = 2000) -> Trace:
    return Trace.from_frame(
        pd.DataFrame(
            {
                "job_id": [f"j{i:05d}" for i in range(n)],
                "submit_s": np.arange(n, dtype=float),
                "num_gpus": 1,
                "duration_s": 10.0,
                "model": ["vgg16"] + [None] * (n - 1),
            }
        )
    )


def test_assign_models_is_seeded_and_fills_only_missing() -> None:
    trace = unnamed()
    a = assign_models(trace, {"resnet18": 3, "ncf": 1}, seed=1)
    b = assign_models(trace, {"resnet18": 3, "ncf": 1}, seed=1)
    c = assign_models(trace, {"resnet18": 3, "ncf": 1}, seed=2)
    assert a.equals(b) and not a.equals(c)
    models = a.jobs["model"]
    assert models.iloc[0] == "vgg16"
    assert set(models.iloc[1:]) == {"resnet18", "ncf"}
    assert (models == "resnet18").mean() == pytest.approx(0.75, abs=0.04)
    assert "seed 1" in a.notes[-1]
    assert trace.jobs["model"].isna().sum() == len(trace) - 1  # the input is left alone
    over = assign_models(trace, {"mlp": 1}, seed=1, overwrite=True)
    assert set(over.jobs["model"]) == {"mlp"}


def test_default_mix_is_the_zoo() -> None:
    models = set(assign_models(unnamed(), seed=0).jobs["model"].iloc[1:])
    assert models == set(ZOO_MODELS)


def test_assign_models_rejects_bad_mixes() -> None:
    with pytest.raises(ConfigError, match="mix"):
        assign_models(unnamed(10), {})
    with pytest.raises(ConfigError, match="must not all be 0"):
        assign_models(unnamed(10), {"mlp": 0})


def test_zoo_names_exist_in_the_zoo() -> None:
    zoo = pytest.importorskip("unstall.workload.zoo")
    assert set(ZOO_MODELS) <= set(zoo.names())


def test_shipped_default_trace_is_what_the_generator_makes() -> None:
    # If this fails after a deliberate change, run: python -m unstall.traces.default
    assert DEFAULT_TRACE_PATH.read_text(encoding="utf-8") == default_trace_text()


def test_default_trace_fits_a_small_cluster() -> None:
    trace = default_trace()
    config = default_trace_config()
    s = trace.summary()
    assert s.jobs == config.jobs == 400
    assert 2 * 3600 < s.span_s < 8 * 3600
    assert max(s.gpu_mix) <= 16
    assert 0.2 < s.multi_gpu_share < 0.4
    assert s.duration_s["max"] <= 7200.0
    assert set(s.models) <= set(ZOO_MODELS)


def test_lookalike_traces_have_the_default_config_but_their_own_seeds() -> None:
    configs = [lookalike_trace_config(i) for i in range(3)]
    assert [c.seed for c in configs] == [LOOKALIKE_FIRST_SEED + i for i in range(3)]
    assert default_trace_config().seed not in {c.seed for c in configs}
    for config in configs:
        assert dataclasses.replace(config, seed=default_trace_config().seed) == (
            default_trace_config()
        )
