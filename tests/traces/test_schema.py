from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from unstall.errors import ConfigError
from unstall.traces.schema import COLUMNS, Trace, TraceError


def frame(**cols: object) -> pd.DataFrame:
    base: dict[str, object] = {
        "job_id": ["b", "a", "c"],
        "submit_s": [100.0, 100.0, 50.0],
        "num_gpus": [1, 2, 4],
        "duration_s": [10.0, 20.0, 30.0],
    }
    base.update(cols)
    return pd.DataFrame(base)


def test_from_frame_sorts_by_time_then_id_and_shifts_to_zero() -> None:
    trace = Trace.from_frame(frame(), source="mem", submit_offset_s=5.0)
    assert list(trace.jobs["job_id"]) == ["c", "a", "b"]
    assert list(trace.jobs["submit_s"]) == [0.0, 50.0, 50.0]
    assert trace.submit_offset_s == 55.0
    assert tuple(trace.jobs.columns) == COLUMNS
    assert str(trace.jobs["job_id"].dtype) == "string"
    assert str(trace.jobs["iterations"].dtype) == "Int64"
    assert trace.jobs["model"].isna().all()


def test_times_that_the_shift_makes_equal_are_ordered_by_id() -> None:
    """1e9 and the float below it both become 999999998.2010291 once 1.79897... is subtracted:
    a tie, so by id, as a re-read of the written trace orders it (found by a round-trip test)."""
    first = 1.7989708781242371
    late = np.nextafter(1e9, 0.0)
    frame_ = frame(job_id=["z", "b", "a"], submit_s=[first, late, 1e9])
    trace = Trace.from_frame(frame_)
    times = trace.jobs["submit_s"].to_numpy()
    assert times[0] == 0.0 and times[1] == times[2]
    assert list(trace.jobs["job_id"]) == ["z", "a", "b"]
    again = Trace.from_frame(trace.jobs)
    pd.testing.assert_frame_equal(again.jobs, trace.jobs)


def test_arrays_are_numpy_in_trace_order() -> None:
    trace = Trace.from_frame(frame(model=["m1", None, "m3"]))
    arr = trace.arrays()
    assert arr.submit_s.dtype == np.float64 and arr.num_gpus.dtype == np.int64
    assert list(arr.job_id) == ["c", "a", "b"]
    assert list(arr.num_gpus) == [4, 2, 1]
    assert arr.model is not None and list(arr.model) == ["m3", None, "m1"]
    assert len(arr) == 3
    with pytest.raises(ValueError, match="read-only"):
        arr.num_gpus[0] = 99
    assert Trace.from_frame(frame()).arrays().model is None


@pytest.mark.parametrize(
    ("column", "values", "message"),
    [
        ("num_gpus", [1, 0, 4], "num_gpus must be >= 1"),
        ("duration_s", [10.0, -1.0, 3.0], "duration_s must be > 0"),
        ("duration_s", [10.0, np.nan, 3.0], "duration_s must be > 0"),
        ("job_id", ["a", "a", "c"], r"job_id 'a' appears twice \(rows 1 and 2\)"),
        ("status", ["completed", "weird", None], "status must be one of"),
    ],
)
def test_validate_names_the_field_and_job(column: str, values: list, message: str) -> None:
    with pytest.raises(TraceError, match=message) as info:
        Trace.from_frame(frame(**{column: values}), source="mem.csv")
    assert info.value.field == column
    assert info.value.path == "mem.csv"


def test_errors_show_plain_values_and_the_row_as_the_callers_frame_has_it() -> None:
    """Sorted by submit_s, the frame's row 3 (job 'c') comes first: it is still row 3."""
    with pytest.raises(TraceError) as info:
        Trace.from_frame(frame(num_gpus=[1, 2, 0]), source="mem")
    assert str(info.value) == "mem, field 'num_gpus': row 3 (job 'c'): num_gpus must be >= 1, got 0"
    four = pd.DataFrame(
        {
            "job_id": ["a", "b", "c", "d"],
            "submit_s": [9.0, np.nan, 5.0, 1.0],
            "num_gpus": [1, 1, 1, 1],
            "duration_s": [1.0, 1.0, 1.0, 1.0],
        }
    )
    with pytest.raises(TraceError, match=r"row 2 \(job 'b'\): submit_s must be a finite number"):
        Trace.from_frame(four)
    labelled = four.set_index(pd.Index(["w", "x", "y", "z"]))
    with pytest.raises(TraceError, match=r"row 2 \(index 'x', job 'b'\): submit_s .*got nan$"):
        Trace.from_frame(labelled)


