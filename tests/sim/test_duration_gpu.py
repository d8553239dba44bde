"""The GPU type a trace's durations are run times on (issue #38 item 1): the trace's own
``gpu_type`` column, else ``v100``, never the cluster's own GPUs, so that a slower cluster makes
the same jobs slower; ``duration_gpu`` overrides both."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from unstall.net import TopologyConfig, load_topology
from unstall.sim import simulate
from unstall.sim.duration_gpu import DEFAULT_DURATION_GPU, duration_gpus
from unstall.traces import Trace, TraceError, default_trace, read_trace

NETWORK = 'nic = "25g"\noversubscription = 2.0\n'


def cluster(tmp_path: Path, name: str, body: str) -> TopologyConfig:
    path = tmp_path / f"{name}.toml"
    path.write_text(NETWORK + body)
    return load_topology(path)


def groups(v100_nodes: int, k80_nodes: int, v100_type: str = "v100", k80_type: str = "k80") -> str:
    """The issue's cluster: nodes of 8 V100s and nodes of 4 K80s (either type replaceable)."""
    return (
        f'[[nodes]]\ncount = {v100_nodes}\ngpus_per_node = 8\ndevice = "{v100_type}"\nrack = 0\n'
        f'[[nodes]]\ncount = {k80_nodes}\ngpus_per_node = 4\ndevice = "{k80_type}"\nrack = 1\n'
    )


def one_job(gpu_type: str | None, duration_s: float = 1000.0) -> Trace:
    frame = pd.DataFrame(
        {"job_id": ["a"], "submit_s": [0.0], "num_gpus": [1], "duration_s": [duration_s]}
    )
    frame["model"] = "resnet50"
    if gpu_type is not None:
        frame["gpu_type"] = gpu_type
    return Trace.from_frame(frame)


def test_replacing_every_gpu_by_a_slower_one_makes_jobs_slower(tmp_path: Path) -> None:
    # The check: 4 nodes of 8 V100 + 4 of 4 K80, and the same file all V100 or all K80.
    mixed = cluster(tmp_path, "mixed", groups(4, 4))
    v100 = cluster(tmp_path, "v100", groups(4, 4, k80_type="v100"))
    k80 = cluster(tmp_path, "k80", groups(4, 4, v100_type="k80"))
    jct = {
        c.name: simulate(default_trace(), c, "fifo", max_jobs=150).result.avg_jct_s
        for c in (v100, mixed, k80)
    }
    assert jct["v100"] < jct["mixed"] < jct["k80"], jct
    assert jct["k80"] > 2 * jct["v100"], jct


def test_a_regular_k80_cluster_is_slower_than_a_v100_one_by_default(tmp_path: Path) -> None:
    regular = "racks = 2\nnodes_per_rack = 4\ngpus_per_node = 4\n"
    jct = {
        gpu: simulate(
            default_trace(),
            cluster(tmp_path, gpu, regular + f'device = "{gpu}"\n'),
            "fifo",
            max_jobs=100,
        ).result.avg_jct_s
        for gpu in ("v100", "k80")
    }
    assert jct["k80"] > 2 * jct["v100"], jct


def test_a_job_alone_on_its_gpu_has_no_communication_overhead_on_any_type(
    tmp_path: Path,
) -> None:
    # Its overhead is measured against its consolidated time on the type it runs on, not on
    # the duration GPU: a 1-GPU job neither gains overhead on a K80 nor "saves" it on an H200.
    mixed = cluster(tmp_path, "mixed", groups(1, 1, v100_type="h200"))
    for name, topology in (
        (
            "h200",
            cluster(
                tmp_path,
                "h200",
                'racks = 1\nnodes_per_rack = 1\ngpus_per_node = 1\ndevice = "h200"\n',
            ),
        ),
        (
            "k80",
            cluster(
                tmp_path,
                "k80",
                'racks = 1\nnodes_per_rack = 2\ngpus_per_node = 4\ndevice = "k80"\n',
            ),
        ),
        ("mixed", mixed),
    ):
        jobs = simulate(one_job(None), topology, "fifo").jobs
        assert jobs.comm_overhead_s.abs().max() < 1e-9, (name, jobs.comm_overhead_s.tolist())


def test_the_traces_column_sets_the_reference_and_duration_gpu_overrides_it(
    tmp_path: Path,
) -> None:
    k80 = cluster(
        tmp_path, "k80", 'racks = 1\nnodes_per_rack = 1\ngpus_per_node = 4\ndevice = "k80"\n'
    )
    # Measured on a K80, run on a K80: the job takes its duration, to the float.
    on_k80 = simulate(one_job("k80"), k80, "fifo").jobs
    assert on_k80["jct_s"].iloc[0] == pytest.approx(1000.0, rel=1e-9)
    # Measured on a V100 (the column, or the default): a K80 takes several times longer.
    for trace in (one_job("v100"), one_job(None)):
        assert simulate(trace, k80, "fifo").jobs["jct_s"].iloc[0] > 3000.0
    # duration_gpu wins over the column.
    forced = simulate(one_job("v100"), k80, "fifo", duration_gpu="k80").jobs
    assert forced["jct_s"].iloc[0] == pytest.approx(1000.0, rel=1e-9)


