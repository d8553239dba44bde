"""``JobProfile``: what was measured about a job, in JSON; ``profile`` writes it, ``sim`` and
``cost`` read it.

A profile holds the model name, the device it ran on, the compute time of one iteration at a
local batch, the gradient bytes, tensors and layers, optionally the input pipeline's time per
iteration, and optionally measured iteration times per placement string ("4", "22", "1111": GPUs
per node). :meth:`JobProfile.to_perf_spec` turns it into the perf model's :class:`JobPerfSpec`.

The device is a GPU preset (``v100``, ``h100``, ...) or ``cpu``: a profile measured on a CPU
says so, names the CPU (``device_name``) and carries the CPU's measured dense fp32 matmul rate
(``device_tflops``). The perf model knows GPUs only, so a CPU profile has no perf spec of its
own: :meth:`JobProfile.on_gpu` converts it to a GPU (compute scaled by the ratio of FLOP rates,
the factor returned for the caller to show), and :meth:`JobProfile.to_perf_spec` refuses it with
one line saying so. A CPU's timings are never taken for a GPU's silently.

:meth:`JobProfile.save` writes a profile to a file and :meth:`JobProfile.load` reads it back
(:meth:`JobProfile.from_json` also takes JSON text). Every field is validated on the way in;
errors name the field and the file (or ``<text>``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from unstall.config import check, check_number_sizes, read_text_file
from unstall.errors import ConfigError, DataFileError
from unstall.net.device_speeds import model_family
from unstall.net.hardware import CPU_DEVICE, DEVICE_PRESETS, cpu_to_gpu_factor, device
from unstall.results import JsonResult, write_text_atomically
from unstall.workload.job_specs import COMM_KINDS, JobPerfSpec
from unstall.workload.placement import Placement

MAX_LOCAL_BATCH = 1_000_000


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(float(value))  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True)
class JobProfile(JsonResult):
    """A job as measured: see the module docstring. Times in seconds, sizes in bytes.

    ``device_name`` is the device as its maker names it (the CPU model, the GPU's CUDA name);
    ``device_tflops`` the dense fp32 matmul rate measured on it (CPU profiles carry it: the
    conversion to a GPU needs it). ``parameter_bytes`` counts every parameter, trainable or not
    (``gradient_bytes`` only the trainable ones, what data-parallel training reduces).
    """

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
    device_name: str | None = None
    device_tflops: float | None = None
    parameter_bytes: int | None = None

    def __post_init__(self) -> None:
        check(isinstance(self.model, str) and bool(self.model), self, "model", "must be a name")
        check(
            isinstance(self.device, str) and self.device.lower() in (*DEVICE_PRESETS, CPU_DEVICE),
            self,
            "device",
            f"unknown device {self.device!r}; known: {[*sorted(DEVICE_PRESETS), CPU_DEVICE]}",
        )
        check(
            self.device_name is None or isinstance(self.device_name, str),
            self,
            "device_name",
            f"must be a name or null, got {self.device_name!r}",
        )
        check(
            self.device_tflops is None
            or (_is_number(self.device_tflops) and self.device_tflops > 0),
            self,
            "device_tflops",
            f"must be a number > 0 or null, got {self.device_tflops!r}",
        )
        check(
            self.parameter_bytes is None
            or (_is_int(self.parameter_bytes) and self.parameter_bytes >= self.gradient_bytes),
            self,
            "parameter_bytes",
            f"must be an integer >= gradient_bytes or null, got {self.parameter_bytes!r}",
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
        # A batch this large is a typo or a corrupt file; the cost model would turn it into an
        # epoch of less than one iteration and print a run of 0 hours for $0.
        check(
            self.local_batch <= MAX_LOCAL_BATCH,
            self,
            "local_batch",
            f"must be at most {MAX_LOCAL_BATCH:,} samples per GPU, got {self.local_batch!r}",
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
            # A number for a key (4 for "4") never matches the placement strings it is looked up
            # by: the measurement would go unused without a word.
            check(
                isinstance(key, str),
                self,
                f"measured.{key}",
                f"keys are placement strings like '4' or '22', got {key!r}",
            )
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

    @property
    def on_cpu(self) -> bool:
        """Whether the profile was measured on a CPU (see the module docstring)."""
        return self.device.lower() == CPU_DEVICE

    def cpu_factor(self, gpu: str) -> float:
        """The factor :meth:`on_gpu` scales this CPU profile's compute time by for ``gpu``."""
        check(self.on_cpu, self, "device", f"is {self.device!r}, not a CPU")
        if self.device_tflops is None:
            raise ConfigError(
                type(self).__name__,
                "device_tflops",
                f"the CPU profile of {self.model} has no measured FLOP rate to convert it to a GPU"
                " with; profile it again with unstall profile run",
            )
        return cpu_to_gpu_factor(self.device_tflops, gpu)

    def on_gpu(self, gpu: str) -> JobProfile:
        """This CPU profile converted to GPU ``gpu``: compute time times :meth:`cpu_factor`; the
        input pipeline's time kept (it runs on the host's CPU either way); the measured
        placements dropped (CPU and gloo times are no GPU's). A GPU profile is returned as is
        when ``gpu`` is its device, else refused (the perf model scales GPU to GPU itself)."""
        if not self.on_cpu:
            check(
                device(gpu).name == self.device.lower(),
                self,
                "device",
                f"is {self.device}, not a CPU: the perf model scales it to {gpu} itself",
            )
            return self
        return dataclasses.replace(
            self,
            device=device(gpu).name,
            compute_s=self.compute_s * self.cpu_factor(gpu),
            measured={},
            device_name=None,
            device_tflops=None,
        )

    def to_perf_spec(self, **overrides: Any) -> JobPerfSpec:
        """The perf model's view of this job (``overrides`` replace any JobPerfSpec field); a
        CPU profile is refused (convert it with :meth:`on_gpu` first)."""
        if self.on_cpu:
            raise ConfigError(
                type(self).__name__,
                "device",
                f"the profile of {self.model} was measured on a CPU"
                f" ({self.device_name or 'unnamed'}); the perf model takes GPU timings: convert"
                " it, profile.on_gpu(NAME) (compute scaled by FLOP rates; unstall profile convert)"
                " or profile on a GPU",
            )
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
            "family": model_family(self.model),
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
            text, source = read_text_file(path), str(path)
        else:
            text, source = path_or_text, "<text>"
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataFileError(source, f"not valid JSON: {exc.msg}", line=exc.lineno) from exc
        except RecursionError:
            raise DataFileError(source, "nested too deeply to read") from None
        check_number_sizes(data, source)
        return cls.from_dict(data, source=source)

    def save(self, path: str | Path) -> Path:
        """Write ``to_json()`` to ``path``; :meth:`load` reads it back."""
        return write_text_atomically(Path(path), self.to_json() + "\n")

    @classmethod
    def load(cls, path: str | Path) -> JobProfile:
        """The profile :meth:`save` wrote to ``path`` (a file path, never JSON text: see
        :meth:`from_json` for that); errors name the file and the field."""
        return cls.from_json(Path(path))


_REQUIRED = tuple(
    f.name for f in fields(JobProfile) if f.default is MISSING and f.default_factory is MISSING
)
