"""The sparsity analyser's names: array and accelerator specs, zoo names and user code, image
folders."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from unstall.errors import ConfigError, DataFileError
from unstall.sparse.cnn import AcceleratorConfig, ArrayConfig
from unstall.sparse.cnn import names as resolve
from unstall.usercode import UserCodeError


def test_array_specs() -> None:
    assert resolve.array_config("32x16", "ws") == ArrayConfig(rows=32, cols=16, dataflow="ws")
    with pytest.raises(ConfigError, match=r"analyze\.array: must look like ROWSxCOLS"):
        resolve.array_config("32by16")
    with pytest.raises(ConfigError, match="dataflow"):
        resolve.array_config("8x8", "xs")


def test_accelerator_specs() -> None:
    base = AcceleratorConfig(array=ArrayConfig(rows=16, cols=8), bn_gradient="exact")
    ws = resolve.accelerator("ws/per-row:16", base)
    assert (ws.array.dataflow, ws.skipping, ws.lookahead) == ("ws", "per-row", 16)
    assert (ws.array.rows, ws.array.cols, ws.bn_gradient) == (16, 8, "exact")
    assert ws.label == "16x8 ws, per-row depth 16, bn=exact"
    unbounded = resolve.accelerator("per-row:inf", base)
    assert unbounded.lookahead is None and unbounded.array.dataflow == "os"
    assert resolve.accelerator("is/lockstep", base).skipping_label == "lockstep"
    assert resolve.accelerators(" , ws/lockstep,", base)[0].array.dataflow == "ws"
    assert resolve.accelerators("", base) == ()
    for bad in ("per-pe", "lockstep:8", "xs/lockstep", "per-row:x"):
        with pytest.raises(ConfigError, match=r"compare|dataflow"):
            resolve.accelerator(bad, base)


def test_zoo_models_are_checked_at_the_edge() -> None:
    build = resolve.cnn_model("resnet18", image_size=32, num_classes=7)
    assert build().eval()(torch.zeros(1, 3, 32, 32)).shape == (1, 7)
    with pytest.raises(ConfigError, match=r"analyze\.model: lstm_lm is not an image CNN"):
        resolve.cnn_model("lstm_lm", image_size=32, num_classes=10)
    with pytest.raises(ConfigError, match="unknown model 'resnet17'"):
        resolve.cnn_model("resnet17", image_size=32, num_classes=10)
    with pytest.raises(ConfigError, match="image_size"):
        resolve.cnn_model("resnet18", image_size=16, num_classes=10)
    assert isinstance(resolve.cnn_loss("resnet18"), nn.CrossEntropyLoss)


def test_user_code_model_functions(tmp_path: Path) -> None:
    path = tmp_path / "mine.py"
    path.write_text(
        "from torch import nn\n"
        "def small():\n"
        "    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())\n"
        "def broken():\n"
        "    raise RuntimeError('no weights here')\n"
    )
    assert isinstance(resolve.cnn_model(f"{path}:small", image_size=8, num_classes=2)(), nn.Module)
    assert resolve.cnn_loss(f"{path}:small") is None  # the analyser's cross-entropy
    broken = resolve.cnn_model(f"{path}:broken", image_size=8, num_classes=2)
    with pytest.raises(UserCodeError, match=r"mine\.py"):
        broken()
    with pytest.raises(UserCodeError, match="missing"):
        resolve.cnn_model(f"{path}:missing", image_size=8, num_classes=2)


def test_image_folders_are_read_here(tmp_path: Path) -> None:
    assert resolve.image_source(None, 32) is None
    with pytest.raises(DataFileError, match="no such folder"):
        resolve.image_source(str(tmp_path / "missing"), 32)


@pytest.mark.slow
def test_analyze_cnn_takes_a_zoo_cnn_by_name() -> None:
    from unstall.sparse.cnn import AnalyzerConfig, CNNSparsityConfig, analyze_cnn

    config = CNNSparsityConfig(
        analyzer=AnalyzerConfig(
            model="resnet18", image_size=32, batch_size=2, steps=1, warmup_steps=0
        ),
        accelerator=AcceleratorConfig(array=ArrayConfig(rows=8, cols=8)),
    )
    result = analyze_cnn("resnet18", config=config)
    assert result.model == "resnet18" and result.image_size == 32
    assert any(r.sparsity.kind == "conv" for r in result.layers)
