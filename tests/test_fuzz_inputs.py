"""Fuzz every file reader: whatever the bytes, only an UnstallError (one line) may escape.

Each reader gets two kinds of input: bytes drawn at random (binary junk, non-UTF-8 text) and a
valid sample of its format with structured corruptions (a field replaced by a hostile value such
as ``nan``, ``1e400`` or a 400-digit number, a line dropped, the file cut short). A reader may
accept the result or refuse it, but must refuse it with an :class:`UnstallError` naming the file:
any other exception would reach the user as a traceback. Few examples each, to keep the suite fast.
"""

from __future__ import annotations

import decimal
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unstall.cost.catalog import load_catalog
from unstall.errors import UnstallError
from unstall.net.topology_files import load_topology
from unstall.ps.scenarios import load_scenario
from unstall.sim.congestion import read_congestion_schedule
from unstall.traces import TraceError, read_trace
from unstall.workload.pollux_placements import read_placements
from unstall.workload.profiles import JobProfile

FUZZ = settings(max_examples=15, suppress_health_check=[HealthCheck.too_slow])

HOSTILE = (
    "nan",
    "NaN",
    "inf",
    "-inf",
    "1e400",
    "1e20",
    "9" * 400,
    "-1",
    "0",
    "2.5",
    "",
    '"',
    ",",
    "[",
    "{",
    "\u00e9\u4e2d",
    "null",
    "true",
    "2017-13-45 99:99:99",
)

JOB_LOG = (
    '[{"jobid": "a1", "user": "u", "vc": "v1", "status": "Pass",'
    ' "submitted_time": "2017-10-03 02:50:40", "attempts": [{"start_time": "2017-10-03 02:51:00",'
    ' "end_time": "2017-10-03 03:51:00", "detail": [{"ip": "m1", "gpus": ["gpu0", "gpu1"]}]}]},\n'
    ' {"jobid": "a2", "user": "u", "vc": "v2", "status": "Killed",'
    ' "submitted_time": "2017-10-03 02:55:40", "attempts": [{"start_time": "2017-10-03 02:56:00",'
    ' "end_time": "2017-10-03 02:59:00", "detail": [{"ip": "m2", "gpus": ["gpu0"]}]}]}]\n'
)

