from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from unstall.traces import detect_format, read_trace
from unstall.traces.schema import TraceError


def attempt(start: str | None, end: str | None, *gpus_per_machine: int) -> dict[str, Any]:
    detail = [
        {"ip": f"m{i}", "gpus": [f"gpu{g}" for g in range(n)]}
        for i, n in enumerate(gpus_per_machine)
    ]
    return {"start_time": start, "end_time": end, "detail": detail}


def job(jobid: str, submitted: str, attempts: list, status: str = "Pass") -> dict[str, Any]:
    return {
        "status": status,
        "vc": "vc1",
        "jobid": jobid,
        "attempts": attempts,
        "submitted_time": submitted,
        "user": "u1",
    }


JOBS = [
    job("a", "2017-10-03 02:50:40", [attempt("2017-10-03 02:51:00", "2017-10-03 03:51:00", 4, 4)]),
    job(
        "b",
        "2017-10-03 02:00:00",
        [
            attempt("2017-10-03 02:00:10", "2017-10-03 02:00:40", 8),  # failed try: 30 s
            attempt("2017-10-03 02:10:00", "2017-10-03 02:20:00", 2),  # last: 2 GPUs, 600 s
        ],
        status="Killed",
    ),
    job("c", "2017-10-03 04:00:00", []),  # never started
    job("d", "2017-10-03 04:00:00", [attempt("2017-10-03 04:00:05", "None", 1)]),  # running
    job("e", "2017-10-03 05:00:00", [attempt("2017-10-03 05:00:05", "2017-10-03 05:00:06")]),
]


def write(
    tmp_path: Path, jobs: list, *, lines: bool = False, name: str = "cluster_job_log"
) -> Path:
    path = tmp_path / name
    if lines:
        path.write_text("".join(json.dumps(j) + "\n" for j in jobs))
    else:
        path.write_text(json.dumps(jobs, indent=2))
    return path


def test_reads_finished_jobs_and_counts_the_rest(tmp_path: Path) -> None:
    path = write(tmp_path, JOBS)
    assert detect_format(path) == "philly-json"
    trace = read_trace(path)
    jobs = trace.jobs
    assert list(jobs["job_id"]) == ["b", "a"]
    assert list(jobs["submit_s"]) == [0.0, 50 * 60 + 40.0]
    assert list(jobs["num_gpus"]) == [2, 8]
    assert list(jobs["duration_s"]) == [630.0, 3600.0]
    assert list(jobs["status"]) == ["killed", "completed"]
    assert list(jobs["user"]) == ["u1", "u1"]
    assert trace.skipped == {"not finished (no attempt end)": 2, "no GPU in the last attempt": 1}


def test_json_lines_give_the_same_trace(tmp_path: Path) -> None:
    a = read_trace(write(tmp_path, JOBS))
    b = read_trace(write(tmp_path, JOBS, lines=True, name="jobs.jsonl"))
    assert a.equals(b)


def _error(tmp_path: Path, jobs: list, *, lines: bool = False) -> TraceError:
    with pytest.raises(TraceError) as info:
        read_trace(write(tmp_path, jobs, lines=lines), "philly-json")
    return info.value


def test_unknown_key_names_the_jobs_line(tmp_path: Path) -> None:
    bad = [*JOBS[:2], {**JOBS[0], "jobid": "z", "colour": "red"}]
    err = _error(tmp_path, bad)
    # indent=2: "[" on line 1, each job object spans 26 (a) and 33 (b) lines.
    text = (tmp_path / "cluster_job_log").read_text().splitlines()
    assert text[err.line - 1].strip() == "{"  # the line where the job starts
    assert '"z"' in "".join(text[err.line - 1 : err.line + 30])
    assert err.field == "colour"


def test_bad_times_and_spans(tmp_path: Path) -> None:
    err = _error(tmp_path, [JOBS[0], {**JOBS[1], "submitted_time": "3 Oct 2017ish"}], lines=True)
    assert (err.line, err.field) == (2, "submitted_time")
    assert "3 Oct 2017ish" in str(err)
    backwards = job(
        "x", "2017-10-03 02:00:00", [attempt("2017-10-03 03:00:00", "2017-10-03 02:00:00", 1)]
    )
    err = _error(tmp_path, [JOBS[0], JOBS[1], backwards], lines=True)
    assert (err.line, err.field) == (3, "attempts.end_time")
    garbled = job("y", "2017-10-03 02:00:00", [attempt("soon", "2017-10-03 02:00:00", 1)])
    err = _error(tmp_path, [garbled], lines=True)
    assert (err.line, err.field) == (1, "attempts.start_time")


def test_duplicate_ids_status_and_shape(tmp_path: Path) -> None:
    err = _error(tmp_path, [JOBS[0], JOBS[1], JOBS[0]], lines=True)
    assert (err.line, err.field) == (3, "jobid")
    err = _error(tmp_path, [{**JOBS[0], "status": "Maybe"}], lines=True)
    assert (err.line, err.field) == (1, "status")
    err = _error(
        tmp_path, [JOBS[1], {k: v for k, v in JOBS[0].items() if k != "attempts"}], lines=True
    )
    assert (err.line, err.field) == (2, "attempts")


def test_invalid_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "log.json"
    path.write_text('[\n  {"jobid": "a",\n   "user": oops}\n]\n')
    with pytest.raises(TraceError, match="not valid JSON") as info:
        read_trace(path)
    assert info.value.line == 3
    path.write_text('{"jobid": "a"}\n{"jobid": \n')
    with pytest.raises(TraceError, match="not valid JSON") as info:
        read_trace(path, "philly-json")
    assert info.value.line == 2


def test_a_pretty_printed_json_object_is_not_a_trace(tmp_path: Path) -> None:
    # Read as JSON Lines (it does not start with '['), its first line '{' is not valid JSON;
    # the error says what the file is instead, a JSON document that is not a trace.
    path = tmp_path / "throughputs.json"
    throughputs = {"k80": {"resnet": 1.0}, "p100": {}, "v100": {}, "a100": {}}
    path.write_text(json.dumps(throughputs, indent=4))
    with pytest.raises(TraceError) as info:
        read_trace(path)
    message = str(info.value)
    assert message.startswith(f"{path}: not a trace: the whole file is one JSON object")
    assert "(keys 'k80', 'p100', 'v100', ...)" in message
    assert "list of jobs" in message and "one job object per line" in message
    assert "not valid JSON" not in message
    path.write_text(json.dumps(JOBS[0], indent=2))  # one job, pretty-printed: not JSON Lines
    with pytest.raises(TraceError, match=r"one JSON object \(keys 'status', 'vc'"):
        read_trace(path, "philly-json")
