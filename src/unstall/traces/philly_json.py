"""The original Philly ``cluster_job_log`` (msr-fiddle/philly-traces): a JSON list of jobs.

Each job::

    {"jobid": "application_..", "user": "..", "vc": "..", "status": "Pass|Killed|Failed",
     "submitted_time": "2017-10-03 02:50:40",
     "attempts": [{"start_time": "..", "end_time": "..",
                   "detail": [{"ip": "m1", "gpus": ["gpu0", "gpu1"]}, ...]}, ...]}

A JSON Lines file (one job object per line) is read as well.

Mapping: ``num_gpus`` is the number of GPUs of the last attempt (the one that ended the job);
``duration_s`` is the sum of the attempts' run times (time between attempts is queueing, not
work). Jobs with no attempts, or whose last attempt has no start or end time, never finished:
they are left out and counted, as are jobs whose last attempt holds no GPU. Times are the
cluster's local wall clock, read as naive times. Unknown keys, unparsable times, attempts that
end before they start and duplicate ids are errors naming the job's line.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from unstall.config import read_text_file
from unstall.errors import DataFileError
from unstall.traces.philly_csv import PHILLY_GPU
from unstall.traces.reading import Reader, ReadOptions
from unstall.traces.schema import Trace, TraceError
from unstall.traces.validation import Rows, skip_rows, statuses, texts, times, unique

NAME = "philly-json"
JOB_KEYS = frozenset({"jobid", "user", "vc", "status", "submitted_time", "attempts"})
TEXT_KEYS = ("jobid", "user", "vc", "status", "submitted_time")
ATTEMPT_KEYS = frozenset({"start_time", "end_time", "detail"})
DETAIL_KEYS = frozenset({"ip", "gpus"})
STATUS_MAP: dict[str, str | None] = {"Pass": "completed", "Killed": "killed", "Failed": "failed"}
# The log writes a missing time as the text "None" as well as null.
NO_TIME = (None, "None", "")


@dataclass
class JsonJobLines:
    """The line where each job object starts; worked out only when an error needs it."""

    text: str
    json_lines: bool
    _starts: list[int] | None = field(default=None, init=False, repr=False)

    def line_of(self, row: int) -> int | None:
        if self._starts is None:
            self._starts = _object_lines(self.text, self.json_lines)
        return self._starts[row] if row < len(self._starts) else None


@dataclass
class _Columns:
    """The per-job fields pulled out of the JSON, one list entry per job (or per attempt)."""

    jobid: list[Any] = field(default_factory=list)
    user: list[Any] = field(default_factory=list)
    vc: list[Any] = field(default_factory=list)
    status: list[Any] = field(default_factory=list)
    submitted: list[Any] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)
    finished: list[bool] = field(default_factory=list)
    attempt_job: list[int] = field(default_factory=list)
    attempt_start: list[Any] = field(default_factory=list)
    attempt_end: list[Any] = field(default_factory=list)


def sniff(path: Path, header: Sequence[str]) -> bool:
    return path.suffix.lower() in (".json", ".jsonl") or "cluster_job_log" in path.name


def read(path: Path, options: ReadOptions) -> Trace:
    """Parse and validate a Philly ``cluster_job_log``."""
    data, rows = _load(path)
    cols = _Columns()
    for i, job in enumerate(data):
        _take_job(rows, i, job, cols)
    file_rows = np.arange(len(data))
    ids = texts(rows, pd.Series(cols.jobid, dtype=object), file_rows, "jobid", allow_missing=False)
    unique(rows, ids, file_rows, "jobid")
    status_text = pd.Series(cols.status, dtype=object)
    texts(rows, status_text, file_rows, "status", allow_missing=False)
    status = statuses(rows, status_text, file_rows, "status", STATUS_MAP)
    submit = times(rows, pd.Series(cols.submitted, dtype=object), file_rows, "submitted_time")
    run = _run_times(rows, cols, len(data))

    keep = np.ones(len(data), dtype=bool)
    skipped: dict[str, int] = {}
    skip_rows(keep, ~np.array(cols.finished, dtype=bool), "not finished (no attempt end)", skipped)
    gpus = np.array(cols.gpus, dtype=np.int64)
    skip_rows(keep, gpus == 0, "no GPU in the last attempt", skipped)
    skip_rows(keep, run == 0, "ran for 0 s", skipped)
    frame = pd.DataFrame(
        {
            "job_id": ids[keep].reset_index(drop=True),
            "submit_s": submit[keep],
            "num_gpus": gpus[keep],
            "duration_s": run[keep],
            "user": pd.Series(cols.user, dtype=object)[keep].reset_index(drop=True),
            "vc": pd.Series(cols.vc, dtype=object)[keep].reset_index(drop=True),
            "status": status[keep].reset_index(drop=True),
            "gpu_type": PHILLY_GPU,  # durations measured on Philly's own GPUs
        }
    )
    return Trace.from_frame(frame, source=str(path), format=NAME, skipped=skipped)


def _load(path: Path) -> tuple[list[Any], Rows]:
    """The list of job objects, as a JSON array or JSON Lines."""
    try:
        text = read_text_file(path)
    except DataFileError as exc:
        raise TraceError(exc.path, exc.why, line=exc.line) from exc
    if not text.strip():
        # Without this an empty file would read as a trace of no jobs.
        raise TraceError(str(path), "the file is empty")
    json_lines = not text.lstrip().startswith("[")
    try:
        if json_lines:
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            data = json.loads(text)
    except json.JSONDecodeError as exc:
        if json_lines:
            _refuse_one_document(path, text)
        # For JSON Lines the decoder counts within one line; find that line in the file.
        line = exc.lineno if not json_lines else _bad_json_line(text)
        raise TraceError(str(path), f"not valid JSON: {exc.msg}", line=line) from exc
    except RecursionError:
        raise TraceError(str(path), "nested too deeply to read") from None
    if not isinstance(data, list):
        raise TraceError(str(path), "the top level must be a list of jobs", line=1)
    return data, Rows(path, JsonJobLines(text, json_lines))


def _refuse_one_document(path: Path, text: str) -> None:
    """Raise if ``text`` is one JSON document over several lines (a pretty-printed object):
    read as JSON Lines it would fail on line 1 with a parser's message that hides the cause,
    a file that is JSON but not a trace. Return if it is not valid JSON as a whole either."""
    try:
        whole = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return
    what = "one JSON object" if isinstance(whole, dict) else "one JSON value"
    if isinstance(whole, dict) and whole:
        keys = [repr(key) for key in list(whole)[:3]]
        what += f" (keys {', '.join(keys)}{', ...' if len(whole) > 3 else ''})"
    raise TraceError(
        str(path),
        f"not a trace: the whole file is {what}; a JSON trace (Philly's cluster_job_log) is a "
        "list of jobs ([{...}, ...]) or JSON Lines, one job object per line",
    )


def _take_job(rows: Rows, i: int, job: Any, cols: _Columns) -> None:
    """Append job ``i``'s fields to ``cols``, checking its keys and the shape of its attempts."""
    if not isinstance(job, dict):
        raise rows.error(i, "job", f"a job must be an object, got {type(job).__name__}")
    for key in job:
        if key not in JOB_KEYS:
            raise rows.error(i, key, f"unknown field; known: {sorted(JOB_KEYS)}")
    for key in TEXT_KEYS:
        value = job.get(key)
        # JSON's NaN (which Python's reader accepts) or a number would pass as a name otherwise.
        if value is not None and not isinstance(value, str):
            raise rows.error(i, key, f"must be text or null, got {value!r}")
    cols.jobid.append(job.get("jobid"))
    cols.user.append(job.get("user"))
    cols.vc.append(job.get("vc"))
    cols.status.append(job.get("status"))
    cols.submitted.append(job.get("submitted_time"))
    attempts = job.get("attempts")
    if attempts is None:
        raise rows.error(i, "attempts", "missing field")
    if not isinstance(attempts, list):
        raise rows.error(i, "attempts", "must be a list")
    gpus = 0
    finished = bool(attempts)
    for k, attempt in enumerate(attempts):
        if not isinstance(attempt, dict):
            raise rows.error(i, f"attempts[{k}]", "an attempt must be an object")
        for key in attempt:
            if key not in ATTEMPT_KEYS:
                raise rows.error(i, f"attempts[{k}].{key}", "unknown field")
        start, end = attempt.get("start_time"), attempt.get("end_time")
        for key, value in (("start_time", start), ("end_time", end)):
            if value is not None and not isinstance(value, str):
                raise rows.error(i, f"attempts[{k}].{key}", f"must be a time, got {value!r}")
        if k == len(attempts) - 1:
            finished = start not in NO_TIME and end not in NO_TIME
            gpus = _gpus(rows, i, k, attempt.get("detail", []))
        cols.attempt_job.append(i)
        cols.attempt_start.append(None if start in NO_TIME else start)
        cols.attempt_end.append(None if end in NO_TIME else end)
    cols.gpus.append(gpus)
    cols.finished.append(finished)