# name -> (file name, valid text, reader)
SAMPLES: dict[str, tuple[str, str, Callable[[Path], object]]] = {
    "unstall": (
        "t.csv",
        "job_id,submit_s,num_gpus,duration_s,model\n1,0,4,100,resnet50\n2,5,1,60,\n",
        lambda p: read_trace(p, "unstall"),
    ),
    "philly-csv": (
        "philly.csv",
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-03 02:50:40,100,2,200,vc1\n2017-10-03 02:51:40,50,1,50,vc2\n",
        lambda p: read_trace(p, "philly-csv"),
    ),
    "philly-json": ("cluster_job_log.json", JOB_LOG, lambda p: read_trace(p, "philly-json")),
    "helios": (
        "cluster_log.csv",
        "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,"
        "duration,queue\n1,u1,vcA,8,48,1,COMPLETED,2020-04-01 00:00:10,2020-04-01 00:00:20,"
        "2020-04-01 01:00:20,3600,10\n",
        lambda p: read_trace(p, "helios"),
    ),
    "pollux": (
        "workload.csv",
        "name,time,application,num_replicas,batch_size\ncifar-1,0,cifar10,2,128\n"
        "bert-2,30,bert,4,12\n",
        lambda p: read_trace(p, "pollux"),
    ),
    "pai-jobs": (
        "pai_job_table.csv",
        "j1,i1,u1,Terminated,1000.0,2000.0\nj2,i2,u2,Failed,1100.0,1500.0\n",
        lambda p: read_trace(p, "pai"),
    ),
    "pai-tasks": (
        "pai_task_table.csv",
        "j1,worker,2.0,Terminated,1020.0,1890.0,400.0,10.0,50.0,MISC\n"
        "j2,worker,4.0,Failed,1150.0,1450.0,600.0,10.0,100.0,V100\n",
        lambda p: read_trace(p.with_name("pai_job_table.csv"), "pai"),
    ),
    "topology-toml": (
        "cluster.toml",
        'nic = "25g"\noversubscription = 2.0\n[[nodes]]\ncount = 2\ngpus_per_node = 8\n'
        '[[nodes]]\ncount = 3\ngpus_per_node = 4\ndevice = "t4"\nrack = 0\n',
        load_topology,
    ),
    "topology-json": (
        "cluster.json",
        '{"racks": 2, "nodes_per_rack": 4, "gpus_per_node": 4,'
        ' "nic": {"bandwidth_gbps": 25, "latency_us": 2}, "oversubscription": 2}\n',
        load_topology,
    ),
    "profile": (
        "profile.json",
        '{"model": "resnet50", "device": "v100", "compute_s": 0.2, "local_batch": 32,'
        ' "gradient_bytes": 102000000, "gradient_tensors": 161, "layers": 54,'
        ' "measured": {"4": 0.25}}\n',
        JobProfile.from_json,
    ),
    "catalog": (
        "catalog.csv",
        "instance,family,gpus,gpu,gpu_memory_gb,gpu_link,network_gbps,network_latency_us,"
        "usd_per_hour,region,date,source\np3.2xlarge,p3,1,v100,16,none,10,30,3.06,us-east-1,2022,aws\n"
        "p3.8xlarge,p3,4,v100,16,nvlink2,10,30,12.24,us-east-1,2022,aws\n",
        load_catalog,
    ),
    "placements": (
        "placements.csv",
        "placement,local_bsz,step_time,sync_time\n4,32,0.25,0.05\n22,32,0.4,0.2\n",
        read_placements,
    ),
    "congestion": ("congestion.csv", "time_s,fraction\n0,0.1\n600,0.5\n", read_congestion_schedule),
    "scenario": (
        "scenario.toml",
        "servers = 4\n[base]\nbandwidth_mb_s = 100.0\n"
        "[[phases]]\nstart = 0.5\nservers = [{ server = 1, bandwidth_mb_s = 25.0 }]\n",
        load_scenario,
    ),
}

PAI_OTHER = {
    "pai-jobs": ("pai_task_table.csv", SAMPLES["pai-tasks"][1]),
    "pai-tasks": ("pai_job_table.csv", SAMPLES["pai-jobs"][1]),
}


def _read(kind: str, content: bytes) -> None:
    """Write ``content`` as a file of ``kind`` and read it; only UnstallError may come out."""
    name, _, reader = SAMPLES[kind]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_bytes(content)
        if kind in PAI_OTHER:
            other, text = PAI_OTHER[kind]
            (Path(folder) / other).write_text(text, encoding="utf-8")
        try:
            reader(path)
        except UnstallError as exc:
            message = str(exc)
            assert "\n" not in message.strip(), message
            assert name in message or "pai_" in message, message


@st.composite
def corrupted(draw: st.DrawFn, text: str) -> bytes:
    """``text`` with one structured corruption: a span replaced, a line dropped, or cut short."""
    how = draw(st.sampled_from(["replace", "drop-line", "truncate", "bytes"]))
    if how == "drop-line":
        lines = text.splitlines(keepends=True)
        i = draw(st.integers(0, len(lines) - 1))
        return "".join(lines[:i] + lines[i + 1 :]).encode()
    if how == "truncate":
        return text.encode()[: draw(st.integers(0, len(text)))]
    start = draw(st.integers(0, len(text)))
    end = draw(st.integers(start, min(len(text), start + 12)))
    if how == "bytes":
        junk = draw(st.binary(min_size=1, max_size=8))
        return text.encode()[:start] + junk + text.encode()[end:]
    token = draw(st.sampled_from(HOSTILE))
    return (text[:start] + token + text[end:]).encode("utf-8")


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_the_valid_samples_are_read(kind: str) -> None:
    """The samples the corruptions start from are valid, so the corruptions are what is tested."""
    name, text, reader = SAMPLES[kind]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_text(text, encoding="utf-8")
        if kind in PAI_OTHER:
            other, other_text = PAI_OTHER[kind]
            (Path(folder) / other).write_text(other_text, encoding="utf-8")
        assert reader(path) is not None


