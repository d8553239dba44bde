"""The unstall trace schema: one row per job, held in a :class:`Trace`.

Columns (in this order):

============  =========  ==========================================================
column        dtype      meaning
============  =========  ==========================================================
job_id        string     unique id of the job (from the source, or its line number)
submit_s      float64    submission time, seconds after the first submission (>= 0)
num_gpus      int64      GPUs the job asks for (>= 1)
duration_s    float64    run time, seconds, at the placement the job ran on (> 0)
model         string     optional: a model name (the zoo's names for generated traces)
iterations    Int64      optional: iterations of the job, when the source says
user          string     optional: the submitting user
vc            string     optional: virtual cluster / queue / tenant
status        string     optional: ``completed``, ``killed``, ``failed`` or ``timeout``
gpu_type      string     optional: the GPU type ``duration_s`` was measured on (``v100``,
                         ``p40``, ...; lower case), which the simulator takes as the job's
                         reference (see ``unstall.sim.simulate``'s ``duration_gpu``)
============  =========  ==========================================================

Rows are sorted by ``submit_s`` then ``job_id``. Times are shifted so that the first submission
is at 0; the shift is kept in :attr:`Trace.submit_offset_s` (Unix seconds for sources with
wall-clock times, which are read as naive times on a UTC clock).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from os import PathLike
from typing import Any

import numpy as np
import pandas as pd

from unstall.errors import ConfigError, DataFileError
from unstall.traces.summary import TraceSummary, summarise


class TraceError(DataFileError):
    """A trace cannot be read or does not hold to the schema; names the file, line and field."""


REQUIRED_COLUMNS: tuple[str, ...] = ("job_id", "submit_s", "num_gpus", "duration_s")
OPTIONAL_COLUMNS: tuple[str, ...] = ("model", "iterations", "user", "vc", "status", "gpu_type")
COLUMNS: tuple[str, ...] = REQUIRED_COLUMNS + OPTIONAL_COLUMNS

# The dtype each column is cast to; "string" (pandas' StringDtype) keeps missing values as NA on
# pandas 2 and 3 alike, where astype(str) would turn them into the text "nan".
DTYPES: dict[str, Any] = {
    "job_id": "string",
    "submit_s": "float64",
    "num_gpus": "int64",
    "duration_s": "float64",
    "model": "string",
    "iterations": "Int64",
    "user": "string",
    "vc": "string",
    "status": "string",
    "gpu_type": "string",
}

# Every reader maps its source's job states onto these, so summaries compare across formats.
STATUSES: tuple[str, ...] = ("completed", "killed", "failed", "timeout")

# What a GPU type name looks like (the simulator checks that it names a known type: this part
# does not know the hardware): lower-case letters and digits, as ``v100``, ``a10g``, ``h100``.
GPU_TYPE_PATTERN = r"[a-z][a-z0-9_-]*"


@dataclass(frozen=True)
class TraceArrays:
    """The columns the simulator reads in its inner loop, as numpy arrays (row order = trace)."""

    job_id: np.ndarray
    submit_s: np.ndarray
    num_gpus: np.ndarray
    duration_s: np.ndarray
    model: np.ndarray | None
    # The GPU type each duration was measured on (None where the trace does not say); None
    # when no job's does.
    gpu_type: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.submit_s)


@dataclass(frozen=True, kw_only=True, eq=False)
class Trace:
    """A validated job trace in the unstall schema (see the module docstring).

    Build one with :meth:`from_frame`, which casts, sorts and shifts times, or from a reader.
    ``skipped`` counts the source rows a reader left out on purpose, by reason (for example jobs
    that never finished), so that nothing is dropped silently.
    """

    jobs: pd.DataFrame
    source: str = "<memory>"
    format: str = "unstall"
    submit_offset_s: float = 0.0
    skipped: Mapping[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.validate()

    def __len__(self) -> int:
        return len(self.jobs)

    @classmethod
    def from_frame(
        cls,
        frame: pd.DataFrame,
        *,
        source: str = "<memory>",
        format: str = "unstall",
        submit_offset_s: float = 0.0,
        skipped: Mapping[str, int] | None = None,
        notes: Sequence[str] = (),
    ) -> Trace:
        """Cast ``frame`` to the schema, sort it and shift submissions to start at 0.

        ``frame`` must have the required columns; optional ones may be absent (they become NA).
        Times may be absolute: the first submission is subtracted and added to
        ``submit_offset_s``. A bad value raises :class:`TraceError` naming the row as ``frame``
        has it (counted from 1 in its order, with its index label unless the index is the
        default 0, 1, 2, ...), its job and the field: text, True/False or a fraction in a
        column of whole numbers are bad values too. Anything but a DataFrame is a
        :class:`~unstall.errors.ConfigError`.
        """
        if not isinstance(frame, pd.DataFrame):
            hint = "read_trace(path) reads a file" if isinstance(frame, str | PathLike) else ""
            raise ConfigError(
                "Trace.from_frame",
                "frame",
                f"must be a pandas DataFrame, got {type(frame).__name__}"
                + (f": {hint}" if hint else " (pd.DataFrame(data) builds one)"),
            )
        unknown = [c for c in frame.columns if c not in DTYPES]
        if unknown:
            raise TraceError(source, f"unknown column {unknown[0]!r}", field=str(unknown[0]))
        jobs = _cast(frame, source)
        # Checked before sorting, so that errors name the rows as the caller's frame has them
        # (validate() checks the sorted trace again, and would name its rows).
        _check_values(jobs, _RowNames(source, jobs, frame.index), absolute_times=True)
        # Shift before sorting: subtracting the first time can round two close times to the
        # same value, and such a tie must then be ordered by job id, as a re-read orders it.
        shift = float(jobs["submit_s"].min()) if len(jobs) else 0.0
        if shift != 0.0:
            jobs["submit_s"] = jobs["submit_s"] - shift
        jobs = _sorted(jobs)
        return cls(
            jobs=jobs,
            source=source,
            format=format,
            submit_offset_s=submit_offset_s + shift,
            skipped=dict(skipped or {}),
            notes=tuple(notes),
        )

    def validate(self) -> None:
        """Check the schema: columns and dtypes, sizes, times, order and unique ids."""
        jobs = self.jobs
        if tuple(jobs.columns) != COLUMNS:
            raise TraceError(
                self.source, f"columns must be {list(COLUMNS)}, got {list(jobs.columns)}"
            )
        for col, dtype in DTYPES.items():
            if str(jobs[col].dtype) != dtype:
                raise TraceError(
                    self.source, f"dtype must be {dtype}, got {jobs[col].dtype}", field=col
                )
        rows = _RowNames(self.source, jobs, jobs.index)
        _check_values(jobs, rows)
        submit = jobs["submit_s"].to_numpy()
        rows.fail_first(
            "submit_s",
            np.r_[False, np.diff(submit) < 0],
            "must not be less than the row before's (rows are sorted by submit_s)",
        )
        if len(jobs) and submit[0] != 0.0:
            raise TraceError(self.source, "the first submission must be at 0", field="submit_s")

    def arrays(self) -> TraceArrays:
        """The simulator's view: numpy arrays of ids, submit times, GPUs, durations, models.

        The numeric arrays are read-only views of the trace's columns (no copy), so a caller
        cannot change the trace through them by accident.
        """
        model = self.jobs["model"]
        gpu_type = self.jobs["gpu_type"]
        return TraceArrays(
            job_id=self.jobs["job_id"].to_numpy(dtype=object),
            submit_s=_read_only(self.jobs["submit_s"].to_numpy(dtype=np.float64)),
            num_gpus=_read_only(self.jobs["num_gpus"].to_numpy(dtype=np.int64)),
            duration_s=_read_only(self.jobs["duration_s"].to_numpy(dtype=np.float64)),
            model=None if model.isna().all() else _objects(model),
            gpu_type=None if gpu_type.isna().all() else _objects(gpu_type),
        )

    def gpu_types(self) -> tuple[str, ...]:
        """The GPU types the trace's durations were measured on, sorted (empty: it names none)."""
        return tuple(sorted(set(self.jobs["gpu_type"].dropna().tolist())))

    def with_jobs(self, jobs: pd.DataFrame, *, notes: Sequence[str] | None = None) -> Trace:
        """A copy holding ``jobs`` (already in the schema; validated again), notes as given."""
        return replace(self, jobs=jobs, notes=self.notes if notes is None else tuple(notes))

    def equals(self, other: Trace) -> bool:
        """Same jobs, cell for cell (metadata is not compared)."""
        return self.jobs.reset_index(drop=True).equals(other.jobs.reset_index(drop=True))

    def summary(self, top: int = 10) -> TraceSummary:
        """Jobs, span, GPU mix, duration quantiles, GPU-hours, top virtual clusters, statuses."""
        return summarise(self, top=top)


