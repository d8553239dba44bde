from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from unstall.cli.app import app
from unstall.traces import read_trace

runner = CliRunner()


def words(output: str) -> str:
    """The output with rich's line wrapping undone."""
    return " ".join(output.split())


def test_show_default_trace() -> None:
    result = runner.invoke(app, ["trace", "show"])
    assert result.exit_code == 0, result.output
    assert "GPU mix" in result.output
    assert "400" in result.output
    assert "p99" in result.output


def test_show_writes_json_and_config(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-09 07:00:00,60,1,60,vcA\n2017-10-09 08:00:00,120,4,480,vcB\n"
    )
    out = tmp_path / "summary.json"
    result = runner.invoke(app, ["trace", "show", str(path), "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["jobs"] == 2
    assert data["span_s"] == 3600.0
    assert data["gpu_mix"] == {"1": 0.5, "4": 0.5}
    assert data["total_gpu_hours"] == (60 + 480) / 3600
    config = json.loads((tmp_path / "summary.config.json").read_text())
    assert config["config"]["path"] == str(path)


def test_show_reports_bad_input_as_one_line(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text("timestamp,duration,num_gpus\n2017-10-09 07:00:00,-60,1\n")
    result = runner.invoke(app, ["trace", "show", str(path)])
    assert result.exit_code == 1
    assert "line 2" in words(result.output) and "field 'duration'" in words(result.output)
    assert "Traceback" not in result.output


def test_show_says_a_pretty_printed_json_document_is_not_a_trace(tmp_path: Path) -> None:
    path = tmp_path / "simulation_throughputs.json"
    path.write_text(json.dumps({"k80": {"('ResNet-18', 1)": {"null": 4.8}}}, indent=4))
    result = runner.invoke(app, ["trace", "show", str(path)])
    assert result.exit_code == 1
    text = words(result.output)
    assert f"{path}: not a trace: the whole file is one JSON object (keys 'k80')" in text
    assert "list of jobs" in text and "line 1" not in text and "Traceback" not in text


def test_convert_to_parquet_and_back(tmp_path: Path) -> None:
    source = tmp_path / "workload-1.csv"
    source.write_text(
        "name,time,application,num_replicas,batch_size\nncf-0,5,ncf,1,64\nbert-1,9,bert,4,12\n"
    )
    out = tmp_path / "w.parquet"
    result = runner.invoke(
        app, ["trace", "convert", str(source), "--out", str(out), "--duration-from", "midpoint"]
    )
    assert result.exit_code == 0, result.output
    assert "2 jobs (pollux -> unstall)" in words(result.output)
    back = read_trace(out)
    assert list(back.jobs["model"]) == ["ncf", "transformer"]
    assert back.submit_offset_s == 5.0


@pytest.mark.parametrize(
    ("extra", "option"),
    [
        (["--task-table", "tasks.csv"], "--task-table"),
        (["--duration-from", "midpoint"], "--duration-from"),
        (["--seed", "4"], "--seed"),
    ],
)
def test_an_option_of_another_format_is_refused_not_dropped(
    tmp_path: Path, extra: list[str], option: str
) -> None:
    source = tmp_path / "t.csv"
    source.write_text("job_id,submit_s,num_gpus,duration_s\na,0,1,10\n")
    out = tmp_path / "out.csv"
    result = runner.invoke(app, ["trace", "convert", str(source), "--out", str(out), *extra])
    assert result.exit_code == 2  # usage: an option that does not apply
    fmt = "pai" if option == "--task-table" else "pollux"
    text = words(result.output)
    assert f"is for {fmt} traces only; {source} is in the unstall format (option {option})" in text
    assert not out.exists()


def test_generate_is_reproducible(tmp_path: Path) -> None:
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    for out in (a, b):
        args = [
            "trace",
            "generate",
            "--jobs",
            "300",
            "--seed",
            "7",
            "--multi-gpu-share",
            "0.4",
            "--out",
            str(out),
        ]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
    assert a.read_text() == b.read_text()
    trace = read_trace(a)
    assert len(trace) == 300
    assert 0.3 < (trace.arrays().num_gpus > 1).mean() < 0.5


def test_generate_rejects_bad_config(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["trace", "generate", "--jobs", "0", "--out", str(tmp_path / "x.csv")]
    )
    assert result.exit_code == 2
    assert "SyntheticTraceConfig.jobs" in words(result.output)


def test_generate_refuses_an_arrival_rate_that_the_load_would_override(tmp_path: Path) -> None:
    out = tmp_path / "x.csv"
    args = ["trace", "generate", "-n", "10", "--out", str(out), "--load", "0.5"]
    result = runner.invoke(app, [*args, "--cluster-gpus", "8", "--arrivals-per-hour", "3"])
    assert result.exit_code == 2
    assert "load and cluster_gpus set the arrival rate" in words(result.output)
    assert "(option --arrivals-per-hour)" in words(result.output)
    assert not out.exists()


def test_formats_lists_every_reader() -> None:
    result = runner.invoke(app, ["trace", "formats"])
    assert result.exit_code == 0
    for name in ("philly-csv", "philly-json", "helios", "pai", "pollux", "unstall"):
        assert name in result.output


def test_generate_help_states_the_arrival_rate_default_once_and_rounded() -> None:
    shown = words(runner.invoke(app, ["trace", "generate", "--help"]).output)
    assert "(default: Philly's, 31.5)" in shown
    assert "31.4698" not in shown and "[default: 31" not in shown
