from __future__ import annotations

import numpy as np
import pytest

from unstall.errors import ConfigError
from unstall.traces.synthetic import (
    DURATION_LEVELS,
    PHILLY_GPU_MIX,
    PHILLY_LOG_DURATION_QUANTILES,
    SyntheticTraceConfig,
    generate,
    mean_gpu_seconds,
)


@pytest.fixture(scope="module")
def big() -> tuple[SyntheticTraceConfig, np.ndarray, np.ndarray, np.ndarray, float]:
    config = SyntheticTraceConfig(jobs=100_000, seed=3)
    trace = generate(config)
    arr = trace.arrays()
    return config, arr.submit_s, arr.num_gpus, arr.duration_s, trace.submit_offset_s


def test_same_seed_same_trace_other_seed_other_trace() -> None:
    a = generate(SyntheticTraceConfig(jobs=500, seed=11))
    b = generate(SyntheticTraceConfig(jobs=500, seed=11))
    c = generate(SyntheticTraceConfig(jobs=500, seed=12))
    assert a.equals(b)
    assert not a.equals(c)
    assert a.submit_offset_s == b.submit_offset_s


def test_streams_are_independent() -> None:
    base = generate(SyntheticTraceConfig(jobs=300, seed=5))
    other = generate(SyntheticTraceConfig(jobs=300, seed=5, model_mix={"resnet50": 1.0}))
    cols = ["job_id", "submit_s", "num_gpus", "duration_s"]
    assert base.jobs[cols].equals(other.jobs[cols])
    assert set(other.jobs["model"]) == {"resnet50"}


def test_gpu_mix_matches_philly(big: tuple) -> None:
    _, _, gpus, _, _ = big
    sizes, counts = np.unique(gpus, return_counts=True)
    share = dict(zip(sizes.tolist(), (counts / len(gpus)).tolist(), strict=True))
    for g, expected in PHILLY_GPU_MIX.items():
        # binomial standard error on 100k jobs is < 0.0008; allow 4 of them
        assert share.get(g, 0.0) == pytest.approx(expected, abs=4 * np.sqrt(expected / 1e5) + 1e-4)


def test_durations_follow_the_class_quantiles(big: tuple) -> None:
    _, _, gpus, duration, _ = big
    one = np.log(duration[gpus == 1])
    table = PHILLY_LOG_DURATION_QUANTILES[1]
    for level in (0.25, 0.5, 0.75, 0.9):
        expected = np.interp(level, DURATION_LEVELS, table)
        assert np.quantile(one, level) == pytest.approx(expected, abs=0.05)
    # multi-GPU jobs run longer than single-GPU ones, as in Philly
    assert np.median(duration[gpus >= 8]) > 5 * np.median(duration[gpus == 1])


