"""The profiler's names: models, data and losses by name to objects; a bad name is one line
naming the parameter or the file."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from unstall.errors import ConfigError, DataFileError
from unstall.profile import ImageFileData, SyntheticBatches, UserData, write_image_dataset
from unstall.profile.names import (
    parse_variant,
    resolve_data,
    resolve_device,
    resolve_loss,
    resolve_model,
)
from unstall.usercode import UserCodeError
from unstall.workload import zoo

USER_CODE = """
import torch
from torch import nn


def model():
    return nn.Linear(3, 2)


def data(rank, world_size):
    yield torch.zeros(4, 3), torch.zeros(4, dtype=torch.long)


def loss(outputs, targets):
    return outputs.sum()
"""


@pytest.fixture
def user_file(tmp_path: Path) -> Path:
    path = tmp_path / "mine.py"
    path.write_text(USER_CODE, encoding="utf-8")
    return path


def test_zoo_models_and_variants() -> None:
    resnet = resolve_model("resnet18", image_size=64)
    assert (resnet.name, resnet.zoo_name, resnet.input_kind) == ("resnet18", "resnet18", "image")
    assert resnet.options == {"image_size": 64}
    assert isinstance(resnet.build, functools.partial)  # pickles by reference to the zoo
    mlp = resolve_model("mlp:depth=2,width=64")
    assert (mlp.name, mlp.options) == ("mlp", {"depth": 2, "width": 64})
    params = sum(p.numel() for p in mlp.build().parameters())
    assert params == zoo.facts("mlp", depth=2, width=64).params
    assert parse_variant("resnet:depth=34") == ("resnet", {"depth": 34})
    assert parse_variant("mobilenet_v2") == ("mobilenet_v2", {})
    for bad in ("nosuch", "resnet:depth", "resnet:colour=3"):
        with pytest.raises(ConfigError):
            parse_variant(bad)
    with pytest.raises(ConfigError, match="unknown model 'nosuch'"):
        resolve_model("nosuch")
    with pytest.raises(ConfigError, match=r"profile\.image_size"):
        resolve_model("resnet18", image_size=16)


def test_user_code_model_data_and_loss(user_file: Path) -> None:
    model = resolve_model(f"{user_file}:model")
    assert model.name == f"{user_file}:model" and model.zoo_name is None
    assert isinstance(model.build(), nn.Linear)
    data = resolve_data(f"{user_file}:data", model)
    assert isinstance(data, UserData) and data.label == f"{user_file}:data"
    loss = resolve_loss(f"{user_file}:loss")
    assert float(loss(torch.ones(2, 2), None)) == 4.0
    with pytest.raises(UserCodeError, match=r"mine\.py has no model function 'absent'"):
        resolve_model(f"{user_file}:absent")
    with pytest.raises(UserCodeError, match="no such file"):
        resolve_data(f"{user_file.parent / 'none.py'}:data", model)
    # A model of the user's own has no synthetic batches: the error says what to give instead.
    with pytest.raises(ConfigError, match=r"profile\.data: synthetic batches need a zoo model"):
        resolve_data(None, model)


def test_synthetic_and_image_folder_data(tmp_path: Path) -> None:
    resnet = resolve_model("resnet18")
    synthetic = resolve_data("synthetic", resnet, batch=3)
    assert isinstance(synthetic, SyntheticBatches)
    assert synthetic.memory_feed(0, 1, seed=0)(0)[0].shape == (3, 3, 32, 32)
    write_image_dataset(tmp_path, count=5, image_size=32, num_classes=2, seed=0)
    folder = resolve_data(str(tmp_path), resnet, batch=2)
    assert isinstance(folder, ImageFileData) and len(folder.paths) == 5
    assert folder.label == str(tmp_path) and isinstance(folder.memory, SyntheticBatches)
    with pytest.raises(ConfigError, match=r"profile\.data: .* mlp takes features"):
        resolve_data(str(tmp_path), resolve_model("mlp"))
    with pytest.raises(DataFileError, match="no such directory"):
        resolve_data(str(tmp_path / "none"), resnet)
    with pytest.raises(ConfigError, match=r"profile\.batch"):
        resolve_data(None, resnet, batch=0)


def test_losses_by_name() -> None:
    assert resolve_loss(None) is F.cross_entropy
    assert resolve_loss("mse") is F.mse_loss
    mine = nn.L1Loss()
    assert resolve_loss(mine) is mine
    with pytest.raises(
        ConfigError, match=r"profile\.loss: 'l1' is neither a loss \(cross_entropy, mse\)"
    ):
        resolve_loss("l1")


def test_device() -> None:
    assert resolve_device("cpu", workers_per_node=2) == "cpu"
    with pytest.raises(ConfigError, match="device"):
        resolve_device("tpu", workers_per_node=1)


def test_every_model_the_simulator_knows_is_profilable() -> None:
    from unstall.profile.job import model_shape
    from unstall.profile.names import profilable_models
    from unstall.workload.job_specs import APPLICATION_MODELS

    assert set(profilable_models()) == {*zoo.names(), *APPLICATION_MODELS}
    bert = resolve_model("bert")
    assert (bert.name, bert.zoo_name, bert.options["d_model"]) == ("bert", "transformer", 768)
    for name in profilable_models():  # built and run on the meta device: no memory, no time
        model = resolve_model(name)
        with torch.device("meta"):
            module = model.build()
        inputs, targets = resolve_data(None, model, batch=2).memory_feed(0, 1, seed=0)(0)
        outputs = module(inputs.to("meta"))
        loss = resolve_loss(None)(outputs, targets.to("meta"))
        assert loss.shape == () and model_shape(model.build).gradient_tensors > 0, name


def test_class_folder_data_for_a_model_of_ones_own(tmp_path: Path, user_file: Path) -> None:
    from PIL import Image

    for label in ("ant", "bee"):
        (tmp_path / "set" / label).mkdir(parents=True)
        Image.new("RGB", (50, 40)).save(tmp_path / "set" / label / "a.jpg")
    mine = resolve_model(f"{user_file}:model")
    data = resolve_data(str(tmp_path / "set"), mine, batch=2, workers=3, image_size=48)
    assert isinstance(data, ImageFileData) and data.memory is None
    assert (data.workers, data.image_size, data.images.classes) == (3, 48, ("ant", "bee"))
    assert "class folders, 2 files, 2 classes" in data.describe()
    assert "DataLoader by 3 workers" in data.describe()
    resnet = resolve_data(str(tmp_path / "set"), resolve_model("resnet18", image_size=64))
    assert isinstance(resnet, ImageFileData) and resnet.image_size == 64
    with pytest.raises(ConfigError, match=r"profile\.data_workers: DataLoader workers read"):
        resolve_data(f"{user_file}:data", mine, workers=2)


def test_a_sweep_of_ones_own_models_needs_and_takes_ones_own_data(user_file: Path) -> None:
    from unstall.profile import ProfileConfig, sweep_measure

    variants = [f"{user_file}:model", "mlp:depth=2"]
    with pytest.raises(ConfigError, match="synthetic batches need a zoo model"):
        sweep_measure(variants, ProfileConfig())
    measure = sweep_measure(variants, ProfileConfig(), data=f"{user_file}:data", loss="mse")
    assert callable(measure)  # every variant resolved; nothing profiled yet


def test_a_zoo_model_needs_an_output_for_every_class(tmp_path: Path) -> None:
    from PIL import Image

    for i in range(12):
        (tmp_path / f"c{i:02d}").mkdir()
        Image.new("RGB", (32, 32)).save(tmp_path / f"c{i:02d}" / "x.png")
    with pytest.raises(ConfigError, match="has 12 classes and resnet18 10 outputs"):
        resolve_data(str(tmp_path), resolve_model("resnet18:num_classes=10"))
    assert isinstance(resolve_data(str(tmp_path), resolve_model("resnet18")), ImageFileData)
