from __future__ import annotations

from pathlib import Path

import pytest

from unstall.traces import detect_format, read_trace
from unstall.traces.reading import ReadOptions
from unstall.traces.schema import TraceError

JOB_HEADER = "job_name,inst_id,user,status,start_time,end_time\n"
TASK_HEADER = (
    "job_name,task_name,inst_num,status,start_time,end_time,plan_cpu,plan_mem,plan_gpu,gpu_type\n"
)
JOBS = [
    "j1,i1,u1,Terminated,1000.0,2000.0",
    "j2,i2,u2,Failed,1100.0,1500.0",
    "j3,i3,u1,Running,1200.0,",
    "j4,i4,u3,Terminated,1300.0,1400.0",  # CPU only
    "j5,i5,u3,Terminated,1400.0,1500.0",  # no tasks
]
TASKS = [
    # j1: 1 ps (no GPU) + 2 workers of 50 % -> 1 GPU; runs 1010 .. 1900
    "j1,ps,1.0,Terminated,1010.0,1900.0,600.0,29.3,,MISC",
    "j1,worker,2.0,Terminated,1020.0,1890.0,400.0,10.0,50.0,MISC",
    # j2: 4 instances of 100 % + 1 of 25 % -> 4.25 -> 5 GPUs; runs 1150 .. 1450
    "j2,worker,4.0,Failed,1150.0,1450.0,600.0,10.0,100.0,V100",
    "j2,evaluator,1.0,Failed,1160.0,1400.0,600.0,10.0,25.0,V100",
    "j3,worker,1.0,Running,1210.0,,600.0,10.0,100.0,T4",
    "j4,tensorflow,1.0,Terminated,1310.0,1390.0,600.0,10.0,0.0,",
]


def write(folder: Path, jobs: list[str], tasks: list[str], *, headers: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pai_job_table.csv").write_text(
        (JOB_HEADER if headers else "") + "".join(r + "\n" for r in jobs)
    )
    (folder / "pai_task_table.csv").write_text(
        (TASK_HEADER if headers else "") + "".join(r + "\n" for r in tasks)
    )
    return folder / "pai_job_table.csv"


@pytest.mark.parametrize("headers", [False, True])
def test_joins_jobs_and_tasks(tmp_path: Path, headers: bool) -> None:
    path = write(tmp_path, JOBS, TASKS, headers=headers)
    assert detect_format(path) == "pai"
    assert detect_format(tmp_path) == "pai"
    trace = read_trace(path)
    jobs = trace.jobs
    assert list(jobs["job_id"]) == ["j1", "j2"]
    assert list(jobs["submit_s"]) == [0.0, 100.0]
    assert trace.submit_offset_s == 1000.0
    assert list(jobs["num_gpus"]) == [1, 5]
    assert list(jobs["duration_s"]) == [890.0, 300.0]
    assert list(jobs["status"]) == ["completed", "failed"]
    assert trace.skipped == {
        "not finished (Running or Waiting)": 1,
        "no tasks in the task table": 1,
        "CPU-only (plan_gpu 0)": 1,
    }
    assert "rounded up to whole GPUs: 1 jobs that asked for a fraction of one" in trace.notes
    assert read_trace(tmp_path, "pai").equals(trace)


def test_task_table_errors_name_the_task_file(tmp_path: Path) -> None:
    bad = [*TASKS, "j5,worker,-1.0,Terminated,1400.0,1450.0,600.0,10.0,100.0,V100"]
    path = write(tmp_path, JOBS, bad)
    with pytest.raises(TraceError, match="must be >= 0") as info:
        read_trace(path, "pai")
    err = info.value
    assert (err.path, err.line, err.field) == (str(tmp_path / "pai_task_table.csv"), 7, "inst_num")
    backwards = [*TASKS, "j5,worker,1.0,Terminated,1450.0,1400.0,600.0,10.0,100.0,V100"]
    with pytest.raises(TraceError, match="ends") as info:
        read_trace(write(tmp_path, JOBS, backwards, headers=True), "pai")
    assert (info.value.line, info.value.field) == (8, "end_time")


def test_job_table_errors(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="unknown state 'Exploded'") as info:
        read_trace(write(tmp_path, [*JOBS, "j6,i6,u,Exploded,1.0,2.0"], TASKS), "pai")
    assert (info.value.line, info.value.field) == (6, "status")
    with pytest.raises(TraceError, match="duplicate id 'j1'") as info:
        read_trace(write(tmp_path, [*JOBS, "j1,i6,u,Terminated,1.0,2.0"], TASKS), "pai")
    assert (info.value.line, info.value.field) == (6, "job_name")
    with pytest.raises(TraceError, match="expected 6 fields") as info:
        read_trace(write(tmp_path, ["j1,i1,u1,Terminated"], TASKS), "pai")
    assert info.value.line == 1


def test_missing_task_table_and_explicit_one(tmp_path: Path) -> None:
    path = write(tmp_path / "a", JOBS, TASKS)
    moved = tmp_path / "tasks.csv"
    (tmp_path / "a" / "pai_task_table.csv").rename(moved)
    with pytest.raises(TraceError, match="needs the task table"):
        read_trace(path, "pai")
    trace = read_trace(path, "pai", ReadOptions(pai_task_table=moved))
    assert len(trace) == 2
