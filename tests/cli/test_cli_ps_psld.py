"""`unstall ps train --strategy psld` from the shell: the elastic fields of the result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ps_helpers import FAST_SCENARIO, TINY_MODEL
from unstall.cli.app import app

pytestmark = pytest.mark.usefixtures("ray_session")


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
