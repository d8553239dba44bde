"""Model selection for the comm-stall model by cross-validation over the sweep.

The model that fits the sweep best is not necessarily the one that predicts a model outside it
best: a flexible form can bend to the sweep's points and still miss a new architecture. So each
candidate form is also judged the way it will be used. By default the folds leave out one zoo
model at a time (``resnet:depth=18``, ``resnet:depth=34``, ... together: leave-one-model-out),
the candidate is fitted on the other models' points and predicts the left-out ones; its score is
the mean absolute relative error of those out-of-sample predictions. ``groups="variant"`` leaves
out one sweep point at a time instead (plain leave-one-out), which only asks a form to
interpolate between the depths of a model it has seen.

The candidate with the lowest score is picked. Scores within :data:`TIE_TOLERANCE` of the lowest
count as a tie, and the tie goes to the form with the fewest parameters (a nested special case
that does as well out of sample is the better-determined law).

The module is pure and knows nothing about how a candidate is fitted: a fitter is any callable
``(points, stall) -> predictor`` whose predictor has ``predict_point(point)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np

from unstall.config import check
from unstall.results import JsonResult

# Relative errors are taken against at least this stall: a fully hidden stall measures ~0 +- the
# timing noise of the machine (about a millisecond here), and must not weigh like a real one.
NOISE_FLOOR_S = 1e-3
# Cross-validated errors this close (absolute, 0.005 = half a percentage point) are a tie.
TIE_TOLERANCE = 0.005
# A fold must keep at least this many points to fit on; grouping by model falls back to
# leave-one-variant-out when it cannot (one model only, or a model holding almost every point).
MIN_TRAIN_POINTS = 2


class Measured(Protocol):
    """A sweep point as selection sees it: a variant name and its measured stalls."""

    @property
    def variant(self) -> str: ...

    def stall(self, kind: str) -> float: ...


PointT = TypeVar("PointT", bound=Measured)
PointT_contra = TypeVar("PointT_contra", bound=Measured, contravariant=True)


class Predictor(Protocol[PointT_contra]):
    """A fitted candidate: predicts the stall of a point (seconds per iteration)."""

    def predict_point(self, point: PointT_contra, /) -> float: ...


def _model_name(variant: str) -> str:
    return variant.partition(":")[0].strip()


# How the points are grouped into folds: every point of a group is left out together.
CV_GROUPS: dict[str, Callable[[str], str]] = {"model": _model_name, "variant": lambda v: v}


def relative_error(predicted: float, measured: float) -> float:
    """``(predicted - measured) / measured``, the measurement floored at :data:`NOISE_FLOOR_S`."""
    return (predicted - measured) / max(abs(measured), NOISE_FLOOR_S)


@dataclass(frozen=True, kw_only=True)
class CrossValidation(JsonResult):
    """A candidate's out-of-sample errors: ``errors`` maps each sweep variant to the relative
    error of its prediction by the candidate fitted without its group (``groups``: "model" or
    "variant", the grouping actually used)."""

    groups: str
    errors: dict[str, float]
    mean_abs_rel_error: float
    max_abs_rel_error: float


def cv_folds(variants: Sequence[str], groups: str) -> tuple[str, list[list[int]]]:
    """The grouping used and, per fold, the indices of the points it leaves out.

    Grouping by model falls back to one variant a fold when there is a single model, or when a
    fold would keep fewer than :data:`MIN_TRAIN_POINTS` points to fit on.
    """
    check(groups in CV_GROUPS, "cross_validate", "groups", f"must be one of {sorted(CV_GROUPS)}")
    check(
        len(variants) > MIN_TRAIN_POINTS,
        "cross_validate",
        "points",
        f"needs more than {MIN_TRAIN_POINTS} points, got {len(variants)}",
    )
    key = CV_GROUPS[groups]
    folds: dict[str, list[int]] = {}
    for index, variant in enumerate(variants):
        folds.setdefault(key(variant), []).append(index)
    smallest_train = len(variants) - max(len(f) for f in folds.values())
    if groups != "variant" and (len(folds) < 2 or smallest_train < MIN_TRAIN_POINTS):
        return cv_folds(variants, "variant")
    return groups, list(folds.values())


def cross_validate(
    points: Sequence[PointT],
    fit: Callable[[Sequence[PointT], str], Predictor[PointT]],
    *,
    stall: str,
    groups: str = "model",
) -> CrossValidation:
    """Fit ``fit`` without each fold's points and score its predictions of them."""
    used, folds = cv_folds([p.variant for p in points], groups)
    errors: dict[str, float] = {}
    for left_out in folds:
        train = [p for i, p in enumerate(points) if i not in left_out]
        predictor = fit(train, stall)
        for i in left_out:
            point = points[i]
            errors[point.variant] = relative_error(
                predictor.predict_point(point), point.stall(stall)
            )
    magnitudes = np.abs(np.array([errors[p.variant] for p in points]))
    return CrossValidation(
        groups=used,
        errors=errors,
        mean_abs_rel_error=float(magnitudes.mean()),
        max_abs_rel_error=float(magnitudes.max()),
    )


def choose(scores: Mapping[str, tuple[float, int]]) -> tuple[str, str]:
    """The picked candidate and why, from each candidate's (cross-validated mean |relative
    error|, number of parameters), in the candidates' order of preference on a full tie."""
    check(bool(scores), "choose", "scores", "needs at least one candidate")
    best = min(error for error, _ in scores.values())
    tied = [name for name, (error, _) in scores.items() if error <= best + TIE_TOLERANCE]
    picked = min(tied, key=lambda name: (scores[name][1], scores[name][0]))
    others = ", ".join(f"{n} {e:.1%}" for n, (e, _) in scores.items() if n != picked)
    reason = f"lowest cross-validated mean |relative error| ({scores[picked][0]:.1%}; {others})"
    if len(tied) > 1:
        rivals = [n for n in tied if n != picked]
        reason = (
            f"cross-validated mean |relative error| {scores[picked][0]:.1%}, within"
            f" {TIE_TOLERANCE:.1%} of {', '.join(rivals)} ({others}), with the fewest"
            f" parameters ({scores[picked][1]})"
        )
    return picked, reason
