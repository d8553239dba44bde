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
    assert result.exit_code == 2
    assert "field 'base.latency_ms'" in words(result.output)


def test_bad_model_option_and_strategy_are_usage_errors() -> None:
    result = runner.invoke(app, ["ps", "train", "-o", "width"])
    assert result.exit_code == 2 and "KEY=VALUE" in result.output
    result = runner.invoke(app, ["ps", "train", "--strategy", "hash"])
    assert result.exit_code == 2 and "strategy" in result.output


def test_scenarios_lists_the_presets() -> None:
    result = runner.invoke(app, ["ps", "scenarios"])
    assert result.exit_code == 0
    for name in ("none", "bandwidth", "interference", "imbalance", "dynamic", "mixed"):
        assert name in result.output


# --- the resolver ---------------------------------------------------------------------------------

USER_FILE = """
import torch
from torch import nn


def build():
    return nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 2))


def batches(rank, world_size):
    g = torch.Generator().manual_seed(rank)
    while True:
        x = torch.randn(4, 5, generator=g)
        yield x, (x.sum(1) > 0).long()


def bad_batches(rank, world_size):
    raise RuntimeError("no data here")
"""


@pytest.fixture
def user_file(tmp_path: Path) -> Path:
    path = tmp_path / "mine.py"
    path.write_text(USER_FILE)
    return path


