"""Calibrate the perf model against measured step times (Pollux's ``placements.csv``).

Pollux measured, for six applications on nodes of 4 GPUs, the step time of every placement
string ("1123": GPUs per node) at several local batch sizes. Per application we fit the perf
model's free parameters:

- compute: ``a + b x local_batch`` seconds;
- intra-node link: seconds to pass one gradient over a GPU link, and a latency per ring step;
- NIC: the same two figures for the network;
- ``overlap``: the fraction of compute behind which communication hides.

The link features of each placement (which links the ring crosses, how many gradient passes and
ring steps each carries) come from :func:`unstall.workload.perf.comm_plan` itself, so the fitted
figures plug straight back into :func:`~unstall.workload.perf.iteration_time` (see
:meth:`FittedParams.perf_model`). The fit minimises the relative error with a soft-L1 loss
(scipy ``least_squares``), so a few anomalous placements do not drag every other prediction.

Honesty: besides the in-sample error we report the error on held-out placements (group k-fold:
every batch size of a placement string is in the same fold, so a placement is never predicted
from its own measurements), and a plain linear regression on the same features as a baseline.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from unstall.config import check, check_positive
from unstall.errors import ConfigError
from unstall.net.link import Link
from unstall.net.topology import INTRA, NIC, TopologyConfig
from unstall.results import JsonResult
from unstall.workload.perf import JobPerfSpec, Placement, comm_plan
from unstall.workload.pollux_placements import (
    COLUMNS,
    GPUS_PER_NODE,
    read_placements,
    read_placements_dir,
)

__all__ = [
    "COLUMNS",
    "AppCalibration",
    "CalibrationConfig",
    "CalibrationResult",
    "FittedParams",
    "calibrate",
    "calibrate_app",
    "read_placements",
    "read_placements_dir",
    "run_calibration",
]

POLLUX_DEVICE = "t4"
# fp32 gradient bytes of the models behind Pollux's applications (published parameter counts x 4
# bytes); None where the exact model configuration is not published with the traces, in which case
# only the time per gradient pass is reported, not a bandwidth.
POLLUX_GRADIENT_BYTES: dict[str, float | None] = {
    "bert": 110e6 * 4,  # BERT-base (Devlin et al., 2019): 110M parameters
    "cifar10": 11.2e6 * 4,  # ResNet-18 for CIFAR-10: 11.2M
    "imagenet": 25.6e6 * 4,  # ResNet-50 (He et al., 2016): 25.6M
    "yolov3": 61.9e6 * 4,  # YOLOv3-416 (Redmon and Farhadi, 2018): 61.9M
    "deepspeech2": None,
    "ncf": None,
}
NOMINAL_GRADIENT_BYTES = 100e6  # stands in for an unknown size: the fit only sees bytes/bandwidth

PARAM_NAMES = (
    "compute_fixed_s",
    "compute_per_sample_s",
    "intra_s_per_pass",
    "intra_latency_ms",
    "nic_s_per_pass",
    "nic_latency_ms",
    "overlap",
)
_MIN_PASS_S = 1e-9  # a link never becomes infinitely fast (bandwidth stays finite)


@dataclass(frozen=True, kw_only=True)
class CalibrationConfig:
    """How to fit: folds of held-out placements, the seed that assigns them, the loss."""

    folds: int = 5
    seed: int = 0
    loss: str = "soft_l1"
    f_scale: float = 0.05  # relative error at which the soft-L1 loss turns from square to linear
    overlap_starts: tuple[float, ...] = (0.1, 0.5, 0.9)
    ordered_links: bool = True  # NIC never faster than the intra-node link (see fit_params)

    def __post_init__(self) -> None:
        check(self.folds >= 2, self, "folds", f"must be >= 2, got {self.folds}")
        check(
            self.loss in ("linear", "soft_l1", "huber", "cauchy"),
            self,
            "loss",
            f"must be a least_squares loss (linear, soft_l1, huber, cauchy), got {self.loss!r}",
        )
        check_positive(self, f_scale=self.f_scale)
        check(
            bool(self.overlap_starts) and all(0 <= s <= 1 for s in self.overlap_starts),
            self,
            "overlap_starts",
            "must be a non-empty list of values in [0, 1]",
        )


# --- features from the perf model ---------------------------------------------------------------


def _reference_topology(gpus_per_node: int) -> TopologyConfig:
    # 8 Gbps = 1e9 bytes/s and 1 us everywhere, so that a load's time splits exactly into
    # (ring steps x latency) + (gradient passes x seconds per pass).
    unit = Link(bandwidth_gbps=8.0, latency_us=1.0)
    return TopologyConfig(
        name="calibration-reference",
        racks=1,
        nodes_per_rack=16,
        gpus_per_node=gpus_per_node,
        device=POLLUX_DEVICE,
        intra_link=unit,
        nic=unit,
    )


def link_features(placements: Sequence[str], gpus_per_node: int = GPUS_PER_NODE) -> np.ndarray:
    """Per placement string: ``[intra passes, intra steps, nic passes, nic steps]``.

    Read off :func:`comm_plan` for a ring all-reduce of one bucket; zero where the ring does not
    cross that kind of link.
    """
    topo = _reference_topology(gpus_per_node)
    spec = JobPerfSpec(
        device=POLLUX_DEVICE, compute_s=1.0, gradient_bytes=1e9, bucket_bytes=1e9, overlap=0.0
    )
    cache: dict[str, list[float]] = {}
    for text in set(placements):
        row = [0.0, 0.0, 0.0, 0.0]
        for load in comm_plan(spec, Placement.parse(text), topo).loads:
            at = 0 if load.link[0] == INTRA else 2 if load.link[0] == NIC else None
            if at is None:
                raise ConfigError("link_features", "placements", "a single rack has no uplinks")
            # seconds at 1e9 bytes/s for a 1e9-byte gradient = gradient passes; latency in us
            row[at] = max(row[at], load.bytes / load.max_bandwidth)
            row[at + 1] = max(row[at + 1], load.latency_s / 1e-6)
        cache[text] = row
    return np.array([cache[t] for t in placements], dtype=float)


# --- the model, vectorised ----------------------------------------------------------------------


def predict(x: np.ndarray, local_bsz: np.ndarray, feats: np.ndarray) -> np.ndarray:
    """Step times for parameters ``x`` (see :data:`PARAM_NAMES`), batches and link features."""
    a, b, s_i, lat_i, s_n, lat_n, ov = x
    compute = a + b * local_bsz
    t_intra = np.where(feats[:, 0] > 0, feats[:, 0] * s_i + feats[:, 1] * lat_i * 1e-3, 0.0)
    t_nic = np.where(feats[:, 2] > 0, feats[:, 2] * s_n + feats[:, 3] * lat_n * 1e-3, 0.0)
    comm = np.maximum(t_intra, t_nic)
    return compute + np.maximum(0.0, comm - ov * compute)


def _jacobian(x: np.ndarray, local_bsz: np.ndarray, feats: np.ndarray, y: np.ndarray) -> np.ndarray:
    """d(relative residual)/dx: the model is piecewise linear, so it is exact almost everywhere."""
    a, b, s_i, lat_i, s_n, lat_n, ov = x
    compute = a + b * local_bsz
    t_intra = np.where(feats[:, 0] > 0, feats[:, 0] * s_i + feats[:, 1] * lat_i * 1e-3, 0.0)
    t_nic = np.where(feats[:, 2] > 0, feats[:, 2] * s_n + feats[:, 3] * lat_n * 1e-3, 0.0)
    comm = np.maximum(t_intra, t_nic)
    exposed = comm - ov * compute > 0
    nic_wins = (t_nic >= t_intra) & exposed
    intra_wins = (t_intra > t_nic) & exposed
    dc = np.where(exposed, 1.0 - ov, 1.0)
    jac = np.column_stack(
        [
            dc,
            dc * local_bsz,
            np.where(intra_wins, feats[:, 0], 0.0),
            np.where(intra_wins, feats[:, 1] * 1e-3, 0.0),
            np.where(nic_wins, feats[:, 2], 0.0),
            np.where(nic_wins, feats[:, 3] * 1e-3, 0.0),
            np.where(exposed, -compute, 0.0),
        ]
    )
    return jac / y[:, None]


def _initial_guess(
    local_bsz: np.ndarray, y: np.ndarray, feats: np.ndarray, ov: float
) -> np.ndarray:
    single = (feats[:, 0] == 0) & (feats[:, 2] == 0)
    b = 0.0
    if single.sum() >= 2 and np.ptp(local_bsz[single]) > 0:
        b = max(0.0, float(np.polyfit(local_bsz[single], y[single], 1)[0]))
    a = max(float(np.min(y)) * 0.5, 1e-6)
    multi = feats[:, 2] > 0
    comm = float(np.median(y[multi])) if multi.any() else float(np.median(y))
    return np.array([a, b, comm * 0.1, 0.0, comm * 0.5, 0.0, ov])


# With ordered links the NIC figures are fitted as the intra-node ones plus a non-negative excess
# (x = ORDERED @ z), so that a GPU link is never slower than the network: the property that makes
# a consolidated placement the fastest, which the simulator and the schedulers rely on.
_ORDERED = np.eye(len(PARAM_NAMES))
_ORDERED[4, 2] = 1.0  # nic_s_per_pass = intra_s_per_pass + excess
_ORDERED[5, 3] = 1.0  # nic_latency_ms = intra_latency_ms + excess


def fit_params(
    local_bsz: np.ndarray, feats: np.ndarray, y: np.ndarray, config: CalibrationConfig
) -> np.ndarray:
    """Least-squares fit of :data:`PARAM_NAMES` on relative error; the best of a few starts."""
    to_x = _ORDERED if config.ordered_links else np.eye(len(PARAM_NAMES))
    lower = np.array([0.0, 0.0, _MIN_PASS_S, 0.0, 0.0 if config.ordered_links else _MIN_PASS_S])
    lower = np.concatenate([lower, [0.0, 0.0]])
    upper = np.array([np.inf] * 6 + [1.0])
    best_z, best_cost = None, math.inf
    for ov in config.overlap_starts:
        x0 = _initial_guess(local_bsz, y, feats, ov)
        z0 = np.clip(np.linalg.solve(to_x, x0), lower, upper)
        fit = least_squares(
            lambda z: (predict(to_x @ z, local_bsz, feats) - y) / y,
            z0,
            jac=lambda z: _jacobian(to_x @ z, local_bsz, feats, y) @ to_x,
            bounds=(lower, upper),
            loss=config.loss,
            f_scale=config.f_scale,
            x_scale="jac",
        )
        if fit.cost < best_cost:
            best_z, best_cost = fit.x, fit.cost
    assert best_z is not None
    return np.asarray(to_x @ best_z)


def baseline_features(local_bsz: np.ndarray, n_gpus: np.ndarray, n_nodes: np.ndarray) -> np.ndarray:
    """The linear baseline's design matrix: 1, batch, GPUs, nodes, multi-node, ring factor."""
    ring = 2.0 * (n_gpus - 1) / n_gpus
    return np.column_stack(
        [np.ones_like(local_bsz), local_bsz, n_gpus, n_nodes, (n_nodes > 1) * 1.0, ring]
    )