def is_data_frame(value: object) -> bool:
    """Whether ``value`` is a pandas DataFrame: what a caller passes where a :class:`Trace`
    or a trace file belongs, for an error that says how to turn one into the other."""
    cls = type(value)
    return cls.__name__ == "DataFrame" and cls.__module__.startswith("pandas")


def _plain(value: object) -> str:
    """``value`` for an error line: numpy scalars as the Python numbers they hold (``0``, not
    ``np.int64(0)``)."""
    return repr(value.item() if isinstance(value, np.generic) else value)


@dataclass(frozen=True)
class _RowNames:
    """Names the rows of ``jobs`` in errors: "row N" counts from 1 in ``index``'s order, and
    the index label is added when ``index`` is not the default 0, 1, 2, ... (the label is what
    ``frame.loc`` finds the row by)."""

    source: str
    jobs: pd.DataFrame
    index: pd.Index

    @property
    def labelled(self) -> bool:
        index = self.index
        return not (isinstance(index, pd.RangeIndex) and (index.start, index.step) == (0, 1))

    def where(self, pos: int, *, with_job: bool = True) -> str:
        """ "row 2", with the index label and the job id that exist: "row 2 (index 'x', job
        'b')"."""
        parts = [f"index {_plain(self.index[pos])}"] if self.labelled else []
        job = self.jobs["job_id"].iloc[pos]
        if with_job and not pd.isna(job):
            parts.append(f"job {job!r}")
        return f"row {pos + 1}" + (f" ({', '.join(parts)})" if parts else "")

    def fail_first(self, col: str, bad: np.ndarray, why: str) -> None:
        """Raise for the first row ``bad`` marks: its place, its job, the value found."""
        if bad.any():
            pos = int(np.argmax(bad))
            value = _plain(self.jobs[col].iloc[pos])
            raise TraceError(self.source, f"{self.where(pos)}: {col} {why}, got {value}", field=col)

    def fail_duplicates(self) -> None:
        """Raise for the first job id held by more than one row, naming every such row."""
        ids = self.jobs["job_id"]
        if ids.is_unique:
            return
        job = ids.iloc[int(np.argmax(ids.duplicated(keep=False).to_numpy(bool)))]
        found = np.flatnonzero((ids == job).to_numpy(bool, na_value=False)).tolist()
        times = "twice" if len(found) == 2 else f"{len(found)} times"
        rows = "rows " + _listed([str(pos + 1) for pos in found])
        if self.labelled:
            rows += "; index " + _listed([_plain(self.index[pos]) for pos in found])
        raise TraceError(self.source, f"job_id {job!r} appears {times} ({rows})", field="job_id")


