from __future__ import annotations

from pathlib import Path

import pytest

from unstall.traces import detect_format, read_trace
from unstall.traces.schema import TraceError

HEADER = (
    "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"
)
ROWS = [
    "1,u1,vcA,8,48,1,COMPLETED,2020-04-01 00:00:10,2020-04-01 00:00:20,2020-04-01 01:00:20,3600,10",
    "2,u2,vcB,16,96,2,CANCELLED,2020-04-01 00:00:00,2020-04-01 00:05:00,2020-04-01 00:06:00,60,300",
    "3,u1,vcA,0,4,1,COMPLETED,2020-04-01 00:01:00,2020-04-01 00:01:00,2020-04-01 00:02:00,60,0",
    "4,u3,vcA,1,6,1,RUNNING,2020-04-01 00:02:00,2020-04-01 00:02:00,,,0",
    "5,u3,vcC,1,6,1,NODE_FAIL,2020-04-01 00:03:00,2020-04-01 00:03:00,2020-04-01 00:03:30,30,0",
]


def write(tmp_path: Path, rows: list[str], header: str = HEADER) -> Path:
    path = tmp_path / "cluster_log.csv"
    path.write_text(header + "".join(r + "\n" for r in rows))
    return path


def test_reads_gpu_jobs_maps_states_and_counts_skips(tmp_path: Path) -> None:
    path = write(tmp_path, ROWS)
    assert detect_format(path) == "helios"
    trace = read_trace(path)
    jobs = trace.jobs
    assert list(jobs["job_id"]) == ["2", "1", "5"]
    assert list(jobs["submit_s"]) == [0.0, 10.0, 180.0]
    assert list(jobs["num_gpus"]) == [16, 8, 1]
    assert list(jobs["duration_s"]) == [60.0, 3600.0, 30.0]
    assert list(jobs["status"]) == ["killed", "completed", "failed"]
    assert list(jobs["vc"]) == ["vcB", "vcA", "vcC"]
    assert list(jobs["user"]) == ["u2", "u1", "u3"]
    assert trace.skipped == {"not finished (pending or running)": 1, "CPU-only (gpu_num 0)": 1}


@pytest.mark.parametrize(
    ("bad", "field", "message"),
    [
        ("9,u,v,-1,1,1,COMPLETED,2020-04-01 00:00:00,,,5,0", "gpu_num", "must be >= 0"),
        ("9,u,v,1,1,1,COMPLETED,2020-04-01 00:00:00,,,-5,0", "duration", "must be >= 0"),
        ("9,u,v,1,1,1,COMPLETED,2020-04-01 00:00:00,,,,0", "duration", "missing value"),
        ("9,u,v,1,1,1,COMPLETED,2020-13-45 00:00:00,,,5,0", "submit_time", "not a time"),
        ("9,u,v,1,1,1,EXPLODED,2020-04-01 00:00:00,,,5,0", "state", "unknown state 'EXPLODED'"),
        ("1,u,v,1,1,1,COMPLETED,2020-04-01 00:00:00,,,5,0", "job_id", "duplicate id '1'"),
    ],
)
def test_bad_rows(tmp_path: Path, bad: str, field: str, message: str) -> None:
    path = write(tmp_path, [*ROWS, bad])
    with pytest.raises(TraceError, match=message) as info:
        read_trace(path, "helios")
    assert (info.value.path, info.value.line, info.value.field) == (str(path), 7, field)


def test_unknown_column(tmp_path: Path) -> None:
    path = write(tmp_path, [], header="job_id,gpu_num,submit_time,duration,jobname\n")
    with pytest.raises(TraceError, match="unknown column 'jobname'") as info:
        read_trace(path, "helios")
    assert (info.value.line, info.value.field) == (1, "jobname")


def test_minimal_columns_are_enough(tmp_path: Path) -> None:
    path = write(
        tmp_path, ["a,2,2020-04-01 00:00:00,5"], header="job_id,gpu_num,submit_time,duration\n"
    )
    trace = read_trace(path, "helios")
    assert list(trace.jobs["num_gpus"]) == [2]
    assert trace.jobs["status"].isna().all()
