"""`unstall sim calibrate`: table, JSON, plot and errors, on a small file the model generated."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from unstall.cli.app import app
from unstall.workload import FittedParams, Placement, iteration_time

runner = CliRunner()
PARAMS = FittedParams(
    compute_fixed_s=0.02,
    compute_per_sample_s=0.001,
    intra_s_per_pass=0.03,
    intra_latency_ms=0.1,
    nic_s_per_pass=0.1,
    nic_latency_ms=1.0,
    overlap=0.3,
    gradient_bytes=None,
    intra_gbps=None,
    nic_gbps=None,
)


def _write(root: Path) -> None:
    lines = ["placement,local_bsz,step_time,sync_time"]
    for placement in ("1", "2", "3", "4", "11", "12", "22", "111", "112", "1111", "2222", "44"):
        for batch in (16, 32, 64):
            spec, topo = PARAMS.perf_model(batch)
            t = iteration_time(spec, Placement.parse(placement), topo).total_s
            lines.append(f"{placement},{batch},{t!r},0.0")
    (root / "toy").mkdir()
    (root / "toy" / "placements.csv").write_text("\n".join(lines) + "\n")


def test_calibrate_prints_table_and_writes_json_and_plot(tmp_path: Path) -> None:
    _write(tmp_path)
    out, png = tmp_path / "cal.json", tmp_path / "cal.png"
    args = ["sim", "calibrate", "--placements", str(tmp_path), "--folds", "3"]
    args += ["--json", str(out), "--plot", str(png), "--quiet"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "toy" in result.output and "overall" in result.output
    assert "Worst held-out point" in result.output
    data = json.loads(out.read_text())
    assert data["median_rel_error"] < 1e-3 and data["apps"][0]["app"] == "toy"
    assert {"max_rel_error", "baseline_median_rel_error", "worst"} <= set(data)
    config = json.loads((tmp_path / "cal.config.json").read_text())["config"]
    assert config["folds"] == 3 and config["placements"] == str(tmp_path)
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_calibrate_bad_input_is_one_red_line(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "placements.csv").write_text(
        "placement,local_bsz,step_time,sync_time\n1,32,oops,0\n"
    )
    result = runner.invoke(app, ["sim", "calibrate", "--placements", str(tmp_path)])
    assert result.exit_code == 1
    assert "line 2" in result.output and "step_time" in result.output
    empty = runner.invoke(app, ["sim", "calibrate", "--placements", str(tmp_path / "nowhere")])
    assert empty.exit_code == 1 and "no such directory" in empty.output