# How many items an error lists before "...".
_LISTED = 5


def _listed(items: list[str]) -> str:
    """``["1", "3"]`` as "1 and 3"; long lists cut short with "..."."""
    if len(items) > _LISTED:
        return ", ".join(items[:_LISTED]) + ", ..."
    return " and ".join([", ".join(items[:-1]), items[-1]]) if len(items) > 1 else items[0]


def _check_values(jobs: pd.DataFrame, rows: _RowNames, *, absolute_times: bool = False) -> None:
    """Every cell holds to the schema (order aside); ``absolute_times``: submissions are not
    shifted to start at 0 yet, so they need only be finite."""
    missing_id = jobs["job_id"].isna().to_numpy(bool)
    if missing_id.any():
        where = rows.where(int(np.argmax(missing_id)), with_job=False)
        raise TraceError(rows.source, f"{where}: job_id is missing", field="job_id")
    submit = jobs["submit_s"].to_numpy()
    if absolute_times:
        rows.fail_first("submit_s", ~np.isfinite(submit), "must be a finite number")
    else:
        rows.fail_first("submit_s", ~np.isfinite(submit) | (submit < 0), "must be finite and >= 0")
    rows.fail_first("num_gpus", jobs["num_gpus"].to_numpy() < 1, "must be >= 1")
    duration = jobs["duration_s"].to_numpy()
    rows.fail_first("duration_s", ~(np.isfinite(duration) & (duration > 0)), "must be > 0")
    iters = jobs["iterations"]
    rows.fail_first("iterations", (iters.notna() & (iters < 1)).to_numpy(bool), "must be >= 1")
    rows.fail_duplicates()
    status = jobs["status"]
    rows.fail_first(
        "status",
        (status.notna() & ~status.isin(STATUSES)).to_numpy(bool),
        f"must be one of {list(STATUSES)}",
    )
    gpu = jobs["gpu_type"]
    rows.fail_first(
        "gpu_type",
        (gpu.notna() & ~gpu.str.fullmatch(GPU_TYPE_PATTERN).fillna(False)).to_numpy(bool),
        "must name a GPU type in lower case (e.g. 'v100', 'p40')",
    )