@pytest.mark.parametrize("kind", sorted(SAMPLES))
@FUZZ
@given(content=st.binary(max_size=300))
def test_random_bytes_give_one_line_errors(kind: str, content: bytes) -> None:
    _read(kind, content)


@pytest.mark.parametrize("kind", sorted(SAMPLES))
@FUZZ
@given(data=st.data())
def test_corrupted_files_give_one_line_errors(kind: str, data: st.DataObject) -> None:
    _read(kind, data.draw(corrupted(SAMPLES[kind][1])))


@pytest.mark.parametrize("kind", sorted(SAMPLES))
@pytest.mark.parametrize("token", ["9" * 400, "1e400", "nan", "1e20"])
def test_every_number_replaced_by_a_hostile_one(kind: str, token: str) -> None:
    """Each number of the sample in turn replaced: the cases a random draw may miss."""
    import re

    text = SAMPLES[kind][1]
    for found in re.finditer(r"(?<![\w.:-])\d+(\.\d+)?(?![\w:-])", text):
        _read(kind, (text[: found.start()] + token + text[found.end() :]).encode())


# --- Parquet: the unstall reader's binary form ----------------------------------------------------

PARQUET_FRAME = {
    "job_id": ["1", "2"],
    "submit_s": [0.0, 5.0],
    "num_gpus": [4, 1],
    "duration_s": [100.0, 60.0],
    "model": ["resnet50", None],
}
VALID_META = b'{"submit_offset_s": 10.0, "skipped": {"a": 1}, "notes": ["n"]}'


def _parquet(columns: dict[str, object], meta: bytes | None = VALID_META) -> bytes:
    """A Parquet file of ``columns`` (pyarrow infers the types) with unstall's metadata."""
    import io

    import pyarrow.parquet as pq

    table = pa.table(columns)
    if meta is not None:
        table = table.replace_schema_metadata({b"unstall.trace": meta})
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def _read_parquet(content: bytes) -> None:
    """Write ``content`` as a .parquet trace and read it; only UnstallError may come out."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.parquet"
        path.write_bytes(content)
        try:
            read_trace(path)
        except UnstallError as exc:
            message = str(exc)
            assert "\n" not in message.strip(), message
            assert "t.parquet" in message, message


def test_the_valid_parquet_sample_is_read() -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.parquet"
        path.write_bytes(_parquet(PARQUET_FRAME))
        trace = read_trace(path)
        assert len(trace) == 2 and trace.submit_offset_s == 10.0


@FUZZ
@given(data=st.data())
def test_corrupted_parquet_bytes_give_one_line_errors(data: st.DataObject) -> None:
    """The valid file cut short, or a span of it replaced by random bytes (the footer and its
    schema are at the end, the pages before: both are hit)."""
    valid = _parquet(PARQUET_FRAME)
    if data.draw(st.booleans()):
        _read_parquet(valid[: data.draw(st.integers(0, len(valid) - 1))])
        return
    start = data.draw(st.integers(0, len(valid) - 1))
    junk = data.draw(st.binary(min_size=1, max_size=16))
    _read_parquet(valid[:start] + junk + valid[start + len(junk) :])


# Each hostile column and the field its refusal must name (a file silently accepted fails).
HOSTILE_COLUMNS: dict[str, tuple[dict[str, object], str]] = {
    "gpus as text": ({"num_gpus": ["4", "x"]}, "num_gpus"),
    "gpus as bool": ({"num_gpus": [True, False]}, "num_gpus"),
    "gpus huge": ({"num_gpus": pa.array([2**64 - 1, 1], pa.uint64())}, "num_gpus"),
    "gpus as decimals": (
        {"num_gpus": pa.array([decimal.Decimal(4), None], pa.decimal128(5, 1))},
        "num_gpus",
    ),
    "gpus as floats": ({"num_gpus": [4.5, float("nan")]}, "num_gpus"),
    "submit as lists": ({"submit_s": [[1.0], [2.0]]}, "submit_s"),
    "submit infinite": ({"submit_s": [float("inf"), 0.0]}, "submit_s"),
    "duration as bytes": ({"duration_s": [b"\xff", b"1"]}, "duration_s"),
    "duration as structs": ({"duration_s": [{"a": 1}, {"a": 2}]}, "duration_s"),
    "ids as numbers": ({"job_id": [1, 1]}, "job_id"),
    "ids missing": ({"job_id": [None, "2"]}, "job_id"),
    "model as numbers": ({"model": [1.5, 2.5]}, "model"),
    "iterations negative": ({"iterations": [-1, 3]}, "iterations"),
    "status unknown": ({"status": ["Exploded", None]}, "status"),
    "unknown column": ({"extra": [1, 2]}, "extra"),
}


def _refused(content: bytes, field: str) -> None:
    """Reading ``content`` as a .parquet trace raises a one-line TraceError naming the file
    and ``field``."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.parquet"
        path.write_bytes(content)
        with pytest.raises(TraceError, match=rf"t\.parquet, field '{re.escape(field)}'") as err:
            read_trace(path)
        assert "\n" not in str(err.value).strip(), err.value