def _gpus(rows: Rows, i: int, k: int, detail: Any) -> int:
    """GPUs of one attempt: the lengths of its per-machine ``gpus`` lists."""
    if not isinstance(detail, list):
        raise rows.error(i, f"attempts[{k}].detail", "must be a list")
    total = 0
    for machine in detail:
        if not isinstance(machine, dict):
            raise rows.error(i, f"attempts[{k}].detail", "each entry must be an object")
        for key in machine:
            if key not in DETAIL_KEYS:
                raise rows.error(i, f"attempts[{k}].detail.{key}", "unknown field")
        gpus = machine.get("gpus", [])
        if not isinstance(gpus, list):
            raise rows.error(i, f"attempts[{k}].detail.gpus", "must be a list")
        total += len(gpus)
    return total


def _run_times(rows: Rows, cols: _Columns, jobs: int) -> np.ndarray:
    """Per job, the sum of its attempts' run times; an earlier attempt without times adds 0."""
    job_of = np.array(cols.attempt_job, dtype=np.int64)
    start = times(
        rows,
        pd.Series(cols.attempt_start, dtype=object),
        job_of,
        "attempts.start_time",
        allow_missing=True,
    )
    end = times(
        rows,
        pd.Series(cols.attempt_end, dtype=object),
        job_of,
        "attempts.end_time",
        allow_missing=True,
    )
    rows.fail_first(
        end < start, job_of, "attempts.end_time", lambda a: "the attempt ends before it starts"
    )
    spans = np.nan_to_num(end - start)
    return np.bincount(job_of, weights=spans, minlength=jobs).astype(np.float64)


def _object_lines(text: str, json_lines: bool) -> list[int]:
    """The 1-based line on which each top-level job object starts."""
    if json_lines:
        return [n for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    decoder = json.JSONDecoder()
    starts: list[int] = []
    pos = text.index("[") + 1
    line, counted = 1, 0
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            return starts
        line += text.count("\n", counted, pos)
        counted = pos
        starts.append(line)
        _, pos = decoder.raw_decode(text, pos)


def _bad_json_line(text: str) -> int | None:
    for n, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                json.loads(line)
            except json.JSONDecodeError:
                return n
    return None


READER = Reader(
    name=NAME,
    description="original Philly cluster_job_log (JSON list of jobs with attempts)",
    suffixes=(".json", ".jsonl"),
    sniff=sniff,
    read=read,
)
