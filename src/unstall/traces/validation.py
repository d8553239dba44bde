"""Vectorised checks that readers share: find every bad row with a mask, report the first one.

A reader parses a whole file with pandas, then each check builds a boolean mask over the rows and,
when any row is bad, raises :class:`TraceError` for the first one, naming the file, the line a
person sees in an editor (header = line 1) and the field. Line numbers are worked out only on
that error path, so the happy path stays as fast as the parse itself.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd

from unstall.config import first_non_utf8
from unstall.traces.schema import TraceError

# The largest whole number a float64 holds exactly (ids, counts, GPUs).
MAX_WHOLE = 2.0**53


class LineMap(Protocol):
    """Maps a parsed row (0-based, in file order) to its 1-based line in the file, if any."""

    def line_of(self, row: int) -> int | None: ...


@dataclass
class CsvLines:
    """Rows of a CSV parsed by pandas, which skips blank lines: count only the non-blank ones."""

    path: Path
    header_lines: int = 1
    _lines: list[int] | None = field(default=None, init=False, repr=False)

    def line_of(self, row: int) -> int | None:
        if self._lines is None:
            with self.path.open("r", encoding="utf-8", errors="replace") as fh:
                self._lines = [i for i, text in enumerate(fh, start=1) if text.strip()]
        index = self.header_lines + row
        return self._lines[index] if index < len(self._lines) else None


@dataclass(frozen=True)
class NoLines:
    """A source without lines (Parquet, a frame in memory): errors name the row instead."""

    def line_of(self, row: int) -> int | None:
        return None


@dataclass(frozen=True)
class Rows:
    """The file being read and how its rows map to lines; raises the errors that name both."""

    path: Path
    lines: LineMap

    def error(self, row: int, field: str, why: str) -> TraceError:
        line = self.lines.line_of(row)
        where = "" if line is not None else f"row {row + 1}: "
        return TraceError(str(self.path), where + why, line=line, field=field)

    def fail_first(
        self, bad: np.ndarray, rows: np.ndarray, field: str, why: Callable[[int], str]
    ) -> None:
        """Raise for the first ``True`` of ``bad``; ``rows`` maps each position to its file row.

        "First" is the earliest row in the file, so the user fixes the file top to bottom.
        """
        if not bad.any():
            return
        candidates = rows[bad]
        pos = int(np.flatnonzero(bad)[np.argmin(candidates)])
        raise self.error(int(rows[pos]), field, why(pos))


def header_of(path: Path) -> list[str]:
    """The first non-blank line of a CSV, split into stripped field names (a byte-order mark
    before it, as spreadsheets write "CSV UTF-8", is no part of the first name)."""
    try:
        with path.open("r", encoding="utf-8-sig", errors="replace") as fh:
            for text in fh:
                if text.strip():
                    return [name.strip() for name in text.rstrip("\r\n").split(",")]
    except OSError as exc:
        raise TraceError(str(path), f"cannot read: {exc.strerror or exc}") from exc
    return []


def read_csv(
    path: Path, *, text_columns: Iterable[str] = (), names: Sequence[str] | None = None
) -> pd.DataFrame:
    """Parse a CSV with pandas' C parser; ``names`` for files that have no header line.

    ``text_columns`` are kept as text: ids like ``001`` or virtual clusters like ``6214e9`` would
    otherwise become numbers. Only empty fields are missing (``NA`` or ``None`` are text here,
    and in a numeric column they are reported as not a number).
    """
    if not path.is_file():
        raise TraceError(str(path), "no such file")
    try:
        frame = pd.read_csv(
            path,
            header=None if names is not None else 0,
            names=list(names) if names is not None else None,
            dtype={name: str for name in text_columns},
            keep_default_na=False,
            na_values=[""],
            skipinitialspace=True,
        )
    except pd.errors.EmptyDataError as exc:
        raise TraceError(str(path), "the file is empty") from exc
    except UnicodeDecodeError as exc:
        raise _not_utf8(path, names) from exc
    except (pd.errors.ParserError, ValueError) as exc:
        # pandas names the line in its message ("Expected 5 fields in line 3, saw 6").
        found = re.search(r"line (\d+)", str(exc))
        line = int(found.group(1)) if found else None
        raise TraceError(str(path), f"not a readable CSV: {exc}", line=line) from exc
    if not isinstance(frame.index, pd.RangeIndex):
        # Rows with one field more than the header: pandas takes the first column for an index
        # and shifts every value one column left, which then fails (or passes) as the wrong field.
        raise _too_many_fields(path, len(names) if names is not None else len(frame.columns))
    frame.columns = [str(c).strip() for c in frame.columns]
    return frame


def _too_many_fields(path: Path, expected: int) -> TraceError:
    """The error for a CSV whose first data row has more fields than its header (or ``names``)."""
    with path.open("r", encoding="utf-8-sig", errors="replace", newline="") as fh:
        reader = csv.reader(fh)
        for row in reader:
            if len(row) > expected and reader.line_num > 1:
                return TraceError(
                    str(path),
                    f"{len(row)} fields where the header has {expected} (a comma too many, at "
                    "the end of the line?)",
                    line=reader.line_num,
                )
    return TraceError(str(path), f"rows with more fields than the header's {expected}")


def _not_utf8(path: Path, names: Sequence[str] | None) -> TraceError:
    """The error for a CSV that is not UTF-8: its first bad line, and the field there when the
    line has no quotes (a comma inside quotes would shift the count)."""
    with path.open("rb") as fh:
        bad = first_non_utf8(fh)
    if bad is None:  # pandas and a line-by-line decode disagree: say what is known
        return TraceError(str(path), "not UTF-8 text (a binary file?)")
    field = None
    columns = list(names) if names is not None else header_of(path)
    is_header = names is None and bad.line == 1
    if not is_header and b'"' not in bad.raw[: bad.offset]:
        index = bad.raw.count(b",", 0, bad.offset)
        field = columns[index] if index < len(columns) else None
    why = f"not UTF-8 text (a binary file?): {bad.describe()}"
    return TraceError(str(path), why, line=bad.line, field=field)


def check_columns(
    path: Path,
    columns: Iterable[str],
    required: Sequence[str],
    optional: Sequence[str] = (),
    *,
    line: int | None = 1,
) -> None:
    """Header checks: every required column present, no column we do not know. ``line``: where
    the header is (a CSV's line 1; None for a file without lines, e.g. Parquet)."""
    cols = list(columns)
    known = set(required) | set(optional)
    for name in cols:
        if name not in known:
            raise TraceError(
                str(path),
                f"unknown column {name!r}; this format has {list(required) + list(optional)}",
                line=line,
                field=name,
            )
    dupes = [c for c in cols if cols.count(c) > 1]
    if dupes:
        raise TraceError(str(path), f"column {dupes[0]!r} appears twice", line=line, field=dupes[0])
    for name in required:
        if name not in cols:
            raise TraceError(str(path), "missing column", line=line, field=name)


def numbers(
    rows: Rows,
    values: pd.Series,
    file_rows: np.ndarray,
    field: str,
    *,
    integer: bool = False,
    minimum: float | None = None,
    strict_minimum: bool = False,
    allow_missing: bool = False,
) -> np.ndarray:
    """``values`` as float64 after checking each: present, a finite number, whole, >= minimum.

    Missing values come back as NaN when ``allow_missing``.
    """
    missing = _missing(values)
    parsed = _to_floats(values)
    if not allow_missing:
        rows.fail_first(missing, file_rows, field, lambda i: "missing value")
    shown = values.to_numpy(dtype=object)
    present = ~missing
    rows.fail_first(
        present & ~np.isfinite(parsed),
        file_rows,
        field,
        lambda i: ("too large: " if np.isinf(parsed[i]) else "not a number: ") + _short(shown[i]),
    )
    ok = present & np.isfinite(parsed)
    if integer:
        rows.fail_first(
            ok & (parsed != np.round(parsed)),
            file_rows,
            field,
            lambda i: f"must be a whole number, got {shown[i]!r}",
        )
        # Beyond 2**53 a float no longer holds every whole number, and casting to int64 wraps.
        rows.fail_first(
            ok & (np.abs(parsed) > MAX_WHOLE),
            file_rows,
            field,
            lambda i: f"too large: {_short(shown[i])} (at most 2**53)",
        )
    if minimum is not None:
        low = parsed <= minimum if strict_minimum else parsed < minimum
        sign = ">" if strict_minimum else ">="
        rows.fail_first(
            ok & low, file_rows, field, lambda i: f"must be {sign} {minimum:g}, got {shown[i]!r}"
        )
    return parsed


def _to_floats(values: pd.Series) -> np.ndarray:
    """Numbers as float64, NaN where a value is not one; integers beyond a float's range are inf
    (pandas raises OverflowError on those, so they are converted one by one instead)."""
    try:
        numeric = pd.to_numeric(values, errors="coerce")
    except OverflowError:
        numeric = pd.Series([_one_float(v) for v in values.to_numpy(dtype=object)])
    return numeric.to_numpy(dtype=np.float64, na_value=np.nan)


def _one_float(value: object) -> float:
    try:
        return float(str(value).strip())
    except OverflowError:
        return math.inf
    except ValueError:
        return math.nan


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def times(
    rows: Rows, values: pd.Series, file_rows: np.ndarray, field: str, *, allow_missing: bool = False
) -> np.ndarray:
    """Wall-clock strings (ISO 8601, e.g. ``2017-10-03 02:50:40``) as Unix seconds (float64).

    Naive times are read on a UTC clock; missing ones come back as NaN when ``allow_missing``.
    """
    missing = _missing(values)
    if not allow_missing:
        rows.fail_first(missing, file_rows, field, lambda i: "missing time")
    text = values.astype("string")
    parsed = pd.to_datetime(text, format="ISO8601", errors="coerce", utc=True)
    shown = values.to_numpy(dtype=object)
    rows.fail_first(
        ~missing & parsed.isna().to_numpy(),
        file_rows,
        field,
        lambda i: f"not a time: {shown[i]!r} (expected YYYY-MM-DD HH:MM:SS)",
    )
    micros = parsed.dt.tz_localize(None).to_numpy(dtype="datetime64[us]")
    out = micros.astype(np.int64).astype(np.float64) / 1e6
    out[missing | parsed.isna().to_numpy()] = np.nan
    return out


def texts(
    rows: Rows, values: pd.Series, file_rows: np.ndarray, field: str, *, allow_missing: bool = True
) -> pd.Series:
    """``values`` as stripped pandas strings (NA when empty); empty ones rejected unless allowed."""
    missing = _missing(values)
    if not allow_missing:
        rows.fail_first(missing, file_rows, field, lambda i: "missing value")
    out = values.astype("string").str.strip()
    return out.mask(missing)


def skip_rows(keep: np.ndarray, drop: np.ndarray, reason: str, skipped: dict[str, int]) -> None:
    """Leave out the kept rows that ``drop`` marks, counting them under ``reason`` (in place)."""
    newly = drop & keep
    count = int(newly.sum())
    if count:
        skipped[reason] = skipped.get(reason, 0) + count
        keep &= ~newly


def unique(rows: Rows, ids: pd.Series, file_rows: np.ndarray, field: str) -> None:
    """Every id once: the error names the line of the second occurrence."""
    if ids.is_unique:
        return
    dup = ids.duplicated(keep="first").to_numpy()
    shown = ids.to_numpy(dtype=object)
    rows.fail_first(dup, file_rows, field, lambda i: f"duplicate id {shown[i]!r}")


def statuses(
    rows: Rows,
    values: pd.Series,
    file_rows: np.ndarray,
    field: str,
    mapping: dict[str, str | None],
) -> pd.Series:
    """Source states mapped onto :data:`~unstall.traces.schema.STATUSES`; unknown ones rejected.

    A state that maps to ``None`` is known but unfinished; it maps to NA here and the reader
    decides what to do with those rows.
    """
    text = values.astype("string").str.strip()
    known = text.isna() | text.isin(list(mapping))
    shown = values.to_numpy(dtype=object)
    rows.fail_first(
        ~known.to_numpy(bool),
        file_rows,
        field,
        lambda i: f"unknown state {shown[i]!r}; known: {sorted(mapping)}",
    )
    return text.map(mapping, na_action="ignore").astype("string")


def _missing(values: pd.Series) -> np.ndarray:
    """NA, or text that is empty after stripping."""
    na = values.isna().to_numpy(bool)
    if values.dtype == object or str(values.dtype) in ("string", "str"):
        blank = values.astype("string").str.strip().eq("").fillna(False).to_numpy(bool)
        return na | blank
    return na
