"""Calibrate the perf model against measured step times (Pollux's ``placements.csv``).

Pollux measured, for six applications on nodes of 4 GPUs, the step time of every placement
string ("1123": GPUs per node) at several local batch sizes. Per application we fit the perf
model's free parameters:

- compute: ``a + b x local_batch`` seconds;
- intra-node link: seconds to pass one gradient over a GPU link, and a latency per ring step;
- NIC: the same two figures for the network;
- ``overlap``: the fraction of compute behind which communication hides.

The link features of each placement (which links the ring crosses, how many gradient passes and
ring steps each carries) come from :func:`unstall.workload.traffic.comm_plan` itself, so the
fitted figures plug straight back into :func:`~unstall.workload.perf.iteration_time` (see
:meth:`~unstall.workload.calibration_results.FittedParams.perf_model`). The fit minimises the
relative error with a soft-L1 loss (scipy ``least_squares``), so a few anomalous placements do
not drag every other prediction (:mod:`unstall.workload.calibration_fit`).

Besides the in-sample error we report the error on held-out placements (group k-fold: every
batch size of a placement string is in the same fold, so a placement is never predicted from
its own measurements), and a plain linear regression on the same features as a baseline: an
in-sample figure alone would flatter a model with seven free parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import pandas as pd

from unstall.errors import ConfigError
from unstall.workload.calibration_explain import explain_worst
from unstall.workload.calibration_fit import (
    POLLUX_GRADIENT_BYTES,
    CalibrationConfig,
    baseline_features,
    fit_baseline,
    fit_params,
    group_folds,
    link_features,
    predict,
)
from unstall.workload.calibration_results import (
    AppCalibration,
    CalibrationResult,
    ErrorStats,
    FittedParams,
    WorstPoint,
)


def _rel(pred: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.abs(pred - y) / y


def _held_out(
    m: np.ndarray, feats: np.ndarray, design: np.ndarray, y: np.ndarray, folds: np.ndarray,
    config: CalibrationConfig,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Predictions of the model and of the baseline for each fold, fitted on the other folds."""
    model, baseline = np.empty_like(y), np.empty_like(y)
    for k in range(config.folds):
        test = folds == k
        if not test.any():
            continue
        train = ~test
        model[test] = predict(
            fit_params(m[train], feats[train], y[train], config), m[test], feats[test]
        )
        baseline[test] = design[test] @ fit_baseline(design[train], y[train])
    return model, baseline


def calibrate_app(
    app: str,
    table: pd.DataFrame,
    config: CalibrationConfig | None = None,
    gradient_bytes: float | None = None,
) -> tuple[AppCalibration, pd.DataFrame]:
    """Fit one application; returns its figures and a per-point table (for plots)."""
    config = config or CalibrationConfig()
    placements = list(table["placement"])
    m = table["local_bsz"].to_numpy(dtype=float)
    y = table["step_time"].to_numpy(dtype=float)
    n_gpus = table["n_gpus"].to_numpy(dtype=float)
    n_nodes = table["n_nodes"].to_numpy()
    feats = link_features(placements)
    design = baseline_features(m, n_gpus, n_nodes.astype(float))
    x = fit_params(m, feats, y, config)
    pred_in = predict(x, m, feats)
    base_in = design @ fit_baseline(design, y)
    pred_out, base_out = _held_out(
        m, feats, design, y, group_folds(placements, config.folds, config.seed), config
    )
    err_out = _rel(pred_out, y)
    points = pd.DataFrame(
        {
            "app": app,
            "placement": placements,
            "local_bsz": m.astype(int),
            "n_gpus": n_gpus.astype(int),
            "n_nodes": n_nodes,
            "measured_s": y,
            "predicted_s": pred_in,
            "held_out_s": pred_out,
            "baseline_held_out_s": base_out,
            "held_out_error": err_out,
        }
    )
    result = AppCalibration(
        app=app,
        points=len(y),
        placements=len(set(placements)),
        params=FittedParams.from_vector(x, gradient_bytes),
        in_sample=ErrorStats.of(_rel(pred_in, y)),
        held_out=ErrorStats.of(err_out),
        baseline_in_sample=ErrorStats.of(_rel(base_in, y)),
        baseline_held_out=ErrorStats.of(_rel(base_out, y)),
        held_out_median_by_nodes=_median_by_nodes(points),
        worst=_worst(points),
    )
    return result, points


def _median_by_nodes(points: pd.DataFrame) -> dict[int, float]:
    grouped = points.groupby("n_nodes")["held_out_error"].median()
    return {int(str(k)): float(v) for k, v in grouped.items()}


def _worst(points: pd.DataFrame) -> WorstPoint:
    row = points.iloc[int(np.argmax(points["held_out_error"].to_numpy()))]
    return WorstPoint(
        app=str(row["app"]),
        placement=str(row["placement"]),
        local_bsz=int(row["local_bsz"]),
        measured_s=float(row["measured_s"]),
        predicted_s=float(row["held_out_s"]),
        rel_error=float(row["held_out_error"]),
    )


def run_calibration(
    tables: Mapping[str, pd.DataFrame],
    config: CalibrationConfig | None = None,
    gradient_bytes: Mapping[str, float | None] | None = None,
    on_app: Callable[[str], None] | None = None,
) -> tuple[CalibrationResult, pd.DataFrame]:
    """Calibrate every application; returns the result and all points (for plots)."""
    config = config or CalibrationConfig()
    sizes = POLLUX_GRADIENT_BYTES if gradient_bytes is None else gradient_bytes
    apps, frames = [], []
    for app in sorted(tables):
        fitted, points = calibrate_app(app, tables[app], config, sizes.get(app))
        apps.append(fitted)
        frames.append(points)
        if on_app is not None:
            on_app(app)
    if not apps:
        raise ConfigError("run_calibration", "tables", "no application to calibrate")
    points = pd.concat(frames, ignore_index=True)
    y = points["measured_s"].to_numpy()
    held, inside = points["held_out_error"].to_numpy(), _rel(points["predicted_s"].to_numpy(), y)
    base = _rel(points["baseline_held_out_s"].to_numpy(), y)
    worst = _worst(points)
    by_nodes = _median_by_nodes(points)
    result = CalibrationResult(
        median_rel_error=float(np.median(held)),
        max_rel_error=float(np.max(held)),
        p90_rel_error=float(np.quantile(held, 0.9)),
        in_sample_median_rel_error=float(np.median(inside)),
        in_sample_max_rel_error=float(np.max(inside)),
        baseline_median_rel_error=float(np.median(base)),
        baseline_max_rel_error=float(np.max(base)),
        points=len(points),
        folds=config.folds,
        apps=tuple(apps),
        held_out_median_by_nodes=by_nodes,
        worst=worst,
        worst_explained=explain_worst(worst, points, by_nodes),
    )
    return result, points
