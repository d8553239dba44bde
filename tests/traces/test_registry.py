from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from unstall.errors import ConfigError
from unstall.traces import READERS, ReadOptions, detect_format, read_trace
from unstall.traces.schema import TraceError


def test_registry_names_match_readers() -> None:
    assert set(READERS) == {"unstall", "philly-csv", "philly-json", "helios", "pai", "pollux"}
    for name, reader in READERS.items():
        assert reader.name == name and reader.description


@pytest.mark.parametrize(
    ("name", "first_line", "expected"),
    [
        ("a.csv", "job_id,submit_s,num_gpus,duration_s", "unstall"),
        ("a.csv", "timestamp,duration,num_gpus,gpu_time,cluster", "philly-csv"),
        (
            "a.csv",
            "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue",
            "helios",
        ),
        ("a.csv", "name,time,application,num_replicas,batch_size", "pollux"),
        ("pai_job_table.csv", "4b3f,8cb3,5854,Terminated,4550879.0,4551416.0", "pai"),
        ("a.json", "[]", "philly-json"),
        ("a.parquet", "", "unstall"),
    ],
)
def test_detects_each_format(tmp_path: Path, name: str, first_line: str, expected: str) -> None:
    path = tmp_path / name
    path.write_text(first_line + "\n")
    assert detect_format(path) == expected


def test_unknown_and_ambiguous(tmp_path: Path) -> None:
    path = tmp_path / "mystery.csv"
    path.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(TraceError, match="cannot tell the trace format") as info:
        read_trace(path)
    assert info.value.line == 1
    both = tmp_path / "both.csv"
    both.write_text("job_id,submit_s,num_gpus,duration_s,gpu_num,submit_time\n")
    with pytest.raises(
        TraceError, match=r"ambiguous trace format: looks like \['unstall', 'helios'\]"
    ):
        read_trace(both)
    with pytest.raises(TraceError, match="unknown trace format 'excel'"):
        read_trace(path, "excel")
    with pytest.raises(TraceError, match="no such file"):
        read_trace(tmp_path / "gone.csv")


@pytest.mark.parametrize(("name", "text"), [("a.csv", ""), ("b.csv", "\n  \n"), ("c.json", "")])
def test_an_empty_file_is_called_empty_not_of_an_unknown_format(
    tmp_path: Path, name: str, text: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TraceError) as info:
        read_trace(path)
    assert str(info.value) == f"{path}: the file is empty"


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("philly.csv", "timestamp,duration,num_gpus,gpu_time,cluster\n"),
        ("pollux.csv", "name,time,application,num_replicas,batch_size\n"),
    ],
)
def test_options_that_are_not_read_options_are_refused_for_every_format(
    tmp_path: Path, name: str, text: str
) -> None:
    """A dict was ignored by the Philly reader and an AttributeError in the Pollux one."""
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        read_trace(path, options={"max_jobs": 5})  # type: ignore[arg-type]
    assert str(info.value) == (
        "read_trace.options: must be a ReadOptions (unstall.traces.ReadOptions, with fields"
        " pollux_duration, seed, pai_task_table) or None, got a dict; there is no option"
        " 'max_jobs'"
    )
    with pytest.raises(ConfigError, match=r"got a dict: pass ReadOptions\(seed=3\)$"):
        read_trace(path, options={"seed": 3})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"read_trace\.options: .* got an int$"):
        read_trace(path, options=5)  # type: ignore[arg-type]
    assert read_trace(path, options=ReadOptions(seed=3)).format in READERS


def test_a_table_or_other_object_for_the_path_is_named() -> None:
    """A DataFrame failed in pathlib ("expected str, bytes or os.PathLike object")."""
    with pytest.raises(ConfigError) as info:
        read_trace(pd.DataFrame({"job_id": ["a"]}))  # type: ignore[arg-type]
    assert str(info.value) == (
        "read_trace.path: must be a file path, got DataFrame: Trace.from_frame(df) builds a "
        "trace from a table"
    )
    with pytest.raises(ConfigError, match=r"^read_trace\.path: must be a file path, got int$"):
        read_trace(5)  # type: ignore[arg-type]
