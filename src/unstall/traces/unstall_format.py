"""unstall's own trace files: the schema's columns as CSV or Parquet, read and written.

CSV holds ``submit_s`` relative to the first submission (the offset is not kept). Parquet keeps
the trace's metadata (offset, origin, skipped counts, notes) in the file's key-value metadata
under ``unstall.trace``. Both are validated like every other format.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from unstall.results import replaced_atomically, write_text_atomically
from unstall.traces.reading import Reader, ReadOptions
from unstall.traces.schema import (
    COLUMNS,
    OPTIONAL_COLUMNS,
    REQUIRED_COLUMNS,
    STATUSES,
    Trace,
    TraceError,
)
from unstall.traces.validation import (
    CsvLines,
    LineMap,
    NoLines,
    Rows,
    check_columns,
    numbers,
    read_csv,
    statuses,
    texts,
    unique,
)

NAME = "unstall"
METADATA_KEY = b"unstall.trace"
SUFFIXES = (".csv", ".parquet", ".pq")
TEXT_COLUMNS = ("job_id", "model", "user", "vc", "status", "gpu_type")


def sniff(path: Path, header: Sequence[str]) -> bool:
    if path.suffix.lower() in (".parquet", ".pq"):
        return True
    return set(REQUIRED_COLUMNS) <= set(header)


def read(path: Path, options: ReadOptions) -> Trace:
    """Read an unstall trace file (CSV or Parquet, by suffix) and validate every row."""
    lines: LineMap
    if path.suffix.lower() in (".parquet", ".pq"):
        frame, meta = _read_parquet(path)
        lines = NoLines()
    else:
        frame, meta = read_csv(path, text_columns=TEXT_COLUMNS), {}
        lines = CsvLines(path)
    rows = Rows(path, lines)
    header = 1 if isinstance(lines, CsvLines) else None
    check_columns(path, frame.columns, REQUIRED_COLUMNS, OPTIONAL_COLUMNS, line=header)
    file_rows = np.arange(len(frame))
    ids = texts(rows, frame["job_id"], file_rows, "job_id", allow_missing=False)
    unique(rows, ids, file_rows, "job_id")
    jobs = pd.DataFrame(
        {
            "job_id": ids,
            "submit_s": numbers(rows, frame["submit_s"], file_rows, "submit_s", minimum=0),
            "num_gpus": numbers(
                rows, frame["num_gpus"], file_rows, "num_gpus", integer=True, minimum=1
            ).astype(np.int64),
            "duration_s": numbers(
                rows, frame["duration_s"], file_rows, "duration_s", minimum=0, strict_minimum=True
            ),
        }
    )
    if "iterations" in frame.columns:
        iters = numbers(
            rows,
            frame["iterations"],
            file_rows,
            "iterations",
            integer=True,
            minimum=1,
            allow_missing=True,
        )
        jobs["iterations"] = pd.Series(iters).astype("Int64")  # NaN -> NA
    for col in ("model", "user", "vc", "gpu_type"):
        if col in frame.columns:
            jobs[col] = texts(rows, frame[col], file_rows, col)
    if "status" in frame.columns:
        identity: dict[str, str | None] = {s: s for s in STATUSES}
        jobs["status"] = statuses(rows, frame["status"], file_rows, "status", identity)
    return Trace.from_frame(
        jobs,
        source=str(path),
        format=NAME,
        submit_offset_s=float(meta.get("submit_offset_s", 0.0)),
        skipped=meta.get("skipped", {}),
        notes=meta.get("notes", ()),
    )


def write_trace(trace: Trace, path: str | Path) -> Path:
    """Write ``trace`` as CSV or Parquet (by ``path``'s suffix); returns the path written."""
    out = Path(path)
    suffix = out.suffix.lower()
    if suffix not in SUFFIXES:
        raise TraceError(str(out), f"cannot tell the file type: use one of {list(SUFFIXES)}")
    out.parent.mkdir(parents=True, exist_ok=True)
    jobs = trace.jobs[list(written_columns(trace))]
    if suffix == ".csv":
        return write_text_atomically(out, trace_csv_text(trace))
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(jobs, preserve_index=False)
    meta = {
        "origin": trace.source,
        "origin_format": trace.format,
        "submit_offset_s": trace.submit_offset_s,
        "skipped": dict(trace.skipped),
        "notes": list(trace.notes),
    }
    existing = table.schema.metadata or {}
    table = table.replace_schema_metadata({**existing, METADATA_KEY: json.dumps(meta).encode()})
    with replaced_atomically(out) as tmp:
        pq.write_table(table, tmp)
    return out


def trace_csv_text(trace: Trace) -> str:
    """The CSV form of ``trace``: a header line, then one line per job (floats written exactly)."""
    return str(trace.jobs[list(written_columns(trace))].to_csv(index=False, lineterminator="\n"))


def written_columns(trace: Trace) -> tuple[str, ...]:
    """The columns a file of ``trace`` holds: all of the schema's, but ``gpu_type`` only when
    some job names one (files written before that column existed read the same)."""
    if trace.jobs["gpu_type"].notna().any():
        return COLUMNS
    return tuple(c for c in COLUMNS if c != "gpu_type")


NUMBER_COLUMNS = ("submit_s", "num_gpus", "duration_s", "iterations")


def _read_parquet(path: Path) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The table and unstall's metadata of a Parquet trace. A file cut short or corrupt, a column
    of a type that cannot hold its values, metadata of the wrong shape: one line each."""
    if not path.is_file():
        raise TraceError(str(path), "no such file")
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
        for index, name in enumerate(table.column_names):
            column = table.column(index)
            if name in NUMBER_COLUMNS:
                _check_arrow_type(path, name, column.type, number=True)
                # Every width and sign as float64, as a CSV's numbers are read: the checks
                # then refuse what is too large instead of overflowing on it.
                table = table.set_column(index, name, column.cast(pa.float64(), safe=False))
            elif name in TEXT_COLUMNS:
                _check_arrow_type(path, name, column.type, number=False)
        frame = table.to_pandas()
    except (pa.ArrowException, OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        # Arrow's messages run over several lines. Corrupt bytes may also land in the pandas
        # metadata, which is text (JSON) that pyarrow decodes: the same one line.
        why = " ".join(str(exc).split())
        raise TraceError(str(path), f"not a readable Parquet file: {why}") from exc
    raw = (table.schema.metadata or {}).get(METADATA_KEY)
    return frame, _metadata(path, raw) if raw else {}


def _check_arrow_type(path: Path, name: str, kind: Any, *, number: bool) -> None:
    import pyarrow as pa

    types = pa.types
    if types.is_null(kind) or types.is_integer(kind):  # integers: numbers, or ids
        return
    if number and types.is_floating(kind):
        return
    if not number and (types.is_string(kind) or types.is_large_string(kind)):
        return
    want = "numbers" if number else "text"
    raise TraceError(str(path), f"the column holds {kind}, expected {want}", field=name)


def _metadata(path: Path, raw: bytes) -> dict[str, Any]:
    """unstall's metadata in a Parquet trace (:func:`write_trace` writes it), checked."""

    def bad(field: str, why: str) -> TraceError:
        return TraceError(str(path), f"unstall's metadata: {why}", field=f"metadata.{field}")

    try:
        meta = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TraceError(str(path), f"unstall's metadata is not JSON: {exc}") from exc
    if not isinstance(meta, dict):
        raise TraceError(str(path), "unstall's metadata is not a JSON object")
    offset = meta.get("submit_offset_s", 0.0)
    if isinstance(offset, bool) or not isinstance(offset, int | float) or not math.isfinite(offset):
        raise bad("submit_offset_s", f"not a finite number: {offset!r}")
    skipped = meta.get("skipped", {})
    if not isinstance(skipped, dict) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in skipped.values()
    ):
        raise bad("skipped", "not an object of counts (reason: number of rows)")
    notes = meta.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(note, str) for note in notes):
        raise bad("notes", "not a list of texts")
    return meta


READER = Reader(
    name=NAME,
    description="unstall trace (job_id,submit_s,num_gpus,duration_s,...) as CSV or Parquet",
    suffixes=SUFFIXES,
    sniff=sniff,
    read=read,
)
