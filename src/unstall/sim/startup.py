"""A job's start-up and restore time, as a function of what it spans and its model.

A live run measures, for each segment of a job (its run on one placement), the time beyond its
training: handing the call over, joining the job's group, building the model or restoring the
checkpoint, the final checkpoint, reporting back. The first segment's is the job's *start-up*,
a later one's (after a preemption or a migration) its *restore*. A :class:`StartupModel` predicts
both, in wall seconds, from the placement (GPUs, nodes and racks it spans) and the model:

    wall_s = base + per_gpu x (GPUs - 1) + per_node x (nodes - 1) + per_rack x (racks - 1)
             + the model's own offset (0 for a model it was not fitted on)

Set-ups take the machine's time, whatever a live run's ``--speedup``: the simulator charges
``wall_s x speedup`` trace seconds (:meth:`StartupModel.for_speedup`; 1 for a real cluster's
own time). ``unstall live calibrate`` fits one on live runs (:mod:`unstall.sim.startup_fit`);
the package ships one fitted on emulated-compute runs (``sim/data/startup_model.json``,
:func:`default_startup_model`), which ``unstall sim run`` charges unless told otherwise.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from os import PathLike
from pathlib import Path
from typing import Any

from unstall.config import check, check_number
from unstall.errors import ArgumentTypeError, DataFileError
from unstall.loop.jobs import Job
from unstall.results import JsonResult
from unstall.sched.base import Placement

MODEL_FILE = "startup_model.json"
DEFAULT_NAME = "default"  # the package's fitted model, by name
OFF_NAME = "none"  # no model: the simulator's fixed start-up and restore times
OWNER = "StartupModel"


@dataclass(frozen=True, kw_only=True)
class SetupTerms:
    """One kind of set-up (start-up or restore) as a function of what a placement spans, in
    wall seconds, with how well it fitted the runs it was fitted on."""

    base_s: float  # a job on one GPU
    per_gpu_s: float  # each GPU beyond the first
    per_node_s: float  # each node beyond the first
    per_rack_s: float  # each rack beyond the first
    # Models whose set-ups sat apart from the spans' prediction: their offset (wall seconds).
    by_model_s: tuple[tuple[str, float], ...] = ()
    samples: int = 0  # set-ups fitted on
    median_abs_error_s: float = math.nan  # in-sample, wall seconds
    median_s: float = math.nan  # of the set-ups fitted on, wall seconds

    def __post_init__(self) -> None:
        for name in ("base_s", "per_gpu_s", "per_node_s", "per_rack_s"):
            value = getattr(self, name)
            check_number(OWNER, name, value, wanted="seconds")
            check(math.isfinite(value), OWNER, name, f"must be finite, got {value!r}")

    def wall_s(self, model: str, gpus: int, nodes: int, racks: int) -> float:
        """Wall seconds of this set-up for ``model`` on a placement of ``gpus`` GPUs over
        ``nodes`` nodes in ``racks`` racks (never below 0)."""
        spans = (
            self.base_s
            + self.per_gpu_s * max(0, gpus - 1)
            + self.per_node_s * max(0, nodes - 1)
            + self.per_rack_s * max(0, racks - 1)
        )
        return max(0.0, spans + dict(self.by_model_s).get(model, 0.0))


@dataclass(frozen=True, kw_only=True)
class StartupModel(JsonResult):
    """A job's start-up and restore (see the module docstring); ``speedup``: trace seconds
    charged per wall second (a live run's ``--speedup``; 1: the cluster's own time)."""

    startup: SetupTerms
    restore: SetupTerms
    speedup: float = 1.0
    compute: str = "emulated"  # how the runs it was fitted on computed (live --compute)
    source: str = ""  # what it was fitted on
    command: str = ""  # the command that fitted it

    def __post_init__(self) -> None:
        check_number(OWNER, "speedup", self.speedup, wanted="trace seconds per wall second")
        check(
            math.isfinite(self.speedup) and self.speedup > 0,
            OWNER,
            "speedup",
            f"must be > 0, got {self.speedup!r}",
        )

    def for_speedup(self, speedup: float) -> StartupModel:
        """The same model charging ``speedup`` trace seconds per wall second of set-up."""
        return replace(self, speedup=speedup)

    def startup_s(self, model: str, placement: Placement, node_rack: tuple[int, ...]) -> float:
        """Trace seconds of a job's first start on ``placement``."""
        return self.speedup * self.startup.wall_s(model, *spans(placement, node_rack))

    def restore_s(self, model: str, placement: Placement, node_rack: tuple[int, ...]) -> float:
        """Trace seconds of a job's restart (after a preemption, or a migration) on
        ``placement``."""
        return self.speedup * self.restore.wall_s(model, *spans(placement, node_rack))

    def describe(self) -> str:
        """One line: what it charges and what it was fitted on."""
        s, r = self.startup, self.restore
        return (
            f"wall seconds x speedup {self.speedup:g}: start-up {s.base_s:.3g} s + "
            f"{s.per_gpu_s:.3g} s a GPU, {s.per_node_s:.3g} s a node, {s.per_rack_s:.3g} s a "
            f"rack beyond the first; restore {r.base_s:.3g} s + {r.per_gpu_s:.3g} s a GPU, "
            f"{r.per_node_s:.3g} s a node, {r.per_rack_s:.3g} s a rack ({self.compute} compute)"
        )

    def save(self, path: Path) -> None:
        from unstall.results import write_text_atomically

        write_text_atomically(path, self.to_json() + "\n")

    @classmethod
    def from_dict(cls, data: object, source: str) -> StartupModel:
        """A model as :meth:`to_json` wrote it; a :class:`DataFileError` naming ``source`` and
        the field otherwise."""
        if not isinstance(data, Mapping):
            raise DataFileError(source, "not a start-up model (a JSON object)")
        try:
            return cls(
                startup=_terms(data["startup"], source, "startup"),
                restore=_terms(data["restore"], source, "restore"),
                speedup=float(data.get("speedup", 1.0)),
                compute=str(data.get("compute", "emulated")),
                source=str(data.get("source", "")),
                command=str(data.get("command", "")),
            )
        except KeyError as exc:
            raise DataFileError(source, "missing", field=str(exc.args[0])) from None
        except (TypeError, ValueError) as exc:
            raise DataFileError(source, f"not a start-up model: {exc}") from None

    @classmethod
    def load(cls, path: str | PathLike[str]) -> StartupModel:
        """Read a model file (``unstall live calibrate --out``)."""
        where = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise DataFileError(where, f"cannot read it: {exc.strerror or exc}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataFileError(where, f"not JSON: {exc.msg}", line=exc.lineno) from None
        return cls.from_dict(data, where)


def _terms(data: Any, source: str, name: str) -> SetupTerms:
    if not isinstance(data, Mapping):
        raise DataFileError(source, "must be an object of set-up terms", field=name)
    by_model = data.get("by_model_s", ())
    try:
        return SetupTerms(
            base_s=float(data["base_s"]),
            per_gpu_s=float(data["per_gpu_s"]),
            per_node_s=float(data["per_node_s"]),
            per_rack_s=float(data["per_rack_s"]),
            by_model_s=tuple((str(m), float(s)) for m, s in by_model),
            samples=int(data.get("samples", 0)),
            median_abs_error_s=_number(data.get("median_abs_error_s")),
            median_s=_number(data.get("median_s")),
        )
    except KeyError as exc:
        raise DataFileError(source, "missing", field=f"{name}.{exc.args[0]}") from None


def _number(value: object) -> float:
    """A figure the JSON may hold as null (a NaN written out)."""
    return math.nan if value is None else float(value)  # type: ignore[arg-type]


def spans(placement: Placement, node_rack: tuple[int, ...]) -> tuple[int, int, int]:
    """GPUs, nodes and racks a placement spans."""
    nodes = {node for node, _ in placement}
    return sum(gpus for _, gpus in placement), len(nodes), len({node_rack[n] for n in nodes})


@cache
def default_startup_model() -> StartupModel:
    """The package's fitted model (read once): how it was fitted is in its ``source`` and
    ``command``."""
    resource = resources.files("unstall") / "sim" / "data" / MODEL_FILE
    try:
        data = json.loads(resource.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataFileError(str(resource), f"not a start-up model: {exc}") from exc
    return StartupModel.from_dict(data, str(resource))


def resolve_startup_model(
    value: StartupModel | str | PathLike[str] | None, *, owner: str, field: str
) -> StartupModel | None:
    """A model object, ``"default"`` (the package's), ``"none"`` or None (no model), or a
    model file's path."""
    if value is None or isinstance(value, StartupModel):
        return value
    if isinstance(value, str) and value.lower() == OFF_NAME:
        return None
    if isinstance(value, str) and value.lower() == DEFAULT_NAME:
        return default_startup_model()
    if isinstance(value, str | PathLike):
        return StartupModel.load(value)
    raise ArgumentTypeError(
        owner,
        field,
        f"must be a StartupModel, {DEFAULT_NAME!r}, {OFF_NAME!r} or a model file's path; got "
        f"{type(value).__name__}",
    )


@dataclass(frozen=True, kw_only=True)
class SetupCharges:
    """What the simulator charges a job each time it starts on a placement: its measured
    start-up where the job has one (``Job.startup_s``), else a fixed start-up or the model's;
    a fixed restore, else the model's. Cached per (model, placement)."""

    model: StartupModel
    node_rack: tuple[int, ...]
    startup_s: float | None = None  # instead of the model's start-ups
    restore_s: float | None = None  # instead of the model's restores
    _cache: dict[tuple[str, Placement, bool], float] = field(
        default_factory=dict, compare=False, repr=False
    )

    def __call__(self, job: Job, placement: Placement, restoring: bool) -> float:
        if restoring and self.restore_s is not None:
            return self.restore_s
        if not restoring:
            if job.startup_s is not None:
                return job.startup_s
            if self.startup_s is not None:
                return self.startup_s
        key = (job.model, placement, restoring)
        charge = self._cache.get(key)
        if charge is None:
            measure = self.model.restore_s if restoring else self.model.startup_s
            charge = self._cache[key] = measure(job.model, placement, self.node_rack)
        return charge
