from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ps_helpers import FAST_SCENARIO, TINY_MODEL
from unstall.cli.app import app

runner = CliRunner()
MODEL_ARGS = ["--model", "mlp"] + [a for k, v in TINY_MODEL.items() for a in ("-o", f"{k}={v}")]


def words(output: str) -> str:
    return " ".join(output.split())


@pytest.fixture
def fast(tmp_path: Path) -> str:
    path = tmp_path / "fast.json"
    path.write_text(json.dumps(FAST_SCENARIO))
    return str(path)


def test_train_prints_and_writes_the_result(ray_session: Any, fast: str, tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    args = ["ps", "train", *MODEL_ARGS, "--scenario", fast, "--strategy", "oracle"]
    args += ["--iterations", "3", "--workers", "2", "--check-reference", "--json", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    text = words(result.output)
    assert "matches reference yes" in text and "throughput" in text
    data = json.loads(out.read_text())
    for key in ("strategy", "iterations", "throughput_it_s", "mean_iter_s", "server_bytes"):
        assert key in data
    assert data["strategy"] == "oracle" and data["iterations"] == 3
    assert data["params_match_reference"] is True
    assert data["loss_first"] > 0 and data["loss_last"] > 0
    assert len(data["server_bytes"]) == 3 and len(data["telemetry"]) == 3
    transfers = data["telemetry"][-1]["workers"][0]["transfers"]
    assert {t["server"] for t in transfers} <= {0, 1, 2} and transfers[0]["push_pull_s"] > 0
    config = json.loads(out.with_name("run.config.json").read_text())
    assert config["config"]["scenario"]["servers"] == 3


def test_bench_runs_the_grid_with_oracle_ratios(
    ray_session: Any, fast: str, tmp_path: Path
) -> None:
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    args = ["ps", "bench", "--strategies", "tf-greedy,psld", "--scenarios", fast, "--spares", "1"]
    args += [*MODEL_ARGS, "--iterations", "2", "--json", str(out), "--plot", str(png)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = json.loads(out.read_text())["results"]
    assert [r["strategy"] for r in rows] == ["tf-greedy", "psld", "oracle"]
    elastic = {"servers_over_time", "migrations", "scale_outs", "scale_ins", "max_pause_s"}
    for r in rows:
        assert set(r) >= {"scenario", "strategy", "model", "throughput_it_s", "mean_iter_s"}
        assert set(r) >= elastic | {"total_pause_s"}
        assert r["scenario"] == "fast" and r["model"] == "mlp" and r["throughput_it_s"] > 0
        assert r["servers_over_time"] == [3, 3]  # the tiny model: no move pays (test_psld)
        assert r["migrations"] == r["scale_outs"] == r["scale_ins"] == 0
    assert rows[-1]["ratio_to_oracle"] == 1.0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "vs oracle" in result.output and "migr." in result.output


def test_bad_scenario_file_names_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[base]\nlatency_ms = -3\n")
    result = runner.invoke(app, ["ps", "train", "--scenario", str(bad)])
    assert result.exit_code == 1
    assert "field 'base.latency_ms'" in words(result.output)


def test_bad_model_option_and_strategy_are_usage_errors() -> None:
    result = runner.invoke(app, ["ps", "train", "-o", "width"])
    assert result.exit_code == 1 and "KEY=VALUE" in result.output
    result = runner.invoke(app, ["ps", "train", "--strategy", "hash"])
    assert result.exit_code == 1 and "strategy" in result.output


def test_scenarios_lists_the_presets() -> None:
    result = runner.invoke(app, ["ps", "scenarios"])
    assert result.exit_code == 0
    for name in ("none", "bandwidth", "interference", "imbalance", "dynamic", "mixed"):
        assert name in result.output
