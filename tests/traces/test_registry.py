from __future__ import annotations

from pathlib import Path

import pytest

from unstall.traces import READERS, detect_format, read_trace
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
