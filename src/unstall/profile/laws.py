"""The laws the comm-stall model can take, each fitted to sweep points, and how well they fit.

The communication of an iteration, from how DDP communicates (see :mod:`unstall.profile.sweep`):
each bucket costs a fixed time per call plus a time per byte, and the link carries the buckets
one after the other. The buckets finish while backward still runs, except the last one (the
first layers' gradients), which is ready only when backward ends. So the exposed communication,
the stall, is::

    t_k   = per_bucket_s + per_byte_s * bytes_k                      (each bucket's transfer)
    stall = max(t_last, sum_k t_k - overlap * backward_s)

with ``per_bucket_s, per_byte_s >= 0`` and ``0 <= overlap <= 1`` (the link cannot hide more than
the backward pass it runs beside). ``backward_s`` is the backward time of the one-worker run
(RUN0), which every profile measures, so the law predicts the distributed stall of a job from
its one-worker profile and its gradient tensors alone. On an emulated link the fitted
coefficients can be checked against the link: ``per_byte_s`` should be the ring's
``2 (N - 1) / N * 8 / bandwidth`` and ``per_bucket_s`` its latency.

:func:`fit_bucket_model` minimises the squared *relative* error (the stalls of a sweep span two
orders of magnitude) under those bounds. :func:`fit_feature_regression` is the plain
alternative: a non-negative linear regression on layers, gradient tensors and gradient bytes.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from unstall.config import check
from unstall.profile.select import NOISE_FLOOR_S, relative_error
from unstall.profile.sweep import SweepPoint
from unstall.results import JsonResult

FEATURES = ("layers", "gradient_tensors", "gradient_bytes")


@dataclass(frozen=True, kw_only=True)
class CommStallModel(JsonResult):
    """The bucket law: ``stall = max(t_last, sum_k t_k - overlap * backward_s)``,
    ``t_k = per_bucket_s + per_byte_s * bytes_k`` (see the module docstring)."""

    per_bucket_s: float
    per_byte_s: float
    overlap: float

    def predict(self, bucket_bytes: Sequence[int], backward_s: float) -> float:
        transfers = [self.per_bucket_s + self.per_byte_s * b for b in bucket_bytes]
        if not transfers:
            return 0.0
        return max(transfers[-1], sum(transfers) - self.overlap * backward_s)

    def predict_point(self, point: SweepPoint) -> float:
        return self.predict(point.bucket_bytes, point.backward_s)

    def describe(self) -> str:
        return (
            f"{self.per_bucket_s * 1e3:.4g} ms per bucket + {self.per_byte_s * 1e9:.4g} s/GB,"
            f" overlap {self.overlap:.3g}"
        )


@dataclass(frozen=True, kw_only=True)
class FeatureRegression(JsonResult):
    """The plain model: ``stall = c0 + sum c_f * f`` over :data:`FEATURES`."""

    intercept_s: float
    coefficients: dict[str, float]

    def predict_point(self, point: SweepPoint) -> float:
        return self.intercept_s + sum(
            self.coefficients[name] * float(getattr(point, name)) for name in FEATURES
        )

    def describe(self) -> str:
        c = self.coefficients
        return (
            f"{self.intercept_s * 1e3:.4g} ms + {c['layers'] * 1e6:.4g} us/layer"
            f" + {c['gradient_tensors'] * 1e6:.4g} us/tensor + {c['gradient_bytes'] * 1e9:.4g} s/GB"
        )


StallModel = CommStallModel | FeatureRegression


@dataclass(frozen=True, kw_only=True)
class FitQuality(JsonResult):
    """How a model fits the sweep, and how it predicts the held-out variant (when one is given)."""

    r2: float
    mean_abs_rel_error: float
    max_abs_rel_error: float
    fitted_s: tuple[float, ...]
    held_out_predicted_s: float | None = None
    held_out_rel_error: float | None = None


def fit_quality(
    model: StallModel, points: Sequence[SweepPoint], stall: str, held_out: SweepPoint | None
) -> FitQuality:
    """How ``model`` fits ``points``' ``stall`` (R^2, relative errors floored at the noise) and
    predicts ``held_out``."""
    target = np.array([p.stall(stall) for p in points])
    fitted = np.array([model.predict_point(p) for p in points], dtype=float)
    spread = float(np.sum((target - target.mean()) ** 2))
    r2 = 1.0 - float(np.sum((target - fitted) ** 2)) / spread if spread > 0 else 1.0
    rel = np.abs(fitted - target) / np.maximum(np.abs(target), NOISE_FLOOR_S)
    held = model.predict_point(held_out) if held_out is not None else None
    return FitQuality(
        r2=r2,
        mean_abs_rel_error=float(rel.mean()),
        max_abs_rel_error=float(rel.max()),
        fitted_s=tuple(float(v) for v in fitted),
        held_out_predicted_s=held,
        held_out_rel_error=(
            relative_error(held, held_out.stall(stall))
            if held is not None and held_out is not None
            else None
        ),
    )


def fit_feature_regression(points: Sequence[SweepPoint], stall: str = "comm") -> FeatureRegression:
    """Non-negative least squares of the stall on 1, layers, gradient tensors, gradient bytes."""
    from scipy.optimize import nnls

    check(len(points) >= 2, "fit_feature_regression", "points", "needs at least two points")
    design = np.array([[1.0, *(float(getattr(p, f)) for f in FEATURES)] for p in points])
    target = np.array([p.stall(stall) for p in points])
    scale = np.where(design.max(axis=0) > 0, design.max(axis=0), 1.0)
    solution, _ = nnls(design / scale, target)
    coefs = solution / scale
    return FeatureRegression(
        intercept_s=float(coefs[0]),
        coefficients={name: float(c) for name, c in zip(FEATURES, coefs[1:], strict=True)},
    )


# Parameters are fitted in units of similar size: ms per bucket, s per GB, the overlap fraction.
_UNITS = np.array([1e-3, 1e-9, 1.0])


def fit_bucket_model(
    points: Sequence[SweepPoint], stall: str = "comm", *, overlap: float | None = None
) -> CommStallModel:
    """The bucket model of ``points``' ``stall``; ``overlap`` fixed when given, else fitted.

    Least squares on symmetric relative residuals, ``(fit - measured) / mean(fit, measured)``,
    from a few starting points; the best wins. Symmetric, so that a point whose stall noise wiped
    out (measured ~0) costs at most 2 instead of dragging every other prediction to zero.
    """
    from scipy.optimize import least_squares

    check(len(points) >= 1, "fit_bucket_model", "points", "needs at least one point")
    check(overlap is None or 0 <= overlap <= 1, "fit_bucket_model", "overlap", "must be in [0,1]")
    target = np.array([p.stall(stall) for p in points])
    free = 3 if overlap is None else 2  # parameters fitted

    def model_of(x: np.ndarray) -> CommStallModel:
        values = x * _UNITS[:free]
        fraction = float(values[2]) if overlap is None else overlap
        return CommStallModel(
            per_bucket_s=float(values[0]), per_byte_s=float(values[1]), overlap=fraction
        )

    def residuals(x: np.ndarray) -> np.ndarray:
        fitted = np.array([model_of(x).predict_point(p) for p in points])
        scale = np.maximum((np.abs(fitted) + np.abs(target)) / 2, NOISE_FLOOR_S)
        return (fitted - target) / scale

    total_bytes = np.array([p.gradient_bytes for p in points], dtype=float)
    per_byte0 = float(np.median(target / np.maximum(total_bytes, 1.0))) / _UNITS[1]
    overlaps0 = (0.0, 0.5, 1.0) if overlap is None else (None,)
    best = None
    for per_bucket0, overlap0 in itertools.product((0.1, 1.0, 10.0), overlaps0):
        start = [per_bucket0, per_byte0, overlap0][:free]
        result = least_squares(
            residuals,
            x0=np.array(start, dtype=float),
            bounds=([0.0] * free, [np.inf, np.inf, 1.0][:free]),
        )
        if best is None or result.cost < best.cost:
            best = result
    assert best is not None
    return model_of(best.x)
