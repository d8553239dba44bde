"""Alibaba PAI (cluster-trace-gpu-v2020, NSDI'22): ``pai_job_table`` joined with ``pai_task_table``.

The released CSVs have no header line (the headers ship as separate ``.header`` files); a file
whose first line is the header is read too. Columns:

- job table: ``job_name,inst_id,user,status,start_time,end_time``; ``start_time`` is the
  submission, in seconds (shifted by a constant for anonymity).
- task table: ``job_name,task_name,inst_num,status,start_time,end_time,plan_cpu,plan_mem,
  plan_gpu,gpu_type``; ``plan_gpu`` is in percent of one GPU (100 = 1 GPU) per instance.

A job's GPUs are ``sum(inst_num * plan_gpu / 100)`` over its tasks, rounded up to whole GPUs (a
job asking for half a GPU still takes one in a whole-GPU simulator; a note counts them). Its run
time is from its first task start to its last task end. Left out and counted: jobs still
``Running`` or ``Waiting``, jobs without tasks or without task times, CPU-only jobs, and jobs
that ran for 0 s. Give the task table with ``ReadOptions.pai_task_table``; by default it is
``pai_task_table.csv`` beside the job table (or inside the directory given as the path).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from unstall.traces.reading import Reader, ReadOptions
from unstall.traces.schema import Trace, TraceError
from unstall.traces.validation import (
    MAX_WHOLE,
    CsvLines,
    Rows,
    check_columns,
    header_of,
    numbers,
    read_csv,
    skip_rows,
    statuses,
    texts,
    unique,
)

NAME = "pai"
JOB_COLUMNS = ("job_name", "inst_id", "user", "status", "start_time", "end_time")
TASK_COLUMNS = (
    "job_name",
    "task_name",
    "inst_num",
    "status",
    "start_time",
    "end_time",
    "plan_cpu",
    "plan_mem",
    "plan_gpu",
    "gpu_type",
)
JOB_TABLE = "pai_job_table.csv"
TASK_TABLE = "pai_task_table.csv"
STATUS_MAP: dict[str, str | None] = {
    "Terminated": "completed",
    "Failed": "failed",
    "Running": None,
    "Waiting": None,
}


def sniff(path: Path, header: Sequence[str]) -> bool:
    if path.is_dir():
        return (path / JOB_TABLE).is_file()
    return "pai_job_table" in path.name or list(header[:2]) == ["job_name", "inst_id"]


def read(path: Path, options: ReadOptions) -> Trace:
    """Parse both tables, validate them, and join them into one row per finished GPU job."""
    job_path = path / JOB_TABLE if path.is_dir() else path
    task_path = options.pai_task_table or job_path.with_name(TASK_TABLE)
    if not task_path.is_file():
        raise TraceError(
            str(task_path), "no such file: the PAI reader needs the task table for GPUs per job"
        )
    jobs, rows_j = _table(job_path, JOB_COLUMNS, ("job_name", "inst_id", "user", "status"))
    tasks, rows_t = _table(task_path, TASK_COLUMNS, ("job_name", "task_name", "status", "gpu_type"))
    per_job = _task_totals(tasks, rows_t)

    file_rows = np.arange(len(jobs))
    names = texts(rows_j, jobs["job_name"], file_rows, "job_name", allow_missing=False)
    unique(rows_j, names, file_rows, "job_name")
    texts(rows_j, jobs["status"], file_rows, "status", allow_missing=False)
    status = statuses(rows_j, jobs["status"], file_rows, "status", STATUS_MAP)
    submit = numbers(rows_j, jobs["start_time"], file_rows, "start_time")
    numbers(rows_j, jobs["end_time"], file_rows, "end_time", allow_missing=True)

    joined = per_job.reindex(names.to_numpy())
    gpu_share = joined["gpu"].to_numpy(dtype=np.float64)
    run = (joined["end"] - joined["start"]).to_numpy(dtype=np.float64)
    gpus = np.ceil(np.nan_to_num(gpu_share) - 1e-9)
    # Checked here, on the job's own line: cast to int64, a sum beyond 2**53 would wrap round.
    rows_j.fail_first(
        ~(gpus <= MAX_WHOLE),
        file_rows,
        "num_gpus",
        lambda i: f"the task table asks for {gpu_share[i]:.3g} GPUs for this job (at most 2**53)",
    )
    keep = np.ones(len(jobs), dtype=bool)
    skipped: dict[str, int] = {}
    skip_rows(keep, status.isna().to_numpy(bool), "not finished (Running or Waiting)", skipped)
    skip_rows(keep, np.isnan(gpu_share), "no tasks in the task table", skipped)
    skip_rows(keep, gpus == 0, "CPU-only (plan_gpu 0)", skipped)
    skip_rows(keep, np.isnan(run), "no task start/end times", skipped)
    skip_rows(keep, run == 0, "ran for 0 s", skipped)
    fractional = int((keep & (gpus != gpu_share)).sum())
    notes = (
        [f"rounded up to whole GPUs: {fractional} jobs that asked for a fraction of one"]
        if fractional
        else []
    )
    frame = pd.DataFrame(
        {
            "job_id": names[keep].reset_index(drop=True),
            "submit_s": submit[keep],
            "num_gpus": gpus[keep].astype(np.int64),
            "duration_s": run[keep],
            "user": texts(rows_j, jobs["user"], file_rows, "user")[keep].reset_index(drop=True),
            "status": status[keep].reset_index(drop=True),
        }
    )
    return Trace.from_frame(frame, source=str(job_path), format=NAME, skipped=skipped, notes=notes)


def _table(
    path: Path, columns: Sequence[str], text_columns: Sequence[str]
) -> tuple[pd.DataFrame, Rows]:
    """One PAI table, with or without its header line; both are checked field by field."""
    header = header_of(path)
    if not header:
        # Without this a 0-byte table would read as a trace of no jobs.
        raise TraceError(str(path), "the file is empty")
    has_header = set(header) == set(columns)
    if has_header:
        frame = read_csv(path, text_columns=text_columns)
        check_columns(path, frame.columns, columns)
    else:
        if header and len(header) != len(columns):
            raise TraceError(
                str(path),
                f"expected {len(columns)} fields ({','.join(columns)}), found {len(header)}",
                line=1,
            )
        frame = read_csv(path, text_columns=text_columns, names=columns)
    return frame, Rows(path, CsvLines(path, header_lines=1 if has_header else 0))


def _task_totals(tasks: pd.DataFrame, rows: Rows) -> pd.DataFrame:
    """Per job name: GPUs (sum over tasks), first task start, last task end."""
    file_rows = np.arange(len(tasks))
    names = texts(rows, tasks["job_name"], file_rows, "job_name", allow_missing=False)
    inst = numbers(rows, tasks["inst_num"], file_rows, "inst_num", minimum=0)
    # A task without plan_gpu is a CPU task (parameter servers, evaluators).
    plan_gpu = numbers(
        rows, tasks["plan_gpu"], file_rows, "plan_gpu", minimum=0, allow_missing=True
    )
    start = numbers(rows, tasks["start_time"], file_rows, "start_time", allow_missing=True)
    end = numbers(rows, tasks["end_time"], file_rows, "end_time", allow_missing=True)
    rows.fail_first(
        end < start,
        file_rows,
        "end_time",
        lambda i: f"the task ends ({end[i]:g}) before it starts ({start[i]:g})",
    )
    per_task = pd.DataFrame(
        {
            "job": names.to_numpy(dtype=object),
            "gpu": inst * np.nan_to_num(plan_gpu) / 100.0,
            "start": start,
            "end": end,
        }
    )
    return per_task.groupby("job", sort=False).agg(
        gpu=("gpu", "sum"), start=("start", "min"), end=("end", "max")
    )


READER = Reader(
    name=NAME,
    description="Alibaba PAI pai_job_table.csv + pai_task_table.csv (GPUs from plan_gpu)",
    suffixes=(".csv",),
    sniff=sniff,
    read=read,
)
