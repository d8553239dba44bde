"""The examples run as their docstrings say, at small sizes, so that they cannot rot:
examples/my_training.py is profiled from its own file (its own module, data function and loss),
and the JobProfile it writes drives the cost advisor and, converted to a GPU, the simulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from unstall.cli.app import app
from unstall.usercode import load_callable
from unstall.workload import JobProfile

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "my_training.py"
runner = CliRunner()


def test_my_training_is_profiled_and_drives_recommend_and_sim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in (("BATCH", "4"), ("IMAGE_SIZE", "16"), ("WIDTH", "4")):
        monkeypatch.setenv(f"MY_TRAINING_{name}", value)
    prof, trace = tmp_path / "tiny.json", tmp_path / "trace.json"
    args = ["profile", "run", "--model", f"{EXAMPLE}:make_model"]
    args += ["--data", f"{EXAMPLE}:make_data", "--loss", f"{EXAMPLE}:smoothed_cross_entropy"]
    args += ["--name", "tinyresnet", "--network", "1,0.5", "--iterations", "2", "--warmup", "1"]
    args += ["--repeats", "1", "--profile-out", str(prof), "--trace", str(trace)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "data: your data function" in result.output
    profile = JobProfile.from_json(prof)
    module = load_callable(f"{EXAMPLE}:make_model")()
    every = sum(p.numel() * p.element_size() for p in module.parameters())
    frozen = sum(p.numel() * p.element_size() for p in module.colour.parameters())
    assert (profile.parameter_bytes, profile.gradient_bytes) == (every, every - frozen)
    assert (profile.model, profile.device, profile.local_batch) == ("tinyresnet", "cpu", 4)
    assert profile.measured.keys() == {"1", "2", "11"}
    ranks = {e["pid"] for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"}
    assert ranks == {0, 1, 2}  # two ranks and the stalls' track

    question = ["recommend", "--profile", str(prof), "--samples", "50000", "--epochs", "30"]
    advice = runner.invoke(app, [*question, "--budget-hours", "2", "--max-instances", "2"])
    assert advice.exit_code in (0, 1), advice.output  # 1: nothing within the budget
    assert "CPU profile" in advice.output and "v100 x" in advice.output

    gpu = tmp_path / "tiny-v100.json"
    convert = ["profile", "convert", str(prof), "--gpu", "v100", "--out", str(gpu)]
    assert runner.invoke(app, convert).exit_code == 0
    sim = ["sim", "run", "--policy", "fifo", "--job-profile", str(gpu), "--max-jobs", "10"]
    simulated = runner.invoke(app, [*sim, "--model-mix", "tinyresnet=1", "--quiet"])
    assert simulated.exit_code == 0, simulated.output
    assert "fifo" in simulated.output
