"""`unstall sparse analyze`: tables, JSON with the required keys, density plot, errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from unstall.cli.app import app

runner = CliRunner()


@pytest.fixture(autouse=True)
def restore_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_analyze_writes_tables_json_and_plot(tmp_path: Path) -> None:
    out = tmp_path / "r18.json"
    args = ["sparse", "analyze", "--model", "resnet18", "--image-size", "32"]
    args += ["--batch-size", "2", "--steps", "1", "--warmup-steps", "1", "--array", "8x8"]
    args += ["--compare", "per-row:4,is/per-row", "--threads", "1", "--json", str(out), "--quiet"]
    args += ["--cache", str(tmp_path / "weights")]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "densities and predicted speed-ups per layer" in result.output
    assert "cycles per training step" in result.output
    assert "back-propagation speed-up over dense" in result.output
    assert "per-row depth 4" in result.output  # the comparison table
    assert "accuracy" in result.output
    data = json.loads(out.read_text())
    assert data["backprop_speedup_vs_dense"] >= 1.0
    assert data["speedup_vs_input_only"] >= 1.0
    assert data["array"] == "8x8 os" and data["skipping"] == "lockstep"
    layers = data["layers"]
    assert len(layers) == 21 and layers[0]["sparsity"]["name"] == "stem.0"
    first = layers[1]
    for key in ("input_density", "grad_density", "relu_grad_density", "known_zero_share"):
        assert 0.0 <= first["sparsity"][key] <= 1.0
    assert set(first["sparsity"]["gemms"]) == {"forward", "input_grad", "weight_grad"}
    assert {"forward_speedup", "backprop_speedup_vs_dense", "speedup_vs_input_only"} <= set(
        first["speed"]
    )
    first_other, second_other = data["comparisons"]
    assert first_other["accelerator"] == "8x8 os, per-row depth 4, bn=folded"
    assert (second_other["dataflow"], second_other["skipping"]) == ("is", "per-row unbounded")
    assert data["training"]["eval_accuracy"] is not None
    assert "convolutions only" in result.output
    # resnet18's only Linear layer is the classifier: the convolutions carry nearly all the work
    conv, whole = data["conv_summary"]["cycles"], data["summary"]["cycles"]
    assert 0.9 * whole["forward"]["dense"] < conv["forward"]["dense"] < whole["forward"]["dense"]
    assert len(list((tmp_path / "weights").glob("resnet18-32px-b2-*-step1.pt"))) == 1
    assert (tmp_path / "r18.densities.png").stat().st_size > 10_000
    config = json.loads((tmp_path / "r18.config.json").read_text())
    assert config["config"]["analyzer"]["model"] == "resnet18"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--array", "8by8"], "ROWSxCOLS"),
        (["--model", "lstm_lm"], "not an image CNN"),
        (["--skipping", "per-pe"], "skipping"),
        (["--lookahead", "4"], "per-row model only"),
        (["--compare", "ws/sideways"], "compare"),
        (["--bn-gradient", "maybe"], "bn_gradient"),
    ],
)
def test_analyze_bad_options_fail_with_one_line(extra: list[str], message: str) -> None:
    result = runner.invoke(app, ["sparse", "analyze", "--image-size", "32", *extra])
    assert result.exit_code == 2
    assert message in result.output


def test_analyze_a_users_model_that_fails_in_training_is_one_line(tmp_path: Path) -> None:
    code = tmp_path / "cnn.py"
    code.write_text(
        "from torch import nn\n"
        "def cnn_bad():\n"
        "    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(7, 10))\n",
        encoding="utf-8",
    )
    args = ["sparse", "analyze", "--model", f"{code}:cnn_bad", "--image-size", "32"]
    result = runner.invoke(app, [*args, "--steps", "1", "--batch-size", "2", "--quiet"])
    assert result.exit_code == 1, result.output
    assert result.output.count("error:") == 1 and "Traceback" not in result.output
    text = " ".join(result.output.split())  # the console wraps long lines
    assert f"model from model function cnn_bad ({code}:2) failed" in text
    assert "RuntimeError: mat1 and mat2 shapes cannot be multiplied" in text


def test_analyze_a_users_model_of_the_wrong_kind_or_class_count_is_named(tmp_path: Path) -> None:
    code = tmp_path / "cnn.py"
    code.write_text(
        "from torch import nn\n"
        "def five_classes():\n"
        "    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1),\n"
        "                         nn.Flatten(), nn.Linear(4, 5))\n"
        "def forgot_return():\n"
        "    nn.Linear(4, 5)\n",
        encoding="utf-8",
    )
    args = ["sparse", "analyze", "--image-size", "32", "--steps", "1", "--batch-size", "2", "-q"]
    result = runner.invoke(app, [*args, "--model", f"{code}:five_classes"])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    # The synthetic data has 10 classes: torch said only "IndexError: Target 7 is out of bounds".
    assert "gives outputs of shape (2, 5), not a score for each of the data's 10 classes" in text
    assert "its last layer must output 10 (option --model)" in text
    # More scores than classes train as they are (a model built for 1,000 ImageNet classes).
    folder = tmp_path / "images"
    for name in ("cats", "dogs"):
        (folder / name).mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (8, 8), (60 * i, 30, 90)).save(folder / name / f"{i}.png")
    extra = ["--model", f"{code}:five_classes", "--data", str(folder)]
    assert runner.invoke(app, [*args, *extra]).exit_code == 0
    result = runner.invoke(app, [*args, "--model", f"{code}:forgot_return"])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert f"model function forgot_return ({code}:5) returned None" in text


def test_analyze_a_model_without_convolutions_says_so_rather_than_nan(tmp_path: Path) -> None:
    code = tmp_path / "mlp.py"
    code.write_text(
        "from torch import nn\n"
        "def mlp():\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 16), nn.ReLU(),\n"
        "                         nn.Linear(16, 10))\n",
        encoding="utf-8",
    )
    args = ["sparse", "analyze", "--image-size", "32", "--steps", "1", "--batch-size", "2", "-q"]
    result = runner.invoke(app, [*args, "--model", f"{code}:mlp"])
    assert result.exit_code == 0, result.output
    assert "convolutions only: the model has no convolution" in result.output
    assert "nan" not in result.output
