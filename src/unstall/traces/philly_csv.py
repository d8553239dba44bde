"""Philly jobs as prepared by the Pollux artifact: ``timestamp,duration,num_gpus,gpu_time,cluster``.

One row per job of Microsoft's Philly cluster (Sep-Dec 2017). ``timestamp`` is the submission
time (``YYYY-MM-DD HH:MM:SS``), ``duration`` the run time in seconds, ``gpu_time`` their product
with ``num_gpus`` and ``cluster`` the virtual cluster. The file has no job ids: a job's id is its
row number (the first job under the header is ``1``). There is no model column either; see
:func:`unstall.traces.models.assign_models`. Durations were measured on Philly's own GPUs:
every job's ``gpu_type`` is :data:`PHILLY_GPU` (``p40``, the 24 GB GPU of the 8-GPU servers
that hold most of Philly's GPUs; the ``philly`` cluster preset's type).

Jobs that ran for 0 s are left out and counted; negative or missing values are errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from unstall.traces.reading import Reader, ReadOptions
from unstall.traces.schema import Trace
from unstall.traces.validation import (
    CsvLines,
    Rows,
    check_columns,
    numbers,
    read_csv,
    skip_rows,
    texts,
    times,
)

# The GPU type Philly's run times were measured on (see the module docstring).
PHILLY_GPU = "p40"
NAME = "philly-csv"
REQUIRED = ("timestamp", "duration", "num_gpus")
OPTIONAL = ("gpu_time", "cluster")


def sniff(path: Path, header: Sequence[str]) -> bool:
    return set(REQUIRED) <= set(header) and set(header) <= set(REQUIRED + OPTIONAL)


def read(path: Path, options: ReadOptions) -> Trace:
    """Parse and validate a prepared Philly CSV."""
    frame = read_csv(path, text_columns=("timestamp", "cluster"))
    check_columns(path, frame.columns, REQUIRED, OPTIONAL)
    rows = Rows(path, CsvLines(path))
    file_rows = np.arange(len(frame))
    submit = times(rows, frame["timestamp"], file_rows, "timestamp")
    duration = numbers(rows, frame["duration"], file_rows, "duration", minimum=0)
    gpus = numbers(rows, frame["num_gpus"], file_rows, "num_gpus", integer=True, minimum=1)
    if "gpu_time" in frame.columns:  # checked so a corrupt file is noticed; not needed otherwise
        numbers(rows, frame["gpu_time"], file_rows, "gpu_time", minimum=0, allow_missing=True)
    vc = texts(rows, frame["cluster"], file_rows, "cluster") if "cluster" in frame.columns else None

    keep = np.ones(len(frame), dtype=bool)
    skipped: dict[str, int] = {}
    skip_rows(keep, duration == 0, "ran for 0 s", skipped)
    jobs = pd.DataFrame(
        {
            "job_id": pd.Series(file_rows[keep] + 1).astype("string"),
            "submit_s": submit[keep],
            "num_gpus": gpus[keep].astype(np.int64),
            "duration_s": duration[keep],
        }
    )
    if vc is not None:
        jobs["vc"] = vc[keep].reset_index(drop=True)
    jobs["gpu_type"] = PHILLY_GPU
    return Trace.from_frame(jobs, source=str(path), format=NAME, skipped=skipped)


READER = Reader(
    name=NAME,
    description="Philly jobs as prepared by Pollux (timestamp,duration,num_gpus,gpu_time,cluster)",
    suffixes=(".csv",),
    sniff=sniff,
    read=read,
)
