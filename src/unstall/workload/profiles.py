"""``JobProfile``: what was measured about a job, in JSON; ``profile`` writes it, ``sim`` and
``cost`` read it.

A profile holds the model name, the device it ran on, the compute time of one iteration at a
local batch, the gradient bytes, tensors and layers, optionally the input pipeline's time per
iteration, and optionally measured iteration times per placement string ("4", "22", "1111": GPUs
per node). :meth:`JobProfile.to_perf_spec` turns it into the perf model's :class:`JobPerfSpec`.

Every field is validated on the way in; errors name the field and the file (or ``<text>``).
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from unstall.config import check
from unstall.errors import ConfigError, DataFileError
from unstall.net.hardware import DEVICE_PRESETS
from unstall.results import JsonResult
from unstall.workload.job_specs import COMM_KINDS, JobPerfSpec
from unstall.workload.placement import Placement


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(float(value))  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True)
class JobProfile(JsonResult):
    """A job as measured: see the module docstring. Times in seconds, sizes in bytes."""

    model: str
    device: str
    compute_s: float
    local_batch: int
    gradient_bytes: int
    gradient_tensors: int
    layers: int
    data_s: float | None = None
    measured: dict[str, float] = field(default_factory=dict, hash=False)
    comm: str = "allreduce"
    overlap: float = 0.5

    def __post_init__(self) -> None:
        check(isinstance(self.model, str) and bool(self.model), self, "model", "must be a name")
        check(
            isinstance(self.device, str) and self.device.lower() in DEVICE_PRESETS,
            self,
            "device",
            f"unknown device {self.device!r}; known: {sorted(DEVICE_PRESETS)}",
        )
        check(
            _is_number(self.compute_s) and self.compute_s > 0,
            self,
            "compute_s",
            f"must be a number > 0, got {self.compute_s!r}",
        )
        for name, low in (("local_batch", 1), ("gradient_bytes", 0), ("gradient_tensors", 1)):
            value = getattr(self, name)
            check(
                _is_int(value) and value >= low,
                self,
                name,
                f"must be an integer >= {low}, got {value!r}",
            )
        check(
            _is_int(self.layers) and self.layers >= 1,
            self,
            "layers",
            f"must be an integer >= 1, got {self.layers!r}",
        )
        check(
            self.data_s is None or (_is_number(self.data_s) and self.data_s >= 0),
            self,
            "data_s",
            f"must be a number >= 0 or null, got {self.data_s!r}",
        )
        check(
            self.comm in COMM_KINDS, self, "comm", f"must be one of {COMM_KINDS}, got {self.comm!r}"
        )
        check(
            _is_number(self.overlap) and 0.0 <= self.overlap <= 1.0,
            self,
            "overlap",
            f"must be a number in [0, 1], got {self.overlap!r}",
        )
        self._check_measured()

    def _check_measured(self) -> None:
        check(isinstance(self.measured, dict), self, "measured", "must be an object")
        for key, seconds in self.measured.items():
            try:
                Placement.parse(key)
            except ConfigError as exc:
                raise ConfigError(type(self).__name__, f"measured.{key}", exc.why) from exc
            check(
                _is_number(seconds) and seconds > 0,
                self,
                f"measured.{key}",
                f"must be a time in seconds > 0, got {seconds!r}",
            )

    def to_perf_spec(self, **overrides: Any) -> JobPerfSpec:
        """The perf model's view of this job (``overrides`` replace any JobPerfSpec field)."""
        values: dict[str, Any] = {
            "name": self.model,
            "device": self.device.lower(),
            "compute_s": self.compute_s,
            "local_batch": self.local_batch,
            "gradient_bytes": float(self.gradient_bytes),
            "gradient_tensors": self.gradient_tensors,
            "layers": self.layers,
            "comm": self.comm,
            "overlap": self.overlap,
            "data_s": self.data_s or 0.0,
        }
        values.update(overrides)
        return JobPerfSpec(**values)

    def measured_placements(self) -> dict[Placement, float]:
        """The measured iteration times keyed by :class:`Placement`."""
        return {Placement.parse(key): seconds for key, seconds in self.measured.items()}

    @classmethod
    def from_dict(cls, data: object, *, source: str = "<mapping>") -> JobProfile:
        """Build from a parsed JSON object; errors name ``source`` and the field."""
        if not isinstance(data, dict):
            raise DataFileError(source, "top level must be a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise DataFileError(
                source, f"unknown field(s) {unknown}; known: {sorted(known)}", field=unknown[0]
            )
        missing = [name for name in _REQUIRED if name not in data]
        if missing:
            raise DataFileError(source, "missing", field=missing[0])
        try:
            return cls(**data)
        except ConfigError as exc:
            raise DataFileError(source, exc.why, field=exc.field) from exc

    @classmethod
    def from_json(cls, path_or_text: str | Path) -> JobProfile:
        """Read a profile from a JSON file path or from JSON text."""
        if isinstance(path_or_text, Path) or not path_or_text.lstrip().startswith("{"):
            path = Path(path_or_text)
            if not path.is_file():
                raise DataFileError(str(path), "no such file")
            text, source = path.read_text(encoding="utf-8"), str(path)
        else:
            text, source = path_or_text, "<text>"
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataFileError(source, f"not valid JSON: {exc.msg}", line=exc.lineno) from exc
        return cls.from_dict(data, source=source)

    def save(self, path: str | Path) -> Path:
        """Write ``to_json()`` to ``path``."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(self.to_json() + "\n", encoding="utf-8")
        return p


_REQUIRED = tuple(
    f.name for f in fields(JobProfile) if f.default is MISSING and f.default_factory is MISSING
)