def test_train_a_user_model_from_its_file(ray_session: Any, user_file: Path, fast: str) -> None:
    args = ["ps", "train", "--model", f"{user_file}:build", "--data", f"{user_file}:batches"]
    args += ["--scenario", fast, "--strategy", "psld", "-n", "3", "--check-reference", "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "matches reference yes" in words(result.output)
    args[args.index(f"{user_file}:batches")] = f"{user_file}:bad_batches"
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    text = words(result.output)
    assert "data function bad_batches" in text and "line 18" in text and "no data here" in text


def test_save_checkpoint_and_resume_from_the_command_line(
    ray_session: Any, fast: str, tmp_path: Path
) -> None:
    import torch

    from unstall.ps import PSCheckpoint
    from unstall.workload import zoo

    base = ["ps", "train", *MODEL_ARGS, "--scenario", fast, "--optimizer", "adam", "--lr", "0.01"]
    base += ["--weight-decay", "0.001", "-q"]
    whole = tmp_path / "whole.pt"
    result = runner.invoke(app, [*base, "-n", "5", "--save", str(whole)])
    assert result.exit_code == 0, result.output
    assert "optimizer adam" in words(result.output) and f"wrote {whole}" in words(result.output)
    ckpt = tmp_path / "run.ckpt"
    args = [*base, "-n", "3", "--checkpoint", str(ckpt), "--checkpoint-every", "2"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    saved = PSCheckpoint.load(ckpt)
    assert saved.iteration == 3 and saved.optimizer.weight_decay == 0.001
    resumed = tmp_path / "resumed.pt"
    args = ["ps", "train", *MODEL_ARGS, "--scenario", fast, "--resume", str(ckpt), "-n", "5"]
    result = runner.invoke(app, [*args, "--save", str(resumed), "--check-reference", "-q"])
    assert result.exit_code == 0, result.output
    text = words(result.output)
    assert "resumed at iteration 3" in text and "matches reference yes" in text
    model = zoo.build("mlp", **TINY_MODEL)
    model.load_state_dict(torch.load(resumed))
    for name, value in torch.load(whole).items():
        torch.testing.assert_close(model.state_dict()[name], value, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    ("args", "message", "code"),
    [
        (["--optimizer", "lamb"], "unknown optimizer 'lamb'; known: sgd, adam", 2),
        (["--optimizer", "adam", "--momentum", "0.5"], "momentum and nesterov are SGD's", 2),
        (["--momentum", "0", "--nesterov"], "nesterov: needs momentum > 0", 2),
        (
            ["--checkpoint-every", "2"],
            "ps.checkpoint_every: needs a checkpoint file to write to",
            2,
        ),
        (["--resume", "nowhere.ckpt"], "nowhere.ckpt: no such file", 1),
        (["--working-dir", "nowhere"], "working_dir: nowhere is not a folder", 2),
        (["--save", "."], "is a folder", 1),
        (["--save", "pyproject.toml/w.pt"], "pyproject.toml is a file, not a folder", 1),
    ],
)
def test_bad_run_options_fail_before_ray_in_one_line(
    args: list[str], message: str, code: int
) -> None:
    result = runner.invoke(app, ["ps", "train", *MODEL_ARGS, "-n", "2", *args])
    assert result.exit_code == code, result.output
    assert message in words(result.output)
    assert "Traceback" not in result.output


def test_bench_ships_the_working_dir_to_the_ray_it_connects_to(
    monkeypatch: pytest.MonkeyPatch, fast: str, tmp_path: Path
) -> None:
    import unstall.ps.runtime as runtime
    from unstall.errors import UnstallError

    calls: list[tuple[Any, Any]] = []

    def connect(address: Any, **options: Any) -> bool:  # stands in for Ray: nothing starts
        calls.append((address, options["runtime_env"]))
        raise UnstallError("connected: stop here")

    monkeypatch.setattr(runtime, "connect_ray", connect)
    folder = tmp_path / "code"
    folder.mkdir()
    args = ["ps", "bench", "--strategies", "psld", "--scenarios", fast, *MODEL_ARGS, "-n", "2"]
    args += ["--address", "127.0.0.1:6379", "--working-dir", str(folder), "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1 and "connected: stop here" in result.output, result.output
    assert calls == [("127.0.0.1:6379", {"working_dir": str(folder.resolve())})]
    # Without the option, no runtime environment.
    calls.clear()
    result = runner.invoke(app, args[: args.index("--working-dir")])
    assert calls == [("127.0.0.1:6379", None)], result.output


@pytest.mark.parametrize("command", ["train", "bench"])
def test_a_working_dir_that_is_no_folder_is_refused_before_ray(
    monkeypatch: pytest.MonkeyPatch, command: str, tmp_path: Path
) -> None:
    import unstall.ps.runtime as runtime

    def connect(*args: Any, **kwargs: Any) -> bool:
        raise AssertionError("Ray was used before the folder was checked")

    monkeypatch.setattr(runtime, "connect_ray", connect)
    base = ["ps", command, *MODEL_ARGS, "-n", "2"]
    if command == "bench":
        base += ["--strategies", "psld", "--scenarios", "none"]
    result = runner.invoke(app, [*base, "--working-dir", str(tmp_path / "nowhere")])
    assert result.exit_code == 2, result.output
    assert f"ps.working_dir: {tmp_path / 'nowhere'} is not a folder (nothing is there)" in words(
        result.output
    )
    code = tmp_path / "model.py"
    code.write_text("")
    result = runner.invoke(app, [*base, "--working-dir", str(code)])
    assert result.exit_code == 2, result.output
    assert (
        f"ps.working_dir: {code} is not a folder (a file: give the folder that holds your "
        f"modules, e.g. {tmp_path})" in words(result.output)
    )
    assert "Traceback" not in result.output


def fake_fit(stop: BaseException) -> Any:
    """``ps.fit`` that runs 3 iterations, hands out a checkpoint after 2, then raises ``stop``
    (no Ray: what the command says of it is under test)."""
    import numpy as np

    from unstall.ps import PSCheckpoint, SGDConfig

    def fit(*args: Any, on_checkpoint: Any, progress: Any, **kwargs: Any) -> Any:
        for iteration in range(3):
            progress(1)
            if iteration == 1 and on_checkpoint is not None:
                params = (np.zeros(3, np.float32),)
                on_checkpoint(
                    PSCheckpoint(iteration=2, params=params, state=(params,), optimizer=SGDConfig())
                )
        raise stop

    return fit


@pytest.mark.parametrize("with_checkpoint", [True, False])
def test_an_interrupted_train_says_how_far_it_got_and_what_it_kept(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, with_checkpoint: bool
) -> None:
    from unstall import ps

    monkeypatch.setattr(ps, "fit", fake_fit(KeyboardInterrupt()))
    ckpt = tmp_path / "run.ckpt"
    extra = ["--checkpoint", str(ckpt), "--checkpoint-every", "2"] if with_checkpoint else []
    result = runner.invoke(app, ["ps", "train", *MODEL_ARGS, "-n", "10", *extra, "-q"])
    assert result.exit_code == 130, result.output
    text = words(result.output)
    if with_checkpoint:
        assert ckpt.is_file()
        assert (
            f"interrupted: stopped after 3 of 10 iterations; the checkpoint {ckpt} holds "
            f"iteration 2: the same command with --resume {ckpt} goes on from it" in text
        )
    else:
        assert "interrupted: stopped after 3 of 10 iterations; nothing written" in text


def test_a_train_that_fails_after_a_checkpoint_says_it_is_kept(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from unstall import ps
    from unstall.usercode import UserCodeError

    monkeypatch.setattr(ps, "fit", fake_fit(UserCodeError("worker 1: data function d failed")))
    ckpt = tmp_path / "run.ckpt"
    args = ["ps", "train", *MODEL_ARGS, "-n", "10", "--checkpoint", str(ckpt), "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert result.output.count("error:") == 1
    assert (
        f"error: worker 1: data function d failed; the checkpoint {ckpt} holds iteration 2: the "
        f"same command with --resume {ckpt} goes on from it" in words(result.output)
    )
    # Without a checkpoint, the error as it is.
    result = runner.invoke(app, args[: args.index("--checkpoint")])
    assert "error: worker 1: data function d failed" in words(result.output)
    assert "checkpoint" not in result.output


def test_a_corrupt_checkpoint_to_resume_is_one_line_without_torchs_advice(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pt"
    bad.write_text("garbage\n")
    result = runner.invoke(app, ["ps", "train", *MODEL_ARGS, "-n", "5", "--resume", str(bad)])
    assert result.exit_code == 1, result.output
    assert result.output.count("error:") == 1 and "Traceback" not in result.output
    text = words(result.output)
    assert f"{bad}: not a readable checkpoint of `unstall ps`: Unsupported operand" in text
    assert "weights_only" not in text and "file an issue" not in text


def test_the_json_is_written_before_the_plot_and_names_the_cluster_joined(
    ray_session: Any, fast: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import unstall.report.ps_plot as ps_plot

    def disk_full(*args: object) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ps_plot, "plot_run", disk_full)
    # the cluster came from RAY_ADDRESS (here the session's own Ray): the record says which
    gcs = ray_session.get_runtime_context().gcs_address
    monkeypatch.setenv("RAY_ADDRESS", gcs)
    out, png = tmp_path / "run.json", tmp_path / "run.png"
    args = ["ps", "train", *MODEL_ARGS, "--scenario", fast, "--iterations", "2"]
    result = runner.invoke(app, [*args, "--json", str(out), "--plot", str(png)])
    assert result.exit_code != 0 and "No space left on device" in result.output
    assert json.loads(out.read_text())["iterations"] == 2  # the run's result is not lost
    config = json.loads(out.with_name("run.config.json").read_text())
    assert config["config"]["run"]["address"] == gcs
