"""The comm-stall model: the communication stall of DDP training from how DDP communicates,
fitted on depth sweeps of zoo models and tested on a held-out one.

DDP does not reduce gradient tensors one by one: it packs them, in reverse registration order,
into buckets (the first closes at 1 MiB, the others at ``bucket_mb``, default 25 MiB) and
all-reduces each bucket as soon as backward has produced all of its gradients. Each bucket
costs a fixed time per call plus a time per byte, and the link carries the buckets one after the
other. The buckets finish while backward still runs, except the last one (the first layers'
gradients), which is ready only when backward ends. So the exposed communication, the stall, is::

    t_k   = per_bucket_s + per_byte_s * bytes_k                      (each bucket's transfer)
    stall = max(t_last, sum_k t_k - overlap * backward_s)

with ``per_bucket_s, per_byte_s >= 0`` and ``0 <= overlap <= 1`` (the link cannot hide more than
the backward pass it runs beside). ``backward_s`` is the backward time of the one-worker run
(RUN0), which every profile measures, so the model predicts the distributed stall of a job from
its one-worker profile and its gradient tensors alone. On an emulated link the fitted
coefficients can be checked against the link: ``per_byte_s`` should be the ring's
``2 (N - 1) / N * 8 / bandwidth`` and ``per_bucket_s`` its latency.

The fit minimises the squared *relative* error (the stalls of the sweep span two orders of
magnitude) under those bounds.

The bucket model is one of several candidate forms (:data:`CANDIDATES`): the same model with no
overlap (every transfer exposed), and the plain non-negative linear regression on layers,
gradient tensors and gradient bytes (:func:`fit_feature_regression`). A user wants the form that
predicts a model *not* in the sweep, which the best in-sample fit need not be, so
:func:`fit_comm_stall` fits them all, cross-validates each leaving one zoo model out at a time
(:mod:`unstall.profile.select`) and picks the one with the lowest out-of-sample error.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from unstall.config import check
from unstall.errors import ConfigError
from unstall.profile.config import ProfileConfig
from unstall.profile.link import LinkSpec
from unstall.profile.report import StallReport
from unstall.profile.select import (
    NOISE_FLOOR_S,
    CrossValidation,
    choose,
    cross_validate,
    relative_error,
)
from unstall.results import JsonResult
from unstall.workload import zoo

FEATURES = ("layers", "gradient_tensors", "gradient_bytes")
# The stalls a fit can model: each one, or "comm", all communication over the link (their sum:
# what N workers over the network add to the one-worker iteration).
STALL_KINDS = {
    "comm": ("interconnect_stall_s", "network_stall_s"),
    "interconnect": ("interconnect_stall_s",),
    "network": ("network_stall_s",),
}
FIRST_BUCKET_BYTES = 1024 * 1024  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
MIB = 1024 * 1024

DEFAULT_SWEEP = (
    "resnet:depth=18",
    "resnet:depth=34",
    "resnet:depth=50",
    "vgg:depth=11",
    "vgg:depth=13",
    "vgg:depth=16",
    "mlp:depth=2",
    "mlp:depth=4",
    "mlp:depth=8",
)
DEFAULT_HELD_OUT = "mobilenet_v2"
DEFAULT_LINK = "1,1"


def parse_variant(text: str) -> tuple[str, dict[str, object]]:
    """``"NAME[:key=value,...]"`` (integer or float values) to a zoo name and its options."""
    name, _, rest = text.partition(":")
    options: dict[str, object] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError("variant", text, f"option {item!r} is not key=value")
        try:
            options[key.strip()] = (
                int(value) if value.strip().lstrip("-").isdigit() else float(value)
            )
        except ValueError as exc:
            raise ConfigError("variant", text, f"option {key!r} is not a number") from exc
    zoo.resolve_options(name.strip(), options)  # unknown model or option: a clear error now
    return name.strip(), options


def ddp_bucket_bytes(
    tensor_bytes: Sequence[int], *, cap_bytes: int, first_cap_bytes: int = FIRST_BUCKET_BYTES
) -> tuple[int, ...]:
    """The bytes of each DDP gradient bucket, in the order DDP reduces them.

    ``tensor_bytes`` in registration order (``model.parameters()``). DDP walks them in reverse
    (the order backward produces them) and closes a bucket once it holds at least its limit:
    ``first_cap_bytes`` for the first, ``cap_bytes`` for every other; the rest is the last.
    """
    check(cap_bytes > 0 and first_cap_bytes > 0, "ddp_bucket_bytes", "cap_bytes", "must be > 0")
    buckets: list[int] = []
    current = 0
    for size in reversed(tensor_bytes):
        current += size
        if current >= (first_cap_bytes if not buckets else cap_bytes):
            buckets.append(current)
            current = 0
    if current:
        buckets.append(current)
    return tuple(buckets)


@dataclass(frozen=True, kw_only=True)
class SweepPoint(JsonResult):
    """One variant: its static facts, its DDP buckets (bytes, in reduction order), its one-worker
    backward time, and both measured communication stalls (seconds per iteration)."""

    variant: str
    layers: int
    gradient_tensors: int
    gradient_bytes: int
    bucket_bytes: tuple[int, ...]
    backward_s: float
    interconnect_stall_s: float
    network_stall_s: float

    def stall(self, kind: str) -> float:
        check(kind in STALL_KINDS, "SweepPoint", "stall", f"must be one of {sorted(STALL_KINDS)}")
        return float(sum(getattr(self, name) for name in STALL_KINDS[kind]))

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> SweepPoint:
        values = dict(data)
        values["bucket_bytes"] = tuple(values["bucket_bytes"])  # type: ignore[arg-type]
        return cls(**values)  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True)
class CommStallModel(JsonResult):
    """``stall = max(t_last, sum_k t_k - overlap * backward_s)``, ``t_k = per_bucket_s +
    per_byte_s * bytes_k`` (see the module docstring)."""

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


def _quality(
    model: StallModel, points: Sequence[SweepPoint], stall: str, held_out: SweepPoint | None
) -> FitQuality:
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
    the link itself implies, to set beside the bucket model's."""

    stall: str
    selected: str
    reason: str
    candidates: tuple[CandidateFit, ...]
    points: tuple[SweepPoint, ...]
    held_out: SweepPoint | None = None
    link: LinkSpec | None = None
    link_per_bucket_s: float | None = None
    link_per_byte_s: float | None = None

    def candidate(self, name: str) -> CandidateFit:
        """The fit of candidate ``name``."""
        for fitted in self.candidates:
            if fitted.name == name:
                return fitted
        names = [c.name for c in self.candidates]
        raise ConfigError("CommStallFit", "candidate", f"no candidate {name!r}; have {names}")

    @property
    def chosen(self) -> CandidateFit:
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
        quality=_quality(model, points, stall, held_out),
        cross_validation=cross_validate(points, form.fit, stall=stall, groups=cv_groups),
    )