def fit_baseline(design: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Ordinary least squares (absolute error), the plain regression the model must beat."""
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    return np.asarray(coef)


def group_folds(groups: Sequence[str], folds: int, seed: int) -> np.ndarray:
    """Fold index per row; all rows of a group (placement string) share a fold."""
    unique = sorted(set(groups))
    random.Random(seed).shuffle(unique)
    fold_of = {g: i % folds for i, g in enumerate(unique)}
    return np.array([fold_of[g] for g in groups])


# --- results ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ErrorStats(JsonResult):
    """Relative errors |predicted - measured| / measured over a set of points."""

    median: float
    p90: float
    max: float
    mean: float

    @classmethod
    def of(cls, errors: np.ndarray) -> ErrorStats:
        return cls(
            median=float(np.median(errors)),
            p90=float(np.quantile(errors, 0.9)),
            max=float(np.max(errors)),
            mean=float(np.mean(errors)),
        )


@dataclass(frozen=True, kw_only=True)
class WorstPoint(JsonResult):
    """The point with the largest held-out error."""

    app: str
    placement: str
    local_bsz: int
    measured_s: float
    predicted_s: float
    rel_error: float


@dataclass(frozen=True, kw_only=True)
class FittedParams(JsonResult):
    """One application's fitted perf-model parameters (see the module docstring)."""

    compute_fixed_s: float
    compute_per_sample_s: float
    intra_s_per_pass: float
    intra_latency_ms: float
    nic_s_per_pass: float
    nic_latency_ms: float
    overlap: float
    gradient_bytes: float | None
    intra_gbps: float | None
    nic_gbps: float | None

    @classmethod
    def from_vector(cls, x: np.ndarray, gradient_bytes: float | None) -> FittedParams:
        values = dict(zip(PARAM_NAMES, (float(v) for v in x), strict=True))
        gbps = None if gradient_bytes is None else gradient_bytes * 8 / 1e9
        return cls(
            **values,
            gradient_bytes=gradient_bytes,
            intra_gbps=None if gbps is None else gbps / values["intra_s_per_pass"],
            nic_gbps=None if gbps is None else gbps / values["nic_s_per_pass"],
        )

    def vector(self) -> np.ndarray:
        return np.array([getattr(self, name) for name in PARAM_NAMES])

    def perf_model(
        self, local_bsz: int, gpus_per_node: int = GPUS_PER_NODE, nodes: int = 16
    ) -> tuple[JobPerfSpec, TopologyConfig]:
        """A :class:`JobPerfSpec` and one-rack :class:`TopologyConfig` that reproduce the fit.

        ``iteration_time(spec, placement, topology).total_s`` equals the calibrated prediction.
        """
        size = self.gradient_bytes or NOMINAL_GRADIENT_BYTES
        gbit = size * 8 / 1e9
        compute = self.compute_fixed_s + self.compute_per_sample_s * local_bsz
        spec = JobPerfSpec(
            name="calibrated",
            device=POLLUX_DEVICE,
            compute_s=max(compute, 1e-12),
            local_batch=local_bsz,
            fixed_compute_s=min(self.compute_fixed_s, max(compute, 1e-12)),
            gradient_bytes=size,
            bucket_bytes=size,  # one bucket: the fitted latency is per ring step
            overlap=self.overlap,
        )
        topology = TopologyConfig(
            name="calibrated",
            racks=1,
            nodes_per_rack=nodes,
            gpus_per_node=gpus_per_node,
            device=POLLUX_DEVICE,
            intra_link=Link(
                bandwidth_gbps=gbit / self.intra_s_per_pass, latency_us=self.intra_latency_ms * 1e3
            ),
            nic=Link(
                bandwidth_gbps=gbit / self.nic_s_per_pass, latency_us=self.nic_latency_ms * 1e3
            ),
        )
        return spec, topology


@dataclass(frozen=True, kw_only=True)
class AppCalibration(JsonResult):
    """One application: its fit, its errors, the baseline's, and where it errs most."""

    app: str
    points: int
    placements: int
    params: FittedParams
    in_sample: ErrorStats
    held_out: ErrorStats
    baseline_in_sample: ErrorStats
    baseline_held_out: ErrorStats
    held_out_median_by_nodes: dict[int, float]
    worst: WorstPoint


@dataclass(frozen=True, kw_only=True)
class CalibrationResult(JsonResult):
    """All applications: overall figures are over every point of every application.

    ``median_rel_error`` and ``max_rel_error`` are the held-out figures (each placement predicted
    by a model fitted without it); the in-sample and baseline figures sit beside them.
    """

    median_rel_error: float
    max_rel_error: float
    p90_rel_error: float
    in_sample_median_rel_error: float
    in_sample_max_rel_error: float
    baseline_median_rel_error: float
    baseline_max_rel_error: float
    points: int
    folds: int
    apps: tuple[AppCalibration, ...]
    held_out_median_by_nodes: dict[int, float]
    worst: WorstPoint
    worst_explained: str


# --- running it ---------------------------------------------------------------------------------


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


def calibrate(
    placements_dir: str | Path, config: CalibrationConfig | None = None
) -> CalibrationResult:
    """Read ``placements_dir/APP/placements.csv`` and calibrate every application."""
    return run_calibration(read_placements_dir(placements_dir), config)[0]


# --- the worst case, in words -------------------------------------------------------------------


def explain_worst(worst: WorstPoint, points: pd.DataFrame, by_nodes: Mapping[int, float]) -> str:
    """Say what the worst point is, why the model misses it, and which placements are hardest."""
    sign = "under" if worst.predicted_s < worst.measured_s else "over"
    text = (
        f"Worst held-out point: {worst.app} placement '{worst.placement}' at local batch "
        f"{worst.local_bsz}: measured {worst.measured_s:.3g} s, predicted "
        f"{worst.predicted_s:.3g} s ({worst.rel_error:.0%} {sign}-prediction). "
    )
    app_points = points[points["app"] == worst.app]
    others = app_points[app_points["placement"] != worst.placement]
    if worst.placement == "1":
        text += (
            "'1' is the only placement without communication: held out, the compute term must be "
            "read from multi-GPU placements, where compute and exposed communication add up, and "
            "the fit gives compute what belongs to communication. "
        )
    elif sign == "under":
        text += _inversion_sentence(app_points[app_points["local_bsz"] == worst.local_bsz], worst)
    else:
        text += "Its neighbours in placement and batch were faster: measurement noise. "
    if not others.empty and worst.local_bsz > others["local_bsz"].max():
        text += (
            f"No other placement was measured at a local batch above "
            f"{int(others['local_bsz'].max())}, so the compute term is also extrapolated. "
        )
    return text + _hardest_nodes_sentence(points, by_nodes)


def _inversions(points: pd.DataFrame) -> pd.DataFrame:
    """Pairs at the same app and batch where more nodes and at least as many GPUs ran faster."""
    cols = ["app", "local_bsz", "placement", "n_nodes", "n_gpus", "measured_s"]
    pairs = points[cols].merge(points[cols], on=["app", "local_bsz"], suffixes=("", "_more"))
    pairs = pairs[
        (pairs["n_nodes_more"] > pairs["n_nodes"])
        & (pairs["n_gpus_more"] >= pairs["n_gpus"])
        & (pairs["measured_s_more"] < pairs["measured_s"])
    ]
    return pairs.assign(ratio=pairs["measured_s"] / pairs["measured_s_more"])


def _inversion_sentence(same_batch: pd.DataFrame, worst: WorstPoint) -> str:
    pairs = _inversions(same_batch)
    pairs = pairs[pairs["placement"] == worst.placement]
    if pairs.empty:
        return (
            "Its neighbours in placement and batch do not show the same time, so the model reads "
            "it as measurement noise. "
        )
    best = pairs.iloc[int(np.argmax(pairs["ratio"].to_numpy()))]
    return (
        f"At the same batch '{best['placement_more']}' ({best['n_nodes_more']} nodes, "
        f"{best['n_gpus_more']} GPUs) took {best['measured_s_more']:.3g} s: more GPUs over more "
        "nodes, yet faster, which a model where more nodes or GPUs never shorten communication "
        "cannot follow. "
    )


def _hardest_nodes_sentence(points: pd.DataFrame, by_nodes: Mapping[int, float]) -> str:
    text = (
        "Median held-out error by number of nodes: "
        + ", ".join(f"{n}: {e:.1%}" for n, e in sorted(by_nodes.items()))
        + "."
    )
    hardest = max(by_nodes, key=lambda n: by_nodes[n])
    pairs = _inversions(points)
    pairs = pairs[pairs["n_nodes"] == hardest]
    if pairs.empty:
        return text
    share = len(pairs.drop_duplicates(["app", "local_bsz", "placement"])) / max(
        1, int((points["n_nodes"] == hardest).sum())
    )
    top = pairs.iloc[int(np.argmax(pairs["ratio"].to_numpy()))]
    return text + (
        f" Placements on {hardest} node(s) are the hardest: {share:.0%} of them ran slower than "
        "some placement of the same application and batch with more nodes and at least as many "
        f"GPUs (worst: {top['app']} '{top['placement']}' {top['measured_s']:.3g} s vs "
        f"'{top['placement_more']}' {top['measured_s_more']:.3g} s at batch {top['local_bsz']}). "
        "Links, bytes and ring steps cannot make spreading faster, so the model, which the "
        "simulator needs to be monotone, under-predicts these."
    )
