"""PSLD on Ray: the reference invariant through forced migrations and a scale-out and scale-in,
and the elastic fields of a psld run's result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ps_helpers import FAST_SCENARIO, TINY_MODEL, ScriptedController, tiny_run
from unstall.cli.app import app
from unstall.ps import ControllerConfig, PSLDStrategy
from unstall.ps.psld.controller import PSLDController
from unstall.ps.scenarios import Scenario

pytestmark = pytest.mark.usefixtures("ray_session")


def test_psld_matches_the_reference_through_migrations_and_scaling(
    ps_pool: Any, fast_scenario: Scenario
) -> None:
    controller = ScriptedController()
    controller.script_done = []

    def scripted(config: ControllerConfig) -> PSLDController:
        return controller

    r = tiny_run(
        fast_scenario,
        strategy=PSLDStrategy(make_controller=scripted),
        iterations=5,
        spares=1,
        check_reference=True,
        pool=ps_pool,
    )
    assert r.params_match_reference is True
    assert r.reference_max_rel_err is not None and r.reference_max_rel_err <= 1e-6
    assert (r.scale_outs, r.scale_ins) == (1, 1)
    assert len(r.elastic_events) == 5 and r.migrations >= 4  # a shuffle may move nothing
    assert r.servers_over_time == (4, 4, 3, 3, 3)
    assert r.max_pause_s > 0 and r.total_pause_s >= r.max_pause_s
    assert set(r.server_bytes) == {"1", "2", "3"}  # server 0 was drained and stopped
    # Every pause went back to the controller, whose hysteresis now predicts from them.
    assert controller.pauses.source() == "learned from 5 pause(s)"
    assert controller.pauses.start_s != controller.config.scale_out_cost_s


def test_ps_train_psld_writes_the_elastic_fields(tmp_path: Path) -> None:
    fast_scenario = tmp_path / "fast.json"
    fast_scenario.write_text(json.dumps(FAST_SCENARIO))
    out = tmp_path / "run.json"
    model = ["--model", "mlp"] + [a for k, v in TINY_MODEL.items() for a in ("-o", f"{k}={v}")]
    args = ["ps", "train", *model, "--scenario", str(fast_scenario), "--strategy", "psld"]
    args += ["--spares", "1", "--iterations", "4", "--quiet", "--json", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["strategy"] == "psld" and len(data["servers_over_time"]) == 4
    for key in ("migrations", "scale_outs", "scale_ins", "max_pause_s", "total_pause_s"):
        assert key in data
    # The tiny model's six whole-tensor chunks take ~1 ms an iteration: no move, and no extra
    # server, pays for itself.
    assert data["migrations"] == data["scale_outs"] == 0 and data["total_pause_s"] == 0
    assert data["servers_over_time"] == [3, 3, 3, 3]
    assert json.loads(out.with_name("run.config.json").read_text())["config"]["run"]["spares"] == 1
