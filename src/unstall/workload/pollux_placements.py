"""Reader of Pollux's measured ``placements.csv`` files (the calibration's input).

One row per placement string and local batch: ``placement,local_bsz,step_time,sync_time``. A
placement string has one digit per node, the GPUs the job holds there ("1123"); Pollux stores each
placement under its smallest rotation, and measured on nodes of 4 GPUs.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from unstall.config import MAX_WHOLE_NUMBER, read_text_file
from unstall.errors import DataFileError

COLUMNS = ("placement", "local_bsz", "step_time", "sync_time")
GPUS_PER_NODE = 4  # Pollux's testbed: AWS g4dn.12xlarge, 4 x T4 per node, 50 Gbps network


# --- reading ------------------------------------------------------------------------------------


def _cell(path: Path, lineno: int, row: Mapping[str, str], field: str, kind: type) -> float:
    text = (row.get(field) or "").strip()
    try:
        value = kind(text)
    except ValueError:
        raise DataFileError(
            str(path), f"not a number: {text!r}", line=lineno, field=field
        ) from None
    # The size first: math.isfinite cannot take an int too large for a float.
    if abs(value) > MAX_WHOLE_NUMBER or not math.isfinite(value):
        shown = text if len(text) <= 40 else f"{text[:37]}..."
        raise DataFileError(str(path), f"not a finite number: {shown!r}", line=lineno, field=field)
    return float(value)


def _row(path: Path, lineno: int, row: Mapping[str, str]) -> tuple[str, int, float, float]:
    text = (row.get("placement") or "").strip()
    if not (text.isascii() and text.isdigit()) or "0" in text:
        raise DataFileError(
            str(path),
            f"{text!r} is not a placement string (one digit 1-9 of GPUs per node)",
            line=lineno,
            field="placement",
        )
    local_bsz = _cell(path, lineno, row, "local_bsz", int)
    step = _cell(path, lineno, row, "step_time", float)
    sync = _cell(path, lineno, row, "sync_time", float)
    if local_bsz < 1:
        raise DataFileError(str(path), "must be >= 1", line=lineno, field="local_bsz")
    if step <= 0:
        raise DataFileError(str(path), "must be > 0", line=lineno, field="step_time")
    if sync < 0:
        raise DataFileError(str(path), "must be >= 0", line=lineno, field="sync_time")
    return text, int(local_bsz), step, sync


def read_placements(path: str | Path) -> pd.DataFrame:
    """Read one ``placements.csv``: columns placement, local_bsz, step_time, sync_time.

    Returns a DataFrame with those columns plus ``n_gpus`` and ``n_nodes``; errors name the
    file, line and field.
    """
    p = Path(path)
    text = read_text_file(p)
    rows = []
    with io.StringIO(text, newline="") as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        missing = [c for c in COLUMNS if c not in header]
        if missing:
            raise DataFileError(
                str(p), f"missing column(s) {missing}; header is {header}", line=1, field=missing[0]
            )
        for lineno, row in enumerate(reader, start=2):
            rows.append(_row(p, lineno, row))
    if not rows:
        raise DataFileError(str(p), "no data rows")
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    df["n_gpus"] = df["placement"].map(lambda s: sum(int(c) for c in s))
    df["n_nodes"] = df["placement"].str.len()
    return df


def read_placements_dir(root: str | Path) -> dict[str, pd.DataFrame]:
    """``{application: table}`` from ``root/APP/placements.csv`` (or one file named directly)."""
    r = Path(root)
    if r.is_file():
        return {r.parent.name or r.stem: read_placements(r)}
    if not r.is_dir():
        raise DataFileError(str(r), "no such directory")
    files = sorted(r.glob("*/placements.csv"))
    if not files:
        raise DataFileError(str(r), "no APP/placements.csv files in this directory")
    return {f.parent.name: read_placements(f) for f in files}