@pytest.mark.parametrize("case", sorted(HOSTILE_COLUMNS))
def test_hostile_parquet_columns_are_refused_naming_the_field(case: str) -> None:
    hostile, field = HOSTILE_COLUMNS[case]
    _refused(_parquet(dict(PARQUET_FRAME) | hostile), field)


def test_parquet_times_as_dates_are_refused_naming_the_field() -> None:
    import datetime

    when = [datetime.datetime(2020, 1, 1), datetime.datetime(2020, 1, 2)]
    _refused(_parquet(dict(PARQUET_FRAME) | {"submit_s": when}), "submit_s")


@pytest.mark.parametrize(
    ("meta", "said"),
    [
        (b"not json", "unstall's metadata is not JSON"),
        (b"\xff\xfe", "unstall's metadata is not JSON"),
        (b"[1, 2]", "unstall's metadata is not a JSON object"),
        (b'{"submit_offset_s": "soon"}', "field 'metadata.submit_offset_s'"),
        (b'{"submit_offset_s": [1]}', "field 'metadata.submit_offset_s'"),
        (b'{"submit_offset_s": 1e999}', "field 'metadata.submit_offset_s'"),
        (b'{"skipped": [1, 2]}', "field 'metadata.skipped'"),
        (b'{"skipped": {"a": "many"}}', "field 'metadata.skipped'"),
        (b'{"notes": 5}', "field 'metadata.notes'"),
        (b'{"notes": [1, {"a": 2}]}', "field 'metadata.notes'"),
    ],
)
def test_hostile_parquet_metadata_is_refused_saying_what_is_wrong(meta: bytes, said: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.parquet"
        path.write_bytes(_parquet(PARQUET_FRAME, meta))
        with pytest.raises(TraceError, match=re.escape(said)) as err:
            read_trace(path)
        assert "t.parquet" in str(err.value) and "\n" not in str(err.value).strip()


def test_parquet_without_a_required_column_is_refused_and_one_without_rows_is_empty() -> None:
    without = {k: v for k, v in PARQUET_FRAME.items() if k != "num_gpus"}
    _refused(_parquet(without), "num_gpus")
    empty = {k: [] for k in ("job_id", "submit_s", "num_gpus", "duration_s")}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.parquet"
        path.write_bytes(_parquet(empty, None))
        assert len(read_trace(path)) == 0