def _cast(frame: pd.DataFrame, source: str) -> pd.DataFrame:
    """The columns of the schema, in order and cast; missing optional columns become NA."""
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise TraceError(source, f"missing column {missing[0]!r}", field=missing[0])
    n = len(frame)
    out: dict[str, pd.Series] = {}
    ids = frame["job_id"].reset_index(drop=True).astype("string")
    rows = _RowNames(source, pd.DataFrame({"job_id": ids}), frame.index)
    for col, dtype in DTYPES.items():
        if col in frame.columns:
            values = frame[col].reset_index(drop=True)
            if col in _WHOLE:
                _check_numbers(values, col, rows, whole=_WHOLE[col])
        else:
            values = pd.Series(pd.NA, index=pd.RangeIndex(n), dtype=dtype)
        try:
            out[col] = values.astype(dtype)
            if col == "gpu_type":  # names are case-blind: "V100" is v100
                out[col] = out[col].str.strip().str.lower()
        except (TypeError, ValueError) as exc:
            raise TraceError(source, f"cannot be read as {dtype}: {exc}", field=col) from exc
    return pd.DataFrame(out)


# The number columns, and whether each holds whole numbers.
_WHOLE = {"submit_s": False, "num_gpus": True, "duration_s": False, "iterations": True}


def _check_numbers(values: pd.Series, col: str, rows: _RowNames, *, whole: bool) -> None:
    """A number column's cells before the cast: numbers (not True/False, not text) and whole
    where the schema says. The cast alone would truncate 1.5 GPUs to 1 without a word, read
    True as 1, and fail on text without naming the row."""
    shown = values.to_numpy(dtype=object)
    if pd.api.types.is_bool_dtype(values.dtype):
        bad, why = values.notna().to_numpy(bool), "must be a number"
    else:
        try:
            parsed = pd.to_numeric(values, errors="coerce").to_numpy(np.float64, na_value=np.nan)
        except (OverflowError, TypeError, ValueError):
            return  # left to the cast, whose error names the column
        bad, why = values.notna().to_numpy(bool) & np.isnan(parsed), "must be a number"
        if whole and not bad.any():
            bad = np.isfinite(parsed) & (parsed != np.round(parsed))
            why = "must be a whole number"
        if whole and not bad.any() and col in REQUIRED_COLUMNS:
            bad, why = ~np.isfinite(parsed), "must be a finite number"
    if bad.any():
        pos = int(np.argmax(bad))
        raise TraceError(
            rows.source, f"{rows.where(pos)}: {col} {why}, got {_plain(shown[pos])}", field=col
        )


def _read_only(values: np.ndarray) -> np.ndarray:
    view = values.view()
    view.flags.writeable = False
    return view


def _objects(values: pd.Series) -> np.ndarray:
    """A string column as an object array with ``None`` where values are missing."""
    out = values.to_numpy(dtype=object)
    out[values.isna().to_numpy(bool)] = None
    return out


def _sorted(jobs: pd.DataFrame) -> pd.DataFrame:
    """Rows by submit_s then job_id.

    A numeric sort first; job ids are compared only within runs of equal submit times, which
    are short, so a million jobs sort in milliseconds rather than through a two-key string sort.
    """
    submit = jobs["submit_s"].to_numpy()
    order = np.argsort(submit, kind="stable")
    in_order = submit[order]
    tie = np.flatnonzero(in_order[1:] == in_order[:-1]) if len(order) > 1 else np.empty(0, int)
    if len(tie):
        ids = jobs["job_id"].to_numpy(dtype=object)
        # Runs of equal times: [start, end) intervals of positions in ``order``.
        starts = tie[np.r_[True, np.diff(tie) > 1]]
        ends = tie[np.r_[np.diff(tie) > 1, True]] + 2
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            order[a:b] = sorted(order[a:b].tolist(), key=lambda r: str(ids[r]))
    if (order == np.arange(len(order))).all():
        return jobs
    return jobs.iloc[order].reset_index(drop=True)
