"""Fit GPU speeds per model family from measured throughputs, and judge the fit held out (pure).

Input: Gavel's measured throughputs (stanford-futuredata/gavel,
``scheduler/simulation_throughputs.json``, MIT): iterations per second of each job type
("ResNet-50 (batch size 32)", ...) alone on one K80, P100 or V100. A family's speed on a GPU is
its throughput there relative to the reference GPU (V100), the geometric mean over the family's
batch sizes. A model of no measured family gets the roofline's speeds for its step
(:mod:`unstall.net.device_roofline`), or the median of the families' speeds.

Judging the fit: a cross-device ratio ``t(a) / t(b)`` of one job type is predicted

- ``leave-one-family-out``: from the median speeds of the *other* families (what a model outside
  the table gets when nothing is known about it);
- ``leave-one-batch-out``: from the same family's other batch sizes (what a family in the table
  gets for a batch it was not measured at);
- ``datasheet``: from the flat model (fp32 peak x a flat efficiency, :mod:`unstall.net.hardware`);
- ``roofline``: from the step-time roofline (:mod:`unstall.net.device_roofline`) fitted on the
  *other* families' measured step times, fed the held-out job's FLOPs, parameter bytes, layer
  calls and parameter tensors (:mod:`unstall.net.gavel_models`, from the architectures): what a
  model outside the table gets when its facts are known,

and the error is ``|predicted / measured - 1|``.
"""

from __future__ import annotations

import ast
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

from unstall.config import check
from unstall.errors import DataFileError
from unstall.net.device_roofline import (
    OVERLAP_POWER,
    GpuFigures,
    MeasuredStep,
    RooflineModel,
    StepFeatures,
    fit_roofline,
)
from unstall.net.gavel_models import GAVEL_MODELS
from unstall.results import JsonResult

REFERENCE_DEVICE = "v100"
GAVEL_DEVICES = ("k80", "p100", "v100")

# Gavel's job names (before " (batch size N)") -> our family names.
GAVEL_FAMILIES: dict[str, str] = {
    "ResNet-18": "resnet18",
    "ResNet-50": "resnet50",
    "Transformer": "transformer",
    "LM": "lm",
    "Recommendation": "recommendation",
    "A3C": "a3c",
    "CycleGAN": "cyclegan",
}

# Speeds of one family: device -> throughput relative to the reference device.
Speeds = dict[str, float]


@dataclass(frozen=True, kw_only=True)
class ThroughputPoint:
    """One job type alone on one GPU of each type: iterations per second by device."""

    family: str
    batch: int | None
    throughput: Mapping[str, float]

    def __post_init__(self) -> None:
        check(bool(self.family), self, "family", "must be a name")
        for name, value in self.throughput.items():
            check(value > 0, self, f"throughput.{name}", f"must be > 0, got {value!r}")


def _parse_job(key: str, source: str) -> tuple[str, int | None, int]:
    """``"('ResNet-50 (batch size 32)', 1)"`` -> ``("ResNet-50", 32, 1)``."""
    try:
        name, scale = ast.literal_eval(key)
    except (ValueError, SyntaxError) as exc:
        raise DataFileError(source, f"job key {key!r} is not ('name', GPUs)") from exc
    base, _, rest = str(name).partition(" (batch size ")
    batch = int(rest.rstrip(")")) if rest else None
    return base, batch, int(scale)


def gavel_points(data: Mapping[str, object], source: str = "<gavel>") -> list[ThroughputPoint]:
    """The single-GPU, isolated throughputs of Gavel's table (job types measured > 0 on every
    device of :data:`GAVEL_DEVICES`; Gavel writes 0 for a job that did not fit)."""
    for name in GAVEL_DEVICES:
        if not isinstance(data.get(name), dict):
            raise DataFileError(source, f"no {name!r} table", field=name)
    tables: dict[str, dict[str, dict[str, float]]] = {d: data[d] for d in GAVEL_DEVICES}  # type: ignore[misc]
    points = []
    for key in tables[REFERENCE_DEVICE]:
        base, batch, scale = _parse_job(key, source)
        if scale != 1 or base not in GAVEL_FAMILIES:
            continue
        rates = {d: float(tables[d].get(key, {}).get("null", 0.0)) for d in GAVEL_DEVICES}
        if min(rates.values()) > 0:
            points.append(
                ThroughputPoint(family=GAVEL_FAMILIES[base], batch=batch, throughput=rates)
            )
    return points


def fit_family_speeds(
    points: Sequence[ThroughputPoint], reference: str = REFERENCE_DEVICE
) -> dict[str, Speeds]:
    """Each family's speed on each device relative to ``reference``: the geometric mean over
    its points of ``throughput(device) / throughput(reference)``."""
    logs: dict[str, dict[str, list[float]]] = {}
    for p in points:
        ref = p.throughput[reference]
        for name, rate in p.throughput.items():
            logs.setdefault(p.family, {}).setdefault(name, []).append(math.log(rate / ref))
    return {
        family: {name: math.exp(statistics.fmean(v)) for name, v in by_device.items()}
        for family, by_device in logs.items()
    }


