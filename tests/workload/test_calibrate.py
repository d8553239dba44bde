"""Calibration: the reader's errors, recovery on data the model generated, and the real data."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from unstall.errors import ConfigError, DataFileError
from unstall.workload import (
    CalibrationConfig,
    FittedParams,
    Placement,
    iteration_time,
    read_placements,
    read_placements_dir,
    run_calibration,
)
from unstall.workload.calibration_fit import PARAM_NAMES, link_features, predict

HEADER = "placement,local_bsz,step_time,sync_time\n"
TRUE = FittedParams(
    compute_fixed_s=0.05,
    compute_per_sample_s=0.002,
    intra_s_per_pass=0.04,  # exposed at small batches: identifiable
    intra_latency_ms=0.2,
    nic_s_per_pass=0.08,
    nic_latency_ms=0.5,
    overlap=0.4,
    gradient_bytes=100e6,
    intra_gbps=20.0,
    nic_gbps=10.0,
)
# every multiset of 1-4 GPUs on 1-4 nodes of 4, written like Pollux (non-decreasing digits)
PLACEMENTS = [
    "".join(map(str, c))
    for n in range(1, 5)
    for c in itertools.combinations_with_replacement(range(1, 5), n)
]
BATCHES = (8, 16, 32, 64, 128)


def _model_time(params: FittedParams, placement: str, batch: int) -> float:
    spec, topo = params.perf_model(batch)
    return iteration_time(spec, Placement.parse(placement), topo).total_s


def _write_synthetic(root: Path, app: str, params: FittedParams) -> Path:
    rows = [f"{p},{b},{_model_time(params, p, b)!r},0.0\n" for p in PLACEMENTS for b in BATCHES]
    path = root / app / "placements.csv"
    path.parent.mkdir(parents=True)
    path.write_text(HEADER + "".join(rows))
    return path


def test_vectorised_prediction_equals_the_perf_model() -> None:
    rng = np.random.default_rng(7)
    for _ in range(5):
        x = rng.uniform(0.001, 0.2, size=len(PARAM_NAMES))
        x[-1] = rng.uniform(0, 1)
        params = FittedParams.from_vector(x, 50e6)
        batches = np.array([float(BATCHES[i % len(BATCHES)]) for i in range(len(PLACEMENTS))])
        vec = predict(x, batches, link_features(PLACEMENTS))
        direct = [_model_time(params, p, int(b)) for p, b in zip(PLACEMENTS, batches, strict=True)]
        np.testing.assert_allclose(vec, direct, rtol=1e-9)


def test_link_features_follow_the_ring() -> None:
    feats = link_features(["1", "4", "22", "1111"])
    np.testing.assert_allclose(feats[0], [0, 0, 0, 0])
    np.testing.assert_allclose(feats[1], [1.5, 6, 0, 0])  # 2(K-1)/K passes, 2(K-1) steps
    np.testing.assert_allclose(feats[2], [1.5, 6, 1.5, 6])
    np.testing.assert_allclose(feats[3], [0, 0, 1.5, 6])


def test_recovers_the_parameters_of_data_it_generated(tmp_path: Path) -> None:
    _write_synthetic(tmp_path, "synthetic", TRUE)
    result, points = run_calibration(
        read_placements_dir(tmp_path), CalibrationConfig(folds=3), {"synthetic": 100e6}
    )
    assert result.in_sample_median_rel_error < 1e-6
    assert result.median_rel_error < 1e-4
    # A fold that holds out every single-node placement ("2", "3", "4") leaves nothing that
    # constrains the GPU-link figures (multi-node rings are NIC-bound), so those few points are
    # predicted only within the bound "GPU links are no slower than the NIC".
    assert result.max_rel_error < 0.1
    (app,) = result.apps
    assert app.app == "synthetic" and app.points == len(PLACEMENTS) * len(BATCHES)
    np.testing.assert_allclose(app.params.vector(), TRUE.vector(), rtol=1e-3, atol=1e-6)
    # 100 MB passed in 0.08 s: 10 Gbps
    assert app.params.nic_gbps == pytest.approx(10.0, rel=1e-3)
    # the model beats the plain regression by far on its own data
    assert result.baseline_median_rel_error > 10 * result.median_rel_error
    assert len(points) == app.points and "worst" in result.to_dict()


def test_config_validation() -> None:
    with pytest.raises(ConfigError, match="folds"):
        CalibrationConfig(folds=1)
    with pytest.raises(ConfigError, match="loss"):
        CalibrationConfig(loss="l0")
    with pytest.raises(ConfigError, match="overlap_starts"):
        CalibrationConfig(overlap_starts=(2.0,))


@pytest.mark.parametrize(
    ("body", "line", "field"),
    [
        ("placement,local_bsz,step_time\n1,2,0.1\n", 1, "sync_time"),
        (HEADER + "1,32,0.1,0.0\n12a,32,0.1,0.0\n", 3, "placement"),
        (HEADER + "10,32,0.1,0.0\n", 2, "placement"),
        (HEADER + "1,many,0.1,0.0\n", 2, "local_bsz"),
        (HEADER + "1,0,0.1,0.0\n", 2, "local_bsz"),
        (HEADER + "1,32,-0.1,0.0\n", 2, "step_time"),
        (HEADER + "1,32,nan,0.0\n", 2, "step_time"),
        (HEADER + "1,32,0.1,-1\n", 2, "sync_time"),
    ],
)
def test_reader_errors_name_file_line_and_field(
    tmp_path: Path, body: str, line: int, field: str
) -> None:
    path = tmp_path / "placements.csv"
    path.write_text(body)
    with pytest.raises(DataFileError) as info:
        read_placements(path)
    assert (info.value.path, info.value.line, info.value.field) == (str(path), line, field)


def test_reader_empty_and_missing(tmp_path: Path) -> None:
    path = tmp_path / "placements.csv"
    path.write_text(HEADER)
    with pytest.raises(DataFileError, match="no data rows"):
        read_placements(path)
    with pytest.raises(DataFileError, match="no such file"):
        read_placements(tmp_path / "missing.csv")
    with pytest.raises(DataFileError, match="no APP/placements"):
        read_placements_dir(tmp_path)
    with pytest.raises(DataFileError, match="no such directory"):
        read_placements_dir(tmp_path / "nowhere")


def test_reader_derives_gpus_and_nodes(tmp_path: Path) -> None:
    path = tmp_path / "placements.csv"
    path.write_text(HEADER + "1123,32,0.5,0.1\n4,16,0.2,0.0\n")
    df = read_placements(path)
    assert list(df["n_gpus"]) == [7, 4] and list(df["n_nodes"]) == [4, 1]


@pytest.mark.data
def test_real_pollux_placements_median_error_under_8_percent(shared_data: Path) -> None:
    root = shared_data / "pollux" / "placements"
    if not root.is_dir():
        pytest.skip(f"needs {root}: not present on this machine")
    result, _ = run_calibration(read_placements_dir(root))
    assert {a.app for a in result.apps} == {
        "bert",
        "cifar10",
        "deepspeech2",
        "imagenet",
        "ncf",
        "yolov3",
    }
    assert result.points > 5000
    # the goal: held-out median under 8%, and better than the plain linear regression
    assert result.median_rel_error < 0.08
    assert result.median_rel_error < result.baseline_median_rel_error
    for app in result.apps:
        assert app.held_out.median < app.baseline_held_out.median
        assert 0.0 <= app.params.overlap <= 1.0
    assert result.worst.rel_error == result.max_rel_error
    assert f"'{result.worst.placement}'" in result.worst_explained