def test_arrival_rate_and_day_night_cycle(big: tuple) -> None:
    config, submit, _, _, offset = big
    rate = len(submit) / (submit[-1] / 3600)
    assert rate == pytest.approx(config.arrivals_per_hour, rel=0.02)
    assert (np.diff(submit) >= 0).all()
    hour = (((submit + offset) % 86400) // 3600).astype(int)
    counts = np.bincount(hour, minlength=24)
    peak = round(config.diurnal_peak_s / 3600) % 24
    trough = (peak + 12) % 24
    # expected ratio (1 + a) / (1 - a) = 1.82 for a = 0.29
    assert counts[peak] / counts[trough] == pytest.approx(1.82, rel=0.1)
    assert int(np.argmax(counts)) in {(peak - 1) % 24, peak, (peak + 1) % 24}


def test_flat_arrivals_without_cycle() -> None:
    trace = generate(
        SyntheticTraceConfig(jobs=20_000, seed=1, diurnal_amplitude=0.0, arrivals_per_hour=60)
    )
    gaps = np.diff(trace.arrays().submit_s)
    assert gaps.mean() == pytest.approx(60.0, rel=0.03)
    assert gaps.std() == pytest.approx(60.0, rel=0.05)  # exponential gaps


def test_multi_gpu_share_and_max_gpus() -> None:
    config = SyntheticTraceConfig(jobs=50_000, seed=2, multi_gpu_share=0.5, max_gpus=8)
    assert set(config.sizes()) == {1, 2, 4, 8}
    gpus = generate(config).arrays().num_gpus
    assert (gpus > 1).mean() == pytest.approx(0.5, abs=0.01)
    assert gpus.max() == 8
    # proportions among multi-GPU sizes are Philly's: 2, 4 and 8 GPUs nearly equally common
    multi = gpus[gpus > 1]
    assert (multi == 4).mean() == pytest.approx(
        0.022736 / (0.022104 + 0.022736 + 0.019976), abs=0.015
    )


def test_load_sets_the_arrival_rate() -> None:
    config = SyntheticTraceConfig(
        jobs=20_000,
        seed=4,
        load=0.8,
        cluster_gpus=64,
        duration_lognormal=(600.0, 0.5),
        max_gpus=4,
        diurnal_amplitude=0.0,
    )
    trace = generate(config)
    arr = trace.arrays()
    offered = (arr.num_gpus * arr.duration_s).sum() / arr.submit_s[-1] / 64
    assert offered == pytest.approx(0.8, rel=0.05)
    assert mean_gpu_seconds(config) == pytest.approx(
        (arr.num_gpus * arr.duration_s).mean(), rel=0.03
    )


def test_lognormal_durations_and_clipping() -> None:
    config = SyntheticTraceConfig(
        jobs=20_000,
        seed=9,
        duration_lognormal=(600.0, 1.0),
        max_duration_s=3000.0,
        min_duration_s=60.0,
    )
    d = generate(config).arrays().duration_s
    assert np.median(d) == pytest.approx(600.0, rel=0.05)
    assert d.max() == 3000.0 and d.min() == 60.0


def test_ids_sort_in_arrival_order() -> None:
    trace = generate(SyntheticTraceConfig(jobs=1000, seed=0, job_id_prefix="s-"))
    ids = list(trace.jobs["job_id"])
    assert ids[0] == "s-000" and ids[-1] == "s-999" and ids == sorted(ids)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"jobs": 0}, "jobs"),
        ({"diurnal_amplitude": 1.0}, "diurnal_amplitude"),
        ({"load": 0.5}, "load"),
        ({"load": -1.0, "cluster_gpus": 8}, "load"),
        ({"load": 0.5, "cluster_gpus": 8, "arrivals_per_hour": 3.0}, "arrivals_per_hour"),
        ({"gpu_mix": {0: 1.0}}, "gpu_mix"),
        ({"gpu_mix": {1: 1.0}, "multi_gpu_share": 0.3}, "multi_gpu_share"),
        ({"max_gpus": 0}, "max_gpus"),
        ({"model_mix": {"resnet18": -1.0}}, "model_mix"),
        ({"max_duration_s": 0.5}, "max_duration_s"),
        ({"duration_scale": 0.0}, "duration_scale"),
        # Values of the wrong kind: bare TypeErrors, or (2.5 jobs) a failure deep in numpy.
        ({"jobs": "10"}, "jobs"),
        ({"jobs": 2.5}, "jobs"),
        ({"seed": 1.5}, "seed"),
        ({"arrivals_per_hour": "3"}, "arrivals_per_hour"),
        ({"max_gpus": 4.0}, "max_gpus"),
    ],
)
def test_config_rejects_bad_values(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        SyntheticTraceConfig(**kwargs)
    assert info.value.field == field
    assert info.value.owner == "SyntheticTraceConfig"


def test_generate_names_a_config_of_the_wrong_kind() -> None:
    with pytest.raises(ConfigError) as info:
        generate(50)  # type: ignore[arg-type]
    assert str(info.value) == (
        "generate.config: must be a SyntheticTraceConfig, got 50: "
        "generate(SyntheticTraceConfig(jobs=50, seed=1))"
    )
