"""`unstall sim run` charges start-ups and restores by a start-up model (the package's by
default, scaled by --speedup; a file; or none), and `unstall live calibrate` fits one on live
runs' JSON."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from unstall.cli.app import app
from unstall.net import resolve_cluster
from unstall.sched import make_policy
from unstall.sim import StartupModel, default_startup_model, simulate
from unstall.traces import default_trace

RUN = ["sim", "run", "--policy", "tiresias", "--cluster", "tiny", "--max-jobs", "30", "-q"]


def _run(tmp_path: Path, name: str, *extra: str) -> dict[str, float]:
    out = tmp_path / f"{name}.json"
    res = CliRunner().invoke(app, [*RUN, "--json", str(out), *extra])
    assert res.exit_code == 0, res.output
    assert ("start-ups and restores:" in res.output) != ("none" in extra), res.output
    body: dict[str, float] = json.loads(out.read_text())
    return body


def test_sim_run_charges_the_packages_model_at_the_speedup_given(tmp_path: Path) -> None:
    trace, cluster = default_trace(), resolve_cluster("tiny")
    model = default_startup_model().for_speedup(20.0)
    expected = simulate(trace, cluster, make_policy("tiresias"), max_jobs=30, startup_model=model)
    charged = _run(tmp_path, "model", "--speedup", "20")
    assert charged["avg_jct_s"] == expected.result.avg_jct_s
    # --startup-model none: start-up 0, restore 60 s, as simulate() charges by default.
    plain = simulate(trace, cluster, make_policy("tiresias"), max_jobs=30).result
    assert _run(tmp_path, "none", "--startup-model", "none")["avg_jct_s"] == plain.avg_jct_s
    assert charged["avg_jct_s"] != plain.avg_jct_s
    config = json.loads((tmp_path / "model.config.json").read_text())["config"]["sim"]
    assert config["startup_model"] == "default" and config["speedup"] == 20.0


def test_live_calibrate_fits_a_model_that_sim_run_takes(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    runs = []
    for i in range(2):
        rows = []
        for j in range(12):
            gpus = int(rng.choice([1, 2, 4, 8]))
            nodes = 2 if gpus == 8 else 1
            wall = 0.3 + 0.5 * (nodes - 1) + rng.uniform(0, 0.02)
            kind = "restore" if j % 3 == 0 else "startup"
            rows.append(
                {"job_id": f"j{j}", "model": "resnet50", "kind": kind, "placement": "0:1",
                 "gpus": gpus, "nodes": nodes, "racks": 1, "setup_wall_s": wall}
            )  # fmt: skip
        path = tmp_path / f"run{i}.json"
        path.write_text(json.dumps({"result": {}, "live": {"compute": "emulated"}, "setups": rows}))
        runs.append(str(path))
    out = tmp_path / "fitted.json"
    res = CliRunner().invoke(app, ["live", "calibrate", *runs, "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "start-up" in res.output and "restore" in res.output
    model = StartupModel.load(out)
    assert model.startup.samples == 16 and model.restore.samples == 8
    assert abs(model.startup.per_node_s - 0.5) < 0.05
    assert "run0.json" in model.source and model.command.startswith("unstall live calibrate")
    _run(tmp_path, "fitted", "--startup-model", str(out))
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"result": {}, "live": {}}))
    res = CliRunner().invoke(app, ["live", "calibrate", str(old), "--out", str(out)])
    assert res.exit_code == 1 and "setups" in res.output
