"""Helios (SenseTime, SC'21) ``cluster_log.csv``: one row per Slurm job of one cluster.

Header, as released in S-Lab-System-Group/HeliosData::

    job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue

Times are wall-clock strings (``2020-04-01 00:00:05``), ``duration`` is the run time in seconds
and ``queue`` the wait. ``state`` is a Slurm job state, mapped onto the schema's statuses below;
jobs still pending or running (no run time yet), CPU-only jobs (``gpu_num`` 0) and jobs that ran
for 0 s are left out and counted. Negative or missing values, unknown states and duplicate ids are
errors.
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
    statuses,
    texts,
    times,
    unique,
)

NAME = "helios"
REQUIRED = ("job_id", "gpu_num", "submit_time", "duration")
OPTIONAL = (
    "user",
    "vc",
    "cpu_num",
    "node_num",
    "state",
    "start_time",
    "end_time",
    "queue",
)
TEXT_COLUMNS = ("job_id", "user", "vc", "state", "submit_time", "start_time", "end_time")

# Slurm job states; None = not finished, so there is no run time to replay.
STATE_MAP: dict[str, str | None] = {
    "COMPLETED": "completed",
    "CANCELLED": "killed",
    "PREEMPTED": "killed",
    "FAILED": "failed",
    "NODE_FAIL": "failed",
    "OUT_OF_MEMORY": "failed",
    "BOOT_FAIL": "failed",
    "TIMEOUT": "timeout",
    "DEADLINE": "timeout",
    "PENDING": None,
    "RUNNING": None,
    "SUSPENDED": None,
    "REQUEUED": None,
}


def sniff(path: Path, header: Sequence[str]) -> bool:
    return {"job_id", "gpu_num", "submit_time"} <= set(header)


def read(path: Path, options: ReadOptions) -> Trace:
    """Parse and validate a Helios ``cluster_log.csv``."""
    frame = read_csv(path, text_columns=TEXT_COLUMNS)
    check_columns(path, frame.columns, REQUIRED, OPTIONAL)
    rows = Rows(path, CsvLines(path))
    file_rows = np.arange(len(frame))
    ids = texts(rows, frame["job_id"], file_rows, "job_id", allow_missing=False)
    unique(rows, ids, file_rows, "job_id")
    keep = np.ones(len(frame), dtype=bool)
    skipped: dict[str, int] = {}
    status = None
    if "state" in frame.columns:
        status = statuses(rows, frame["state"], file_rows, "state", STATE_MAP)
        unfinished = status.isna().to_numpy(bool) & frame["state"].notna().to_numpy(bool)
        skip_rows(keep, unfinished, "not finished (pending or running)", skipped)
    submit = times(rows, frame["submit_time"], file_rows, "submit_time")
    gpus = numbers(rows, frame["gpu_num"], file_rows, "gpu_num", integer=True, minimum=0)
    duration = numbers(
        rows, frame["duration"], file_rows, "duration", minimum=0, allow_missing=True
    )
    # Unfinished jobs may have no duration yet; every other job must say how long it ran.
    rows.fail_first(keep & np.isnan(duration), file_rows, "duration", lambda i: "missing value")
    skip_rows(keep, gpus == 0, "CPU-only (gpu_num 0)", skipped)
    skip_rows(keep, duration == 0, "ran for 0 s", skipped)
    jobs = pd.DataFrame(
        {
            "job_id": ids[keep].reset_index(drop=True),
            "submit_s": submit[keep],
            "num_gpus": gpus[keep].astype(np.int64),
            "duration_s": duration[keep],
        }
    )
    for source_col, col in (("user", "user"), ("vc", "vc")):
        if source_col in frame.columns:
            values = texts(rows, frame[source_col], file_rows, source_col)
            jobs[col] = values[keep].reset_index(drop=True)
    if status is not None:
        jobs["status"] = status[keep].reset_index(drop=True)
    return Trace.from_frame(jobs, source=str(path), format=NAME, skipped=skipped)


READER = Reader(
    name=NAME,
    description="Helios cluster_log.csv (job_id,user,vc,gpu_num,...,submit_time,...,duration)",
    suffixes=(".csv",),
    sniff=sniff,
    read=read,
)
