"""The comm-stall model: every candidate law fitted on the sweep, the one that predicts models
*not* in the sweep picked by cross-validation, and its prediction of a held-out variant.

The bucket law of :mod:`unstall.profile.laws` is one of several candidate forms
(:data:`CANDIDATES`): the same law with no overlap (every transfer exposed), and the plain
non-negative linear regression on layers, gradient tensors and gradient bytes. A user wants the
form that predicts a model *not* in the sweep, which the best in-sample fit need not be, so
:func:`fit_comm_stall` fits them all, cross-validates each leaving one zoo model out at a time
(:mod:`unstall.profile.select`) and picks the one with the lowest out-of-sample error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from unstall.config import check
from unstall.errors import ConfigError
from unstall.net.link import Link
from unstall.profile.comm_hook import bandwidth_delay_s, link_json
from unstall.profile.laws import (
    CommStallModel,
    FitQuality,
    StallModel,
    fit_bucket_model,
    fit_feature_regression,
    fit_quality,
)
from unstall.profile.select import CrossValidation, choose, cross_validate
from unstall.profile.sweep import STALL_KINDS, SweepPoint
from unstall.results import JsonResult


@dataclass(frozen=True)
class Candidate:
    """A form of the comm-stall model that selection can pick: how it reads, how many
    parameters it fits, and its fitter ``(points, stall) -> model``."""

    formula: str
    parameters: int
    fit: Callable[[Sequence[SweepPoint], str], StallModel]


def _fit_without_overlap(points: Sequence[SweepPoint], stall: str) -> CommStallModel:
    return fit_bucket_model(points, stall, overlap=0.0)


# In order of preference on a full tie. "ddp-buckets-no-overlap" is the bucket model with
# overlap 0: every bucket's transfer exposed, as when the all-reduce's CPU work competes with
# backward for the same cores instead of hiding behind it.
CANDIDATES: dict[str, Candidate] = {
    "ddp-buckets": Candidate(
        formula="max(t_last, sum t_k - overlap x backward), t_k = a + b x bytes_k",
        parameters=3,
        fit=fit_bucket_model,
    ),
    "ddp-buckets-no-overlap": Candidate(
        formula="sum t_k = a x buckets + b x bytes", parameters=2, fit=_fit_without_overlap
    ),
    "regression": Candidate(
        formula="c0 + c1 x layers + c2 x tensors + c3 x bytes",
        parameters=4,
        fit=fit_feature_regression,
    ),
}


@dataclass(frozen=True, kw_only=True)
class CandidateFit(JsonResult):
    """One candidate fitted on the whole sweep: its coefficients, its in-sample quality (and
    held-out prediction), and its cross-validated errors, on which selection decides."""

    name: str
    formula: str
    parameters: int
    model: StallModel
    quality: FitQuality
    cross_validation: CrossValidation


@dataclass(frozen=True, kw_only=True)
class CommStallFit(JsonResult):
    """Every candidate's fit, the one picked by cross-validation (``selected``) and why
    (``reason``), the points, the held-out variant, and (on an emulated link) the coefficients
    the link itself implies, to set beside the bucket model's. In JSON the link is in the units
    of the command line (``gbps``, ``latency_ms``)."""

    stall: str
    selected: str
    reason: str
    candidates: tuple[CandidateFit, ...]
    points: tuple[SweepPoint, ...]
    held_out: SweepPoint | None = None
    link: Link | None = None
    link_per_bucket_s: float | None = None
    link_per_byte_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["link"] = link_json(self.link)
        return out

    def candidate(self, name: str) -> CandidateFit:
        """The fit of candidate ``name``."""
        for fitted in self.candidates:
            if fitted.name == name:
                return fitted
        names = [c.name for c in self.candidates]
        raise ConfigError("CommStallFit", "candidate", f"no candidate {name!r}; have {names}")

    @property
    def chosen(self) -> CandidateFit:
        """The fit of the selected candidate."""
        return self.candidate(self.selected)

    def predict(self, point: SweepPoint) -> float:
        """The stall of ``point`` by the selected model (seconds per iteration)."""
        return self.chosen.model.predict_point(point)


def _fit_candidate(
    name: str,
    points: Sequence[SweepPoint],
    stall: str,
    held_out: SweepPoint | None,
    cv_groups: str,
) -> CandidateFit:
    """Candidate ``name`` fitted on all ``points``, with its quality and cross-validation."""
    form = CANDIDATES[name]
    model = form.fit(points, stall)
    return CandidateFit(
        name=name,
        formula=form.formula,
        parameters=form.parameters,
        model=model,
        quality=fit_quality(model, points, stall, held_out),
        cross_validation=cross_validate(points, form.fit, stall=stall, groups=cv_groups),
    )


def fit_comm_stall(
    points: Sequence[SweepPoint],
    *,
    stall: str = "comm",
    held_out: SweepPoint | None = None,
    link: Link | None = None,
    workers: int = 2,
    cv_groups: str = "model",
    candidates: Sequence[str] = tuple(CANDIDATES),
) -> CommStallFit:
    """Fit each candidate on ``points``, cross-validate it (folds by ``cv_groups``, see
    :mod:`unstall.profile.select`), pick the one that predicts left-out points best, and
    predict ``held_out`` with each.

    ``link`` is the emulated link the points were measured over (when ``stall`` is ``network``
    or ``comm``): its latency and ring bytes per bandwidth are reported beside the fitted values.
    The link bounds the per-byte cost of ``comm`` from below only: each bucket is reduced on the
    host first and then crosses the link, so the slower of the two sets the pace.
    """
    check(stall in STALL_KINDS, "fit_comm_stall", "stall", f"must be one of {sorted(STALL_KINDS)}")
    check(len(points) >= 3, "fit_comm_stall", "points", "needs at least three sweep points")
    unknown = [name for name in candidates if name not in CANDIDATES]
    check(
        bool(candidates) and not unknown,
        "fit_comm_stall",
        "candidates",
        f"unknown {unknown}; known: {sorted(CANDIDATES)}",
    )
    fits = [
        _fit_candidate(name, points, stall, held_out, cv_groups)
        for name in dict.fromkeys(candidates)
    ]
    scores = {f.name: (f.cross_validation.mean_abs_rel_error, f.parameters) for f in fits}
    selected, why = choose(scores)
    groups = fits[0].cross_validation.groups
    on_link = link is not None and stall != "interconnect"
    return CommStallFit(
        stall=stall,
        selected=selected,
        reason=f"leave-one-{groups}-out: {why}",
        candidates=tuple(fits),
        points=tuple(points),
        held_out=held_out,
        link=link if on_link else None,
        link_per_bucket_s=link.latency_s if on_link and link else None,
        link_per_byte_s=bandwidth_delay_s(link, 1, workers) if on_link and link else None,
    )
