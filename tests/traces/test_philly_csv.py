from __future__ import annotations

from pathlib import Path

import pytest

from unstall.traces import read_trace
from unstall.traces.schema import TraceError

HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"
GOOD = HEADER + (
    "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"
    "2017-10-09 06:13:03,2951.0,4,11804.0,6214e9\n"
    "2017-10-09 06:13:03,10.0,2,20.0,6214e9\n"
    "2017-10-09 08:00:00,0.0,1,0.0,6214e9\n"
)


def write(tmp_path: Path, text: str, name: str = "philly.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_reads_jobs_sorted_with_row_numbers_as_ids(tmp_path: Path) -> None:
    trace = read_trace(write(tmp_path, GOOD))
    assert trace.format == "philly-csv"
    jobs = trace.jobs
    # Two jobs tie at 06:13:03: ordered by id; the 0 s job (row 4) is left out and counted.
    assert list(jobs["job_id"]) == ["2", "3", "1"]
    assert list(jobs["submit_s"]) == [0.0, 0.0, 48 * 60 + 52.0]
    assert list(jobs["num_gpus"]) == [4, 2, 1]
    assert list(jobs["duration_s"]) == [2951.0, 10.0, 66.0]
    # "6214e9" must stay text, not become the number 6.214e9.
    assert list(jobs["vc"]) == ["6214e9", "6214e9", "11cb48"]
    assert trace.skipped == {"ran for 0 s": 1}
    assert trace.submit_offset_s == pytest.approx(1507529583.0)


@pytest.mark.parametrize(
    ("row", "line", "field", "message"),
    [
        ("2017-10-09 07:01:55,-5.0,1,66.0,a", 3, "duration", "must be >= 0"),
        ("2017-10-09 07:01:55,5.0,,66.0,a", 3, "num_gpus", "missing value"),
        ("2017-10-09 07:01:55,5.0,-2,66.0,a", 3, "num_gpus", "must be >= 1"),
        ("2017-10-09 07:01:55,5.0,1.5,66.0,a", 3, "num_gpus", "whole number"),
        ("2017-10-09 07:01:55,five,1,66.0,a", 3, "duration", "not a number: 'five'"),
        ("yesterday at noon,5.0,1,66.0,a", 3, "timestamp", "not a time: 'yesterday at noon'"),
        (",5.0,1,66.0,a", 3, "timestamp", "missing time"),
    ],
)
def test_bad_rows_name_file_line_and_field(
    tmp_path: Path, row: str, line: int, field: str, message: str
) -> None:
    path = write(tmp_path, HEADER + "2017-10-09 07:01:55,66.0,1,66.0,a\n" + row + "\n")
    with pytest.raises(TraceError, match=message) as info:
        read_trace(path, "philly-csv")
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), line, field)
    assert f"line {line}" in str(err) and f"field '{field}'" in str(err)


def test_first_bad_line_is_reported_and_blank_lines_are_counted(tmp_path: Path) -> None:
    text = (
        HEADER
        + "2017-10-09 07:01:55,66.0,1,66.0,a\n\n\n"
        + ("2017-10-09 07:01:55,-1,1,66.0,a\n2017-10-09 07:01:55,-2,1,66.0,a\n")
    )
    with pytest.raises(TraceError) as info:
        read_trace(write(tmp_path, text), "philly-csv")
    assert info.value.line == 5
    assert "-1" in str(info.value)


def test_unknown_and_missing_columns(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="unknown column 'colour'") as info:
        read_trace(write(tmp_path, "timestamp,duration,num_gpus,colour\n"), "philly-csv")
    assert (info.value.line, info.value.field) == (1, "colour")
    with pytest.raises(TraceError, match="missing column") as info:
        read_trace(write(tmp_path, "timestamp,duration,gpu_time\nx,1,1\n"), "philly-csv")
    assert (info.value.line, info.value.field) == (1, "num_gpus")


def test_ragged_row_names_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD + "2017-10-09 07:01:55,66.0,1,66.0,a,extra\n")
    with pytest.raises(TraceError, match="not a readable CSV") as info:
        read_trace(path, "philly-csv")
    assert info.value.line == 6


def test_empty_and_missing_files(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="empty"):
        read_trace(write(tmp_path, ""), "philly-csv")
    with pytest.raises(TraceError, match="no such file"):
        read_trace(tmp_path / "nope.csv", "philly-csv")


@pytest.mark.data
def test_the_full_philly_trace(shared_data: Path) -> None:
    path = shared_data / "traces" / "philly_jobs.csv"
    if not path.is_file():
        pytest.skip(f"needs {path}: not present")
    trace = read_trace(path)
    assert trace.format == "philly-csv"
    assert len(trace) == 82_247
    s = trace.summary()
    assert s.gpu_counts[1] == 76_627
    assert s.duration_s["p50"] == 1144.0
    assert s.span_s == pytest.approx(108.897 * 86400, rel=1e-4)
    assert s.top_vcs["6214e9"] == 41_226
