"""`unstall sim models`: the zoo's facts as a table, one model's tensors, and --json."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from unstall.cli.app import app
from unstall.workload import zoo

runner = CliRunner()


def test_table_lists_every_model_with_its_published_size() -> None:
    result = runner.invoke(app, ["sim", "models"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    for name in zoo.names():
        assert any(line.split()[:1] == [name] for line in lines), name
    vgg16 = next(line for line in lines if line.startswith("vgg16 "))
    assert vgg16.split()[1:5] == ["vgg", "138.36", "553.4", "16"]
    resnet50 = next(line for line in lines if line.startswith("resnet50 "))
    assert resnet50.split()[2] == "25.56"


def test_json_writes_the_facts_of_every_model_and_the_config(tmp_path: Path) -> None:
    out = tmp_path / "zoo.json"
    result = runner.invoke(app, ["sim", "models", "--image-size", "64", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["image_size"] == 64
    assert [m["name"] for m in data["models"]] == zoo.names()
    for written in data["models"]:
        extra = {"image_size": 64} if written["input_kind"] == "image" else {}
        assert written == json.loads(zoo.facts(written["name"], **extra).to_json())
    config = json.loads((tmp_path / "zoo.config.json").read_text())
    assert config["config"] == {"image_size": 64, "model": None}


def test_one_model_shows_its_tensors_in_registration_order(tmp_path: Path) -> None:
    out = tmp_path / "r18.json"
    result = runner.invoke(app, ["sim", "models", "--model", "resnet18", "--json", str(out)])
    assert result.exit_code == 0, result.output
    facts = zoo.facts("resnet18")
    assert "11,689,512 parameters in 62 gradient tensors" in result.output
    rows = [line.split() for line in result.output.splitlines() if line.split()[:1] == ["0"]]
    assert rows == [["0", "stem.0.weight", "64x3x7x7", "9,408", "37,632"]]
    assert "fc.bias" in result.output
    data = json.loads(out.read_text())
    assert [m["name"] for m in data["models"]] == ["resnet18"]
    assert data["models"][0]["params"] == facts.params


def test_unknown_model_is_one_red_line_and_exit_2() -> None:
    result = runner.invoke(app, ["sim", "models", "--model", "resnet51"])
    assert result.exit_code == 2
    assert "unknown model 'resnet51'" in result.output
    assert "Traceback" not in result.output


def test_too_small_image_size_is_a_usage_error() -> None:
    result = runner.invoke(app, ["sim", "models", "--image-size", "16"])
    assert result.exit_code == 2
