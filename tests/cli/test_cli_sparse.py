"""`unstall sparse lstm-bench` and `lstm-train` at tiny sizes: tables, JSON, clear errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from unstall.cli.app import app

runner = CliRunner()


@pytest.fixture(autouse=True)
def restore_torch_threads():  # type: ignore[no-untyped-def]
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)  # the commands set --threads for the whole process


def test_lstm_bench_writes_step_times_per_mode(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    args = ["sparse", "lstm-bench", "--hidden", "16", "--batch", "4", "--p", "0.5",
            "--seq-len", "3", "--repeats", "2", "--threads", "1", "--json", str(out)]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "structured" in result.output and "nn.LSTM" in result.output
    data = json.loads(out.read_text())
    assert set(data["step_s"]) == {
        "standard",
        "locked",
        "structured",
        "structured-window",
        "nn.LSTM",
    }
    assert all(v > 0 for v in data["step_s"].values())
    expected = data["step_s"]["standard"] / data["step_s"]["structured"]
    assert data["speedup_structured_vs_standard"] == pytest.approx(expected)
    assert all(len(v) == 2 for v in data["samples_s"].values())
    config = json.loads(out.with_name("bench.config.json").read_text())
    assert config["config"]["hidden"] == 16


def test_lstm_train_on_penn_treebank_tiny(tmp_path: Path) -> None:
    out = tmp_path / "train.json"
    args = ["sparse", "lstm-train", "--mode", "structured", "--p", "0.3", "--hidden", "8",
            "--layers", "1", "--batch", "16", "--max-batches", "2", "--max-eval-batches", "2",
            "--threads", "1", "--input-mask-steps", "5", "--decoder-mask-steps", "35",
            "--checkpoint", str(tmp_path / "run.pt"), "--json", str(out)]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "test perplexity" in result.output and "truncated run" in result.output
    assert (tmp_path / "run.pt").is_file()
    config = json.loads(out.with_name("train.config.json").read_text())["config"]
    assert (config["input_mask_steps"], config["decoder_mask_steps"]) == (5, 35)
    data = json.loads(out.read_text())
    assert data["vocab"] == 10_000 and data["train_tokens"] == 929_589
    (epoch,) = data["epochs"]
    assert 1 < epoch["valid_ppl"] < 1e6 and math.isfinite(data["test_ppl"])
    assert epoch["train_s"] > 0


def test_bad_mode_or_p_is_one_red_line() -> None:
    result = runner.invoke(app, ["sparse", "lstm-bench", "--hidden", "8", "--modes", "dense"])
    assert result.exit_code == 2
    assert "unknown mode 'dense'" in result.output
    result = runner.invoke(app, ["sparse", "lstm-train", "--p", "1.0"])
    assert result.exit_code == 2
    assert "LMConfig.p" in result.output


@pytest.mark.parametrize("command", ["lstm-bench", "lstm-train"])
def test_an_unknown_mask_source_is_one_red_line(command: str) -> None:
    result = runner.invoke(app, ["sparse", command, "--mask-source", "gpu"])
    assert result.exit_code == 2
    assert "mask_source" in result.output and "'gpu'" in result.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
@pytest.mark.parametrize("command", ["lstm-train", "lstm-bench"])
def test_cuda_without_a_gpu_is_refused_before_any_work(command: str) -> None:
    result = runner.invoke(app, ["sparse", command, "--device", "cuda"])
    assert result.exit_code == 2
    assert ".device" in result.output and "torch sees no CUDA device" in result.output


def test_lstm_train_from_a_corrupt_checkpoint_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pt"
    bad.write_text("garbage\n")
    args = ["sparse", "lstm-train", "--checkpoint", str(bad), "--max-batches", "1", "--hidden", "8"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert result.output.count("error:") == 1 and "Traceback" not in result.output
    text = " ".join(result.output.split())
    assert f"{bad}: not a readable checkpoint of an LSTM run: Unsupported operand" in text
    assert "weights_only" not in text and "file an issue" not in text
