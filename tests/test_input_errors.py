"""The bad inputs of issue 23, each answered by one error naming the file, line and field."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from unstall.config import load_table_file
from unstall.cost.catalog import load_catalog
from unstall.errors import ConfigError, DataFileError
from unstall.net import topology_preset
from unstall.net.topology import TopologyConfig
from unstall.net.topology_files import load_topology
from unstall.sched import make_policy
from unstall.sim import simulate
from unstall.sim.congestion import read_congestion_schedule
from unstall.traces import read_trace
from unstall.traces.schema import Trace, TraceError
from unstall.workload.profiles import JobProfile

BIG = "9" * 400
PROFILE = (
    '{"model": "resnet50", "device": "v100", "compute_s": 0.2, "local_batch": BATCH,'
    ' "gradient_bytes": 102000000, "gradient_tensors": 161, "layers": 54}'
)


def test_binary_files_are_named_as_not_utf8(tmp_path: Path) -> None:
    junk = b"\xff\xfe\x00\x80" * 50
    for name, read in (
        ("cluster_job_log.json", lambda p: read_trace(p, "philly-json")),
        ("t.csv", lambda p: read_trace(p, "unstall")),
        ("c.toml", load_topology),
        ("c.json", load_topology),
        ("p.json", JobProfile.from_json),
        ("cat.csv", load_catalog),
        ("cong.csv", read_congestion_schedule),
    ):
        path = tmp_path / name
        path.write_bytes(junk)
        with pytest.raises(DataFileError, match="not UTF-8 text") as caught:
            read(path)
        assert str(path) in str(caught.value)


PAI_JOBS = "j0,i0,u,Terminated,0,10\nj1,i1,u\xe9,Terminated,0,10\n"
PAI_TASKS = "j0,t,1,Terminated,0,10,100,1,100,V100\nj1,t,1,Terminated,0,10,100,1,100,V100\n"


def test_a_non_utf8_pai_table_names_the_line_and_field(tmp_path: Path) -> None:
    """Latin-1 text (a byte 0xe9 for "e acute") in the user field of the job table's line 2."""
    (tmp_path / "pai_job_table.csv").write_bytes(PAI_JOBS.encode("latin-1"))
    (tmp_path / "pai_task_table.csv").write_text(PAI_TASKS)
    with pytest.raises(
        TraceError,
        match=r"pai_job_table.csv, line 2, field 'user': not UTF-8 text \(a binary file\?\): "
        r"byte 0xe9 at column 8: ",
    ):
        read_trace(tmp_path)
    (tmp_path / "pai_job_table.csv").write_text(PAI_JOBS)
    (tmp_path / "pai_task_table.csv").write_bytes(b"\xff" + PAI_TASKS.encode())
    with pytest.raises(TraceError, match=r"pai_task_table.csv, line 1, field 'job_name': not UTF"):
        read_trace(tmp_path)


@pytest.mark.parametrize(
    ("name", "text", "reader", "where"),
    [
        (
            "t.csv",
            "job_id,submit_s,num_gpus,duration_s\n1,0,4,5\n2,0,4,5\xff\n",
            "unstall",
            "line 3, field 'duration_s'",
        ),
        ("t.csv", "job_id,submit_s,num_gp\xffus,duration_s\n1,0,4,5\n", "unstall", "line 1:"),
        ("cluster_job_log.json", '[{"jobid": "a1",\n "user": "\xff"}]', "philly-json", "line 2:"),
    ],
)
def test_non_utf8_traces_name_the_line(
    tmp_path: Path, name: str, text: str, reader: str, where: str
) -> None:
    path = tmp_path / name
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(TraceError, match="not UTF-8 text") as caught:
        read_trace(path, reader)
    assert f"{path}, {where}" in str(caught.value)


def test_non_utf8_text_files_name_the_line_and_column(tmp_path: Path) -> None:
    from unstall.profile.sweep import load_points

    for name, read in (
        ("c.toml", load_topology),
        ("p.json", JobProfile.from_json),
        ("cat.csv", load_catalog),
        ("cong.csv", read_congestion_schedule),
        ("points.json", load_points),
    ):
        path = tmp_path / name
        path.write_bytes(b"# a first line\nab\xc3(\n")
        with pytest.raises(DataFileError) as caught:
            read(path)
        assert str(caught.value) == (
            f"{path}, line 2: not UTF-8 text (a binary file?): byte 0xc3 at column 3: "
            "invalid continuation byte"
        )


