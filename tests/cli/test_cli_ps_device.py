"""`unstall ps train/bench --device`: the option's help, and its refusal on a Ray cluster
without GPUs (the device's own rules are tested in tests/ps/test_device.py)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from unstall.cli.app import app

without_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a GPU")


@without_gpu
def test_the_command_refuses_cuda_without_gpus(ray_session: Any) -> None:
    result = CliRunner().invoke(app, ["ps", "train", "--device", "cuda", "-n", "2"])
    assert result.exit_code == 2, result.output
    assert "needs a GPU per worker (2 workers); this Ray cluster has 0 GPUs" in " ".join(
        result.output.split()
    )


def test_the_commands_document_the_device() -> None:
    for command in ("train", "bench"):
        result = CliRunner().invoke(app, ["ps", command, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0
        text = " ".join(result.output.split())
        assert "--device" in text and "GPU per worker" in text