def test_jobs_of_one_trace_may_name_different_types(tmp_path: Path) -> None:
    k80 = cluster(
        tmp_path, "k80", 'racks = 1\nnodes_per_rack = 2\ngpus_per_node = 4\ndevice = "k80"\n'
    )
    frame = pd.DataFrame(
        {
            "job_id": ["on-k80", "on-v100", "unsaid"],
            "submit_s": [0.0, 0.0, 0.0],
            "num_gpus": [1, 1, 1],
            "duration_s": [1000.0, 1000.0, 1000.0],
            "model": ["resnet50"] * 3,
            "gpu_type": ["K80", "v100", None],  # names are case-blind
        }
    )
    trace = Trace.from_frame(frame)
    reference = duration_gpus(trace)
    assert reference.per_job == ("k80", "v100", DEFAULT_DURATION_GPU)
    assert "jobs k80 1, v100 2" in reference.describe()
    jct = simulate(trace, k80, "fifo").jobs.set_index("job_id")["jct_s"]
    assert jct["on-k80"] == pytest.approx(1000.0, rel=1e-9)
    assert jct["on-v100"] == pytest.approx(jct["unsaid"]) and jct["on-v100"] > 3000.0


def test_where_the_reference_comes_from_is_said() -> None:
    assert duration_gpus(default_trace()).gpu == "v100"
    assert "the default" in duration_gpus(default_trace()).describe()
    assert "the trace's gpu_type column" in duration_gpus(one_job("p40")).describe()
    assert (
        duration_gpus(one_job("p40"), "a100")
        .describe()
        .startswith("durations are run times on a100 (duration_gpu")
    )


def test_philly_readers_declare_philly_gpus(tmp_path: Path) -> None:
    path = tmp_path / "philly.csv"
    path.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-03 10:00:00,100,1,100,vc1\n2017-10-03 10:01:00,200,2,400,vc2\n"
    )
    trace = read_trace(path, "philly-csv")
    assert trace.gpu_types() == ("p40",)
    assert duration_gpus(trace).gpu == "p40"


def test_a_bad_gpu_type_is_named_with_its_row_and_field(tmp_path: Path) -> None:
    with pytest.raises(TraceError) as err:
        one_job("v 100")
    assert err.value.field == "gpu_type" and "row 1 (job 'a')" in str(err.value)
    path = tmp_path / "jobs.csv"
    path.write_text(
        "job_id,submit_s,num_gpus,duration_s,model,gpu_type\n"
        "a,0,1,100,resnet50,v100\nb,5,1,100,resnet50,z80\n"
    )
    trace = read_trace(path)
    with pytest.raises(TraceError) as err:
        simulate(trace, "small", "fifo")
    assert err.value.field == "gpu_type" and "'z80'" in str(err.value)
    assert "jobs.csv" in str(err.value) and "job 'b'" in str(err.value)
    # Written back, the column survives; a trace that names no type writes no such column.
    from unstall.traces import write_trace

    out = write_trace(one_job("p40"), tmp_path / "out.csv")
    assert read_trace(out).gpu_types() == ("p40",)
    assert "gpu_type" not in write_trace(one_job(None), tmp_path / "none.csv").read_text()


def test_job_views_carry_each_types_speed_as_the_job_would_run_there(tmp_path: Path) -> None:
    from unstall.net import relative_speed
    from unstall.sim.jobs import build_jobs
    from unstall.sim.perf_speed import PerfSpeedModel

    mixed = cluster(tmp_path, "mixed", groups(4, 4))
    jobs = build_jobs(
        job_ids=["one", "eight"],
        submit_s=[0.0, 0.0],
        num_gpus=[1, 8],
        duration_s=[100.0, 100.0],
        models=["resnet50", "alexnet"],
        speed=PerfSpeedModel(mixed),
    )
    one, eight = (job.make_view(False) for job in jobs)
    assert one.speed_on("v100") == pytest.approx(1.0)
    assert one.speed_on("k80") == pytest.approx(relative_speed("k80", "resnet50"), rel=1e-6)
    # Eight GPUs fill one V100 node but two K80 nodes: the K80 speed pays the network too.
    assert eight.speed_on("v100") == pytest.approx(1.0)
    assert eight.speed_on("k80") < 0.5 * relative_speed("k80", "resnet50")
    assert one.speed_on("a100", default=-1.0) == -1.0