def fit_comm_stall(
    points: Sequence[SweepPoint],
    *,
    stall: str = "comm",
    held_out: SweepPoint | None = None,
    link: LinkSpec | None = None,
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
        link_per_bucket_s=link.latency_ms / 1e3 if on_link and link else None,
        link_per_byte_s=link.bandwidth_delay_s(1, workers) if on_link and link else None,
    )


def _fastest_difference(report: StallReport, later: str, earlier: str) -> float:
    """``later - earlier`` between the two runs' fastest repeats (0 when either is absent)."""
    if later not in report.runs or earlier not in report.runs:
        return 0.0
    return max(0.0, report.runs[later].min_s - report.runs[earlier].min_s)


def sweep_point(variant: str, config: ProfileConfig, report: StallReport) -> SweepPoint:
    """The sweep point of ``variant`` from its profile ``report`` (run with ``config``).

    The stalls are differences of each run's *fastest* repeat, not of the medians the report
    shows: on a shared machine other work only ever adds time to a run, so the fastest repeat
    is the best estimate of the undisturbed time, and the fit should not learn the disturbance.
    """
    facts = zoo.facts(config.model, **config.zoo_options())
    return SweepPoint(
        variant=variant,
        layers=facts.layers,
        gradient_tensors=facts.gradient_tensors,
        gradient_bytes=facts.gradient_bytes,
        bucket_bytes=ddp_bucket_bytes(
            [t.bytes for t in facts.tensors], cap_bytes=int(config.bucket_mb * MIB)
        ),
        backward_s=report.phases["compute"]["backward"],
        interconnect_stall_s=_fastest_difference(report, "local", "compute"),
        network_stall_s=_fastest_difference(report, "network", "local"),
    )


def measure_point(
    variant: str, base: ProfileConfig, profile: Callable[[ProfileConfig], StallReport]
) -> SweepPoint:
    """Profile one variant with ``base``'s settings (no dataset) and return its sweep point."""
    name, options = parse_variant(variant)
    config = replace(base, model=name, model_options=options, data_dir=None)
    return sweep_point(variant, config, profile(config))


def load_points(path: Path) -> dict[str, SweepPoint]:
    """The points saved by :func:`measure_points` (none when the file does not exist yet)."""
    if not path.exists():
        return {}
    return {
        item["variant"]: SweepPoint.from_dict(item)
        for item in json.loads(path.read_text(encoding="utf-8"))
    }


def measure_points(
    variants: Sequence[str],
    base: ProfileConfig,
    profile: Callable[[ProfileConfig], StallReport],
    *,
    points_path: Path | None = None,
    on_point: Callable[[SweepPoint], None] | None = None,
) -> dict[str, SweepPoint]:
    """Each variant's sweep point: read from ``points_path`` when there, else profiled and
    written back to the file at once (so that a long sweep can run in several pieces)."""
    known = load_points(points_path) if points_path is not None else {}
    for variant in dict.fromkeys(variants):
        if variant in known:
            continue
        known[variant] = measure_point(variant, base, profile)
        if points_path is not None:
            rows = [p.to_dict() for p in known.values()]
            points_path.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
        if on_point is not None:
            on_point(known[variant])
    return known
