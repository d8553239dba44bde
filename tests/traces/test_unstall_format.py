from __future__ import annotations

import string
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unstall.traces import detect_format, read_trace
from unstall.traces.schema import STATUSES, Trace, TraceError
from unstall.traces.unstall_format import write_trace


def small_trace() -> Trace:
    jobs = pd.DataFrame(
        {
            "job_id": ["a", "b,with comma", "c"],
            "submit_s": [0.0, 1.5, 1.0 / 3.0],
            "num_gpus": [1, 8, 2],
            "duration_s": [10.0, 0.1, 12345.678],
            "model": ["resnet18", None, "ncf"],
            "iterations": [100, None, 7],
            "status": ["completed", None, "killed"],
        }
    )
    return Trace.from_frame(
        jobs, source="mem", format="philly-csv", submit_offset_s=99.0, notes=("n1",)
    )


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_round_trip(tmp_path: Path, suffix: str) -> None:
    trace = small_trace()
    path = write_trace(trace, tmp_path / f"t{suffix}")
    assert detect_format(path) == "unstall"
    back = read_trace(path)
    assert back.equals(trace)
    assert back.format == "unstall"
    if suffix == ".parquet":  # Parquet keeps the metadata, CSV only the columns
        assert back.submit_offset_s == 99.0 and back.notes == ("n1",)


def test_unknown_suffix(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot tell the file type"):
        write_trace(small_trace(), tmp_path / "t.xlsx")


@pytest.mark.parametrize(
    ("row", "field", "message"),
    [
        ("x,1.0,0,5.0", "num_gpus", "must be >= 1"),
        ("x,1.0,1,0", "duration_s", "must be > 0"),
        ("x,-1.0,1,5", "submit_s", "must be >= 0"),
        ("a,1.0,1,5", "job_id", "duplicate id 'a'"),
        (",1.0,1,5", "job_id", "missing value"),
        ("x,1.0,1,NaN", "duration_s", "not a number: 'NaN'"),
    ],
)
def test_bad_csv_rows(tmp_path: Path, row: str, field: str, message: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text("job_id,submit_s,num_gpus,duration_s\na,0,1,5\n" + row + "\n")
    with pytest.raises(TraceError, match=message) as info:
        read_trace(path)
    assert (info.value.line, info.value.field) == (3, field)


def test_bad_status_and_unknown_column(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("job_id,submit_s,num_gpus,duration_s,status\na,0,1,5,done\n")
    with pytest.raises(TraceError, match="unknown state 'done'") as info:
        read_trace(path)
    assert (info.value.line, info.value.field) == (2, "status")
    path.write_text("job_id,submit_s,num_gpus,duration_s,priority\na,0,1,5,3\n")
    with pytest.raises(TraceError, match="unknown column 'priority'") as info:
        read_trace(path, "unstall")
    assert (info.value.line, info.value.field) == (1, "priority")


def test_a_spreadsheets_csv_with_a_byte_order_mark_is_detected_and_read(tmp_path: Path) -> None:
    # Spreadsheets save "CSV UTF-8" with a byte-order mark before the header.
    path = tmp_path / "t.csv"
    path.write_bytes(b"\xef\xbb\xbfjob_id,submit_s,num_gpus,duration_s\na,0,1,5\nb,2,4,9\n")
    assert detect_format(path) == "unstall"
    assert read_trace(path).jobs["job_id"].tolist() == ["a", "b"]


@pytest.mark.parametrize(
    "rows", ["a,0,1,5,\nb,1,1,5,\n", "a,0,1,5,resnet50\n", "a,0,1,5,x,y\nb,1,1,5,x,y\n"]
)
def test_rows_with_more_fields_than_the_header_are_named_not_shifted(
    tmp_path: Path, rows: str
) -> None:
    """Every row a field too many (a comma at each line's end): pandas would take the first
    column for an index and read each value as the next column's."""
    path = tmp_path / "t.csv"
    path.write_text("job_id,submit_s,num_gpus,duration_s\n" + rows)
    fields = rows.splitlines()[0].count(",") + 1
    with pytest.raises(TraceError) as info:
        read_trace(path)
    assert str(info.value) == (
        f"{path}, line 2: {fields} fields where the header has 4 (a comma too many, at the end "
        "of the line?)"
    )


def test_parquet_errors_name_the_row(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pd.DataFrame(
        {
            "job_id": ["a", "b"],
            "submit_s": [0.0, 1.0],
            "num_gpus": [1, -4],
            "duration_s": [1.0, 2.0],
        }
    ).to_parquet(path)
    with pytest.raises(TraceError, match="row 2: must be >= 1") as info:
        read_trace(path)
    assert (info.value.line, info.value.field) == (None, "num_gpus")
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(TraceError, match="not a readable Parquet"):
        read_trace(tmp_path / "junk.parquet")


TEXT = (
    st.text(alphabet=string.ascii_letters + string.digits + "-_.:, ", min_size=1, max_size=12)
    .map(str.strip)
    .filter(bool)
)


@st.composite
def traces(draw: st.DrawFn) -> Trace:
    n = draw(st.integers(0, 30))
    ids = draw(st.lists(TEXT, min_size=n, max_size=n, unique=True))
    finite = st.floats(0, 1e9, allow_nan=False, allow_infinity=False)
    positive = st.floats(1e-3, 1e8, allow_nan=False, allow_infinity=False)
    maybe = lambda s: st.none() | s  # noqa: E731
    jobs = pd.DataFrame(
        {
            "job_id": pd.Series(ids, dtype="string"),
            "submit_s": draw(st.lists(finite, min_size=n, max_size=n)),
            "num_gpus": draw(st.lists(st.integers(1, 1024), min_size=n, max_size=n)),
            "duration_s": draw(st.lists(positive, min_size=n, max_size=n)),
            "model": draw(st.lists(maybe(TEXT), min_size=n, max_size=n)),
            "iterations": pd.array(
                draw(st.lists(maybe(st.integers(1, 10**12)), min_size=n, max_size=n)), dtype="Int64"
            ),
            "user": draw(st.lists(maybe(TEXT), min_size=n, max_size=n)),
            "vc": draw(st.lists(maybe(TEXT), min_size=n, max_size=n)),
            "status": draw(st.lists(maybe(st.sampled_from(STATUSES)), min_size=n, max_size=n)),
        }
    )
    return Trace.from_frame(jobs)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(trace=traces(), suffix=st.sampled_from([".csv", ".parquet"]))
def test_any_trace_round_trips(tmp_path: Path, trace: Trace, suffix: str) -> None:
    path = write_trace(trace, tmp_path / f"r{suffix}")
    back = read_trace(path, "unstall")
    pd.testing.assert_frame_equal(back.jobs, trace.jobs)
    assert np.array_equal(back.arrays().submit_s, trace.arrays().submit_s)
