"""The calibration model and its fit: the perf model's free parameters per application, fitted
to measured step times on relative error.

Parameters (:data:`PARAM_NAMES`): compute ``a + b x local_batch`` seconds; for the intra-node
link and the NIC, the seconds to pass one gradient over the link and a latency per ring step;
``overlap``, the fraction of compute behind which communication hides. The link features of each
placement (which links the ring crosses, how many gradient passes and ring steps each carries)
come from :func:`unstall.workload.traffic.comm_plan` itself, so the fitted figures plug straight
back into the perf model. Beside it, a plain linear regression on the same inputs: the baseline
the model must beat.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from unstall.config import check, check_positive
from unstall.errors import ConfigError
from unstall.net.link import Link
from unstall.net.topology import INTRA, NIC, TopologyConfig
from unstall.workload.job_specs import JobPerfSpec
from unstall.workload.placement import Placement
from unstall.workload.pollux_placements import GPUS_PER_NODE
from unstall.workload.traffic import comm_plan

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
    # scipy takes half a second to import: only a calibration pays it, not every user of workload.
    from scipy.optimize import least_squares

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