@pytest.mark.parametrize("value", ["1e20", BIG])
def test_huge_gpu_counts_name_the_line(tmp_path: Path, value: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(f"job_id,submit_s,num_gpus,duration_s\n1,0,4,5\n2,0,{value},5\n")
    with pytest.raises(TraceError, match=r"line 3, field 'num_gpus': too large"):
        read_trace(path)


def test_pai_gpu_sums_too_large_name_the_job_line(tmp_path: Path) -> None:
    (tmp_path / "pai_job_table.csv").write_text(
        "j0,i0,u,Terminated,0,10\nj1,i1,u,Terminated,0,10\n"
    )
    (tmp_path / "pai_task_table.csv").write_text(
        "j0,t,1,Terminated,0,10,100,1,100,V100\nj1,t,1e20,Terminated,0,10,100,1,100,V100\n"
    )
    with pytest.raises(TraceError, match=r"pai_job_table.csv, line 2, field 'num_gpus'"):
        read_trace(tmp_path)


def test_empty_job_tables_are_refused_not_read_as_no_jobs(tmp_path: Path) -> None:
    log = tmp_path / "cluster_job_log.json"
    log.write_text("")
    with pytest.raises(TraceError, match="the file is empty"):
        read_trace(log)
    (tmp_path / "pai_job_table.csv").write_text("")
    (tmp_path / "pai_task_table.csv").write_text("j1,t,1,Terminated,0,10,100,1,100,V100\n")
    with pytest.raises(TraceError, match=r"pai_job_table\.csv: the file is empty"):
        read_trace(tmp_path)


def test_philly_json_nan_vc_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cluster_job_log.json"
    path.write_text(
        '[{"jobid": "a", "user": "u", "vc": NaN, "status": "Pass",'
        ' "submitted_time": "2017-10-03 02:50:40", "attempts": []}]'
    )
    with pytest.raises(TraceError, match=r"line 1, field 'vc': must be text or null, got nan"):
        read_trace(path)


def test_congestion_nan_time_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "cong.csv"
    path.write_text("time_s,fraction\n0,0.1\nnan,0.2\n")
    with pytest.raises(
        DataFileError, match=r"cong.csv, line 3, field 'time_s': must be a finite number"
    ):
        read_congestion_schedule(path)


@pytest.mark.parametrize(
    ("batch", "why"),
    [("1" + "0" * 30, "31-digit number is too large"), ("2000000", "at most 1,000,000")],
)
def test_profile_batches_beyond_reason_are_refused(tmp_path: Path, batch: str, why: str) -> None:
    path = tmp_path / "p.json"
    path.write_text(PROFILE.replace("BATCH", batch))
    with pytest.raises(DataFileError, match=rf"field 'local_batch': .*{why}"):
        JobProfile.from_json(path)


def test_table_files_refuse_400_digit_numbers_by_field(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(f'{{"racks": 1, "nic": {{"bandwidth_gbps": {BIG}}}}}')
    with pytest.raises(DataFileError, match=r"field 'nic.bandwidth_gbps': a 400-digit number"):
        load_table_file(path)


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_table_files_saved_with_a_byte_order_mark_are_read(tmp_path: Path, suffix: str) -> None:
    # Windows editors and spreadsheets write UTF-8 with a mark first; TOML and JSON refused it.
    path = tmp_path / f"cluster{suffix}"
    text = 'racks = 2\nname = "mine"\n' if suffix == ".toml" else '{"racks": 2, "name": "mine"}'
    path.write_bytes("\ufeff".encode() + text.encode())
    assert load_table_file(path) == {"racks": 2, "name": "mine"}


def test_clusters_too_big_to_simulate_are_refused_with_the_limit() -> None:
    with pytest.raises(ConfigError, match=r"100,000,000 nodes .* \(at most 2,000,000\)"):
        TopologyConfig(racks=1000, nodes_per_rack=100_000, gpus_per_node=8)
    with pytest.raises(
        ConfigError, match=r"gpus_per_node: 20,000,000 GPUs .* \(at most 16,000,000\)"
    ):
        TopologyConfig(racks=1, nodes_per_rack=1000, gpus_per_node=20_000)
    assert TopologyConfig(racks=2, nodes_per_rack=1_000_000, gpus_per_node=8).n_gpus == 16_000_000


def test_an_unknown_model_mix_name_is_refused_even_when_the_trace_names_models() -> None:
    trace = Trace.from_frame(
        pd.DataFrame(
            {
                "job_id": ["1"],
                "submit_s": [0.0],
                "num_gpus": [1],
                "duration_s": [60.0],
                "model": ["resnet50"],
            }
        )
    )
    with pytest.raises(ConfigError, match="model_mix: unknown model 'nosuchmodel'"):
        simulate(
            trace, topology_preset("small"), make_policy("fifo"), model_mix={"nosuchmodel": 1.0}
        )


def test_parquet_traces_name_the_column_and_the_metadata_field(tmp_path: Path) -> None:
    """A Parquet file has no lines: its errors name the field (a column, or unstall's metadata)
    and, for a value, the row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    base = {"job_id": ["1", "2"], "submit_s": [0.0, 5.0], "num_gpus": [4, 1], "duration_s": [9, 6]}
    pq.write_table(pa.table(base | {"num_gpus": ["4", "x"]}), path)
    with pytest.raises(
        TraceError, match=r"t.parquet, field 'num_gpus': the column holds string, expected numbers"
    ):
        read_trace(path)
    pq.write_table(pa.table(base | {"extra": [1, 2]}), path)
    with pytest.raises(TraceError, match=r"t.parquet, field 'extra': unknown column"):
        read_trace(path)
    pq.write_table(pa.table(base | {"duration_s": [9, 0]}), path)
    with pytest.raises(TraceError, match=r"t.parquet, field 'duration_s': row 2: must be > 0"):
        read_trace(path)
    meta = {b"unstall.trace": b'{"notes": 5}'}
    pq.write_table(pa.table(base).replace_schema_metadata(meta), path)
    with pytest.raises(TraceError, match=r"field 'metadata.notes': unstall's metadata: not a list"):
        read_trace(path)
    path.write_bytes(path.read_bytes()[:-30])
    with pytest.raises(TraceError, match=r"t.parquet: not a readable Parquet file: [^\n]+$"):
        read_trace(path)


@pytest.mark.parametrize(
    ("value", "got"), [("0.1", "str '0.1'"), (None, "None"), (True, "bool True")]
)
def test_a_number_field_given_no_number_is_named_not_a_type_error(value: object, got: str) -> None:
    from unstall.workload.job_specs import JobPerfSpec

    # It was a bare TypeError from the comparison ('>' not supported), or True passed as 1.
    with pytest.raises(
        ConfigError, match=rf"JobPerfSpec\.compute_s: must be a number > 0, got {got}"
    ):
        JobPerfSpec(compute_s=value, gradient_bytes=10)  # type: ignore[arg-type]