@pytest.mark.parametrize(
    ("column", "values", "message"),
    [
        # The cast alone truncated 1.5 GPUs to 1 and read True as 1 GPU without a word, and
        # named no row for text in a number column.
        ("num_gpus", [1, 1.5, 4], r"row 2 \(job 'a'\): num_gpus must be a whole number, got 1.5$"),
        (
            "num_gpus",
            [True, True, False],
            r"row 1 \(job 'b'\): num_gpus must be a number, got True",
        ),
        (
            "num_gpus",
            [1, np.nan, 4],
            r"row 2 \(job 'a'\): num_gpus must be a finite number, got nan",
        ),
        ("submit_s", ["0", "x", "1"], r"row 2 \(job 'a'\): submit_s must be a number, got 'x'$"),
        ("iterations", [10, 2.5, None], r"row 2 \(job 'a'\): iterations must be a whole number"),
    ],
)
def test_number_columns_take_numbers_only(column: str, values: list, message: str) -> None:
    with pytest.raises(TraceError, match=message) as info:
        Trace.from_frame(frame(**{column: values}))
    assert info.value.field == column


def test_from_frame_names_a_frame_of_the_wrong_kind() -> None:
    with pytest.raises(ConfigError, match=r"^Trace.from_frame.frame: must be a pandas DataFrame, "):
        Trace.from_frame({"job_id": ["a"]})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"got str: read_trace\(path\) reads a file$"):
        Trace.from_frame("jobs.csv")  # type: ignore[arg-type]


def test_a_duplicate_id_names_every_row_that_holds_it() -> None:
    with pytest.raises(TraceError) as info:
        Trace.from_frame(frame(job_id=["a", "c", "a"]), source="mem")
    assert str(info.value) == "mem, field 'job_id': job_id 'a' appears twice (rows 1 and 3)"
    labelled = frame(job_id=["a", "a", "a"]).set_index(pd.Index([10, 11, 12]))
    with pytest.raises(TraceError, match=r"'a' appears 3 times \(rows 1, 2 and 3; index 10, 11"):
        Trace.from_frame(labelled)
    with pytest.raises(TraceError, match=r"^<memory>, field 'job_id': row 2: job_id is missing$"):
        Trace.from_frame(frame(job_id=["a", None, "c"]))


def test_a_trace_built_directly_names_its_own_rows() -> None:
    jobs = Trace.from_frame(frame()).jobs.copy()
    jobs.loc[1, "num_gpus"] = 0
    with pytest.raises(TraceError, match=r"row 2 \(job 'a'\): num_gpus must be >= 1, got 0$"):
        Trace(jobs=jobs)


def test_unknown_and_missing_columns_are_rejected() -> None:
    with pytest.raises(TraceError, match="unknown column 'colour'"):
        Trace.from_frame(frame(colour=["r", "g", "b"]))
    with pytest.raises(TraceError, match="missing column 'duration_s'"):
        Trace.from_frame(frame().drop(columns="duration_s"))


def test_summary_figures() -> None:
    jobs = pd.DataFrame(
        {
            "job_id": [f"j{i}" for i in range(4)],
            "submit_s": [0.0, 3600.0, 7200.0, 10800.0],
            "num_gpus": [1, 1, 2, 8],
            "duration_s": [3600.0, 7200.0, 1800.0, 900.0],
            "vc": ["x", "y", "x", None],
            "status": ["completed", "killed", "completed", "failed"],
        }
    )
    s = Trace.from_frame(jobs, skipped={"not finished": 2}).summary(top=1)
    assert s.jobs == 4
    assert s.span_s == 10800.0
    assert s.gpu_mix == {1: 0.5, 2: 0.25, 8: 0.25}
    assert s.gpu_counts == {1: 2, 2: 1, 8: 1}
    assert s.total_gpu_hours == pytest.approx((3600 + 7200 + 2 * 1800 + 8 * 900) / 3600)
    assert s.duration_s["max"] == 7200.0
    assert s.duration_s["p50"] == pytest.approx(np.median([3600, 7200, 1800, 900]))
    assert s.multi_gpu_share == 0.5
    assert s.top_vcs == {"x": 2}
    assert s.status == {"completed": 2, "failed": 1, "killed": 1}
    assert s.skipped == {"not finished": 2}
    d = s.to_dict()
    assert d["gpu_mix"] == {"1": 0.5, "2": 0.25, "8": 0.25}


def test_empty_trace_summary() -> None:
    trace = Trace.from_frame(frame().iloc[:0])
    s = trace.summary()
    assert (s.jobs, s.span_s, s.gpu_mix, s.duration_s) == (0, 0.0, {}, {})


def test_with_jobs_revalidates() -> None:
    trace = Trace.from_frame(frame())
    bad = trace.jobs.copy()
    bad.loc[0, "num_gpus"] = -3
    with pytest.raises(TraceError, match="num_gpus"):
        trace.with_jobs(bad)
