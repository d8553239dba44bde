"""The comm-stall model: communication stall as a function of a network's layers, gradient
tensors and gradient bytes, fitted on depth sweeps of zoo models and tested on a held-out one.

The model is linear with non-negative coefficients (a stall cannot shrink as a model grows)::

    stall = c0 + c_layers * layers + c_tensors * tensors + c_bytes * bytes

fitted by non-negative least squares on the measured stalls of the sweep's variants. Fit
quality is R^2 and the mean absolute relative error over the sweep; the held-out model's
stall is predicted and compared with its measurement.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from unstall.config import check
from unstall.errors import ConfigError
from unstall.profile.config import ProfileConfig
from unstall.profile.report import StallReport
from unstall.results import JsonResult
from unstall.workload import zoo

FEATURES = ("layers", "gradient_tensors", "gradient_bytes")
STALL_KINDS = {"interconnect": "interconnect_stall_s", "network": "network_stall_s"}

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


@dataclass(frozen=True, kw_only=True)
class SweepPoint(JsonResult):
    """One variant: its features and its measured stall (seconds per iteration)."""

    variant: str
    layers: int
    gradient_tensors: int
    gradient_bytes: int
    stall_s: float

    def features(self) -> list[float]:
        return [1.0, float(self.layers), float(self.gradient_tensors), float(self.gradient_bytes)]


@dataclass(frozen=True, kw_only=True)
class CommStallFit(JsonResult):
    """The fitted model, its quality on the sweep, and the held-out prediction."""

    stall: str
    intercept_s: float
    coefficients: dict[str, float]
    r2: float
    mean_abs_rel_error: float
    points: tuple[SweepPoint, ...]
    fitted_s: tuple[float, ...]
    held_out: SweepPoint | None = None
    held_out_predicted_s: float | None = None
    held_out_rel_error: float | None = None

    def predict(self, layers: int, gradient_tensors: int, gradient_bytes: int) -> float:
        values = {"layers": layers, "gradient_tensors": gradient_tensors}
        values["gradient_bytes"] = gradient_bytes
        return self.intercept_s + sum(self.coefficients[f] * values[f] for f in FEATURES)


def fit_comm_stall(
    points: Sequence[SweepPoint], *, stall: str = "interconnect", held_out: SweepPoint | None = None
) -> CommStallFit:
    """Fit the model on ``points`` by non-negative least squares (features scaled first)."""
    from scipy.optimize import nnls

    check(len(points) >= 2, "fit_comm_stall", "points", "needs at least two sweep points")
    design = np.array([p.features() for p in points])
    target = np.array([p.stall_s for p in points])
    scale = np.where(design.max(axis=0) > 0, design.max(axis=0), 1.0)
    solution, _ = nnls(design / scale, target)
    coefs = solution / scale
    fitted = design @ coefs
    residual = float(np.sum((target - fitted) ** 2))
    spread = float(np.sum((target - target.mean()) ** 2))
    rel = np.abs(fitted - target) / np.maximum(np.abs(target), 1e-12)
    result = CommStallFit(
        stall=stall,
        intercept_s=float(coefs[0]),
        coefficients={name: float(c) for name, c in zip(FEATURES, coefs[1:], strict=True)},
        r2=1.0 - residual / spread if spread > 0 else 1.0,
        mean_abs_rel_error=float(rel.mean()),
        points=tuple(points),
        fitted_s=tuple(float(v) for v in fitted),
    )
    if held_out is None:
        return result
    predicted = result.predict(held_out.layers, held_out.gradient_tensors, held_out.gradient_bytes)
    error = (predicted - held_out.stall_s) / max(abs(held_out.stall_s), 1e-12)
    return replace(
        result, held_out=held_out, held_out_predicted_s=predicted, held_out_rel_error=error
    )


def measure_point(
    variant: str, base: ProfileConfig, stall: str, profile: Callable[[ProfileConfig], StallReport]
) -> SweepPoint:
    """Profile one variant with ``base``'s settings and read its stall of kind ``stall``."""
    check(stall in STALL_KINDS, "fit", "stall", f"must be one of {sorted(STALL_KINDS)}")
    name, options = parse_variant(variant)
    config = replace(base, model=name, model_options=options, data_dir=None)
    report = profile(config)
    facts = zoo.facts(name, **config.zoo_options())
    return SweepPoint(
        variant=variant,
        layers=facts.layers,
        gradient_tensors=facts.gradient_tensors,
        gradient_bytes=facts.gradient_bytes,
        stall_s=getattr(report, STALL_KINDS[stall]),
    )