def generic_speeds(table: Mapping[str, Mapping[str, float]]) -> Speeds:
    """A model of no measured family: on each device, the median of the families' speeds."""
    devices = sorted({d for speeds in table.values() for d in speeds})
    return {d: statistics.median(s[d] for s in table.values() if d in s) for d in devices}


@dataclass(frozen=True, kw_only=True)
class RatioError(JsonResult):
    """One cross-device ratio ``t(slow) / t(fast)`` of one job type, measured and predicted."""

    method: str
    family: str
    batch: int | None
    pair: str
    measured: float
    predicted: float

    @property
    def error(self) -> float:
        return abs(self.predicted / self.measured - 1.0)


# A predictor: (the family's point, the other points it may learn from) -> speeds by device.
Predictor = Callable[[ThroughputPoint, Sequence[ThroughputPoint]], Mapping[str, float]]
# What the roofline knows about a job type without running it: its step's features.
StepOf = Callable[[ThroughputPoint], StepFeatures]


def gavel_step(p: ThroughputPoint) -> StepFeatures:
    """The step of one of Gavel's job types, from its architecture (:data:`GAVEL_MODELS`)."""
    return GAVEL_MODELS[p.family].step(p.batch)


def fit_roofline_on(
    points: Sequence[ThroughputPoint],
    step_of: StepOf = gavel_step,
    figures: Mapping[str, GpuFigures] | None = None,
    overlap_power: float = OVERLAP_POWER,
) -> RooflineModel:
    """The roofline fitted on ``points``' measured seconds per step (1 / throughput)."""
    measured = [
        MeasuredStep(step=step_of(p), seconds={d: 1.0 / r for d, r in p.throughput.items()})
        for p in points
    ]
    return fit_roofline(measured, figures=figures, overlap_power=overlap_power)


def _median_out(fit_without: frozenset[str]) -> Predictor:
    """Leave one family out with the median of the other families' speeds (never those in
    ``fit_without``)."""

    def predict(p: ThroughputPoint, points: Sequence[ThroughputPoint]) -> Mapping[str, float]:
        others = [q for q in points if q.family != p.family and q.family not in fit_without]
        return generic_speeds(fit_family_speeds(others))

    return predict


def _batch_out(fit_without: frozenset[str]) -> Predictor:
    """Leave one batch size out: the family's other batch sizes; a family measured at one batch
    size only has nothing else to learn from and gets the median of the others."""
    median_out = _median_out(fit_without)

    def predict(p: ThroughputPoint, points: Sequence[ThroughputPoint]) -> Mapping[str, float]:
        same = [q for q in points if q.family == p.family and q is not p]
        return fit_family_speeds(same)[p.family] if same else median_out(p, points)

    return predict


def _roofline_out(
    step_of: StepOf,
    fit_without: frozenset[str],
    figures: Mapping[str, GpuFigures] | None,
    overlap_power: float,
) -> Predictor:
    """Leave one family out with the roofline: fitted on the other families (one fit each), fed
    the held-out point's features only."""
    fits: dict[str, RooflineModel] = {}

    def predict(p: ThroughputPoint, points: Sequence[ThroughputPoint]) -> Mapping[str, float]:
        if p.family not in fits:
            others = [q for q in points if q.family != p.family and q.family not in fit_without]
            fits[p.family] = fit_roofline_on(others, step_of, figures, overlap_power)
        return fits[p.family].speeds(step_of(p), REFERENCE_DEVICE)

    return predict


def held_out_errors(
    points: Sequence[ThroughputPoint],
    method: str,
    *,
    datasheet: Mapping[str, float] | None = None,
    step_of: StepOf = gavel_step,
    fit_without: frozenset[str] = frozenset(),
    figures: Mapping[str, GpuFigures] | None = None,
    overlap_power: float = OVERLAP_POWER,
) -> list[RatioError]:
    """Every cross-device ratio of every point predicted by ``method`` ("leave-one-family-out",
    "leave-one-batch-out", "datasheet" with ``datasheet`` = the flat model's speeds, or
    "roofline" with ``step_of`` giving a point's step features, ``figures`` overriding GPUs'
    datasheet figures and ``overlap_power`` the soft maximum's ``k``). No method learns from
    another family in ``fit_without``."""
    predictors: dict[str, Predictor] = {
        "leave-one-family-out": _median_out(fit_without),
        "leave-one-batch-out": _batch_out(fit_without),
        "roofline": _roofline_out(step_of, fit_without, figures, overlap_power),
    }
    if method == "datasheet":
        check(datasheet is not None, "held_out_errors", "datasheet", "the flat model's speeds")
        flat = dict(datasheet or {})
        predictors["datasheet"] = lambda p, _: flat
    check(method in predictors, "held_out_errors", "method", f"unknown method {method!r}")
    out = []
    for p in points:
        speeds = predictors[method](p, points)
        for slow, fast in combinations(GAVEL_DEVICES, 2):
            out.append(
                RatioError(
                    method=method,
                    family=p.family,
                    batch=p.batch,
                    pair=f"{slow}/{fast}",
                    measured=p.throughput[fast] / p.throughput[slow],
                    predicted=speeds[fast] / speeds[slow],
                )
            )
    return out


def median_error(errors: Sequence[RatioError]) -> float:
    """The median of the errors' ``|predicted / measured - 1|``."""
    return statistics.median(e.error for e in errors)
