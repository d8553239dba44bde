"""The CNN sparsity analyser: densities on hand-made nets, ReLU-mask subsets, im2col GEMM shapes,
the data sources and the training run."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from unstall.errors import ConfigError, DataFileError
from unstall.sparse.cnn import (
    AnalyzerConfig,
    FolderImages,
    PatternConfig,
    PatternImages,
    profile_training,
    record_step,
)
from unstall.sparse.cnn.densities import summarize
from unstall.sparse.cnn.gemms import GemmShape, gemm_shapes, geometry_of, im2col_mask
from unstall.sparse.cnn.recording import out_of_place
from unstall.sparse.cnn.training import checkpoint_key, checkpoint_prefix
from unstall.usercode import UserCodeError
from unstall.workload import zoo


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Small tensors: one torch thread is faster than two fighting over a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _sum_loss(out: torch.Tensor, _: torch.Tensor) -> torch.Tensor:
    return out.sum()


def _zoo_model(name: str, image_size: int = 32, num_classes: int = 10) -> Callable[[], nn.Module]:
    """A model function for the zoo model ``name`` (what the CLI's resolver hands over)."""
    return lambda: zoo.build(name, image_size=image_size, num_classes=num_classes)


def _tiny_relu_net() -> nn.Sequential:
    """1 -> 2 channels with weights +1 and -1, ReLU, then 2 -> 1 channel summing both."""
    net = nn.Sequential(nn.Conv2d(1, 2, 1, bias=False), nn.ReLU(), nn.Conv2d(2, 1, 1, bias=False))
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([1.0, -1.0]).reshape(2, 1, 1, 1))
        net[2].weight.fill_(1.0)
    return net


def test_densities_match_hand_computed_values() -> None:
    x = torch.tensor([[1.0, -2.0], [3.0, 0.0]]).reshape(1, 1, 2, 2)
    _, _, records = record_step(_tiny_relu_net(), x, torch.zeros(1), _sum_loss)
    first, second = summarize(records)
    # conv1 sees x: one zero of four. Its outputs are x and -x; the ReLU keeps 1, 3 and 2: the
    # gradient reaching the ReLU input is 1 there and 0 at the other 5 of 8 positions.
    assert first.name == "0" and second.name == "2"
    assert first.input_density == pytest.approx(3 / 4)
    assert first.activation == "relu"
    assert first.grad_density == pytest.approx(3 / 8)  # no BN: dL/dY is the ReLU-masked one
    assert first.relu_grad_density == pytest.approx(3 / 8)
    assert first.mask_zero_fraction == pytest.approx(5 / 8)
    assert first.known_zero_share == pytest.approx(1.0)  # every zero is known from the mask
    assert first.input_dead_fraction is None  # the image is no ReLU output
    assert first.gemms.input_grad is None  # nothing asks for the image's gradient
    # conv2 sees the ReLU output (3 non-zero of 8); its output gradient is all ones.
    assert second.input_density == pytest.approx(3 / 8)
    assert second.input_dead_fraction == pytest.approx(5 / 8)
    assert second.grad_density == pytest.approx(1.0)
    assert second.activation == "none" and second.relu_grad_density is None


def test_batchnorm_makes_the_raw_gradient_dense_but_not_the_relu_one() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 3)
    )
    x = torch.randn(4, 3, 8, 8)
    _, _, records = record_step(net, x, torch.zeros(4), _sum_loss)
    conv = summarize(records)[0]
    assert conv.activation == "bn+relu"
    assert conv.grad_density > 0.99  # BN's backward subtracts batch means
    assert conv.relu_grad_density is not None and conv.relu_grad_density < 0.7
    assert 0.3 < (conv.mask_zero_fraction or 0) < 0.7


def test_mask_predicted_zeros_are_a_subset_of_the_actual_zeros() -> None:
    torch.manual_seed(1)
    model = out_of_place(zoo.build("resnet18", image_size=32, num_classes=10))
    images, labels = PatternImages(PatternConfig(image_size=32), seed=3).batch(
        2, torch.Generator().manual_seed(0)
    )
    _, _, records = record_step(model, images, labels, nn.CrossEntropyLoss())
    masked = [r for r in records if r.known_dead is not None]
    assert len(masked) >= 17  # every conv of ResNet-18 reaches a ReLU
    paths = {r.activation for r in records}
    assert {"bn+relu", "bn+add+relu", "none"} <= paths  # stem/conv1, conv2/shortcut, fc
    for r in masked:
        assert r.dz_nz is not None
        assert not (r.known_dead & r.dz_nz).any(), r.name  # known zero => actually zero
    for layer in summarize(records):
        for value in (layer.input_density, layer.grad_density, layer.relu_grad_density):
            assert value is None or 0.0 <= value <= 1.0


def test_dead_inputs_through_max_pool_and_dropout_are_zero_inputs() -> None:
    net = nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Dropout(0.5),
        nn.Linear(4 * 4 * 4, 3),
    )
    torch.manual_seed(2)
    _, _, records = record_step(net, torch.randn(3, 2, 8, 8), torch.zeros(3), _sum_loss)
    linear = records[-1]
    assert linear.x_alive is not None  # ReLU -> max-pool -> flatten -> dropout keeps the rule
    assert torch.equal(linear.x_alive, linear.x_nz)


def test_gemm_shapes_match_hand_computed_im2col_sizes() -> None:
    conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
    # a 9x9 input: Ho = Wo = (9 + 2 - 3) // 2 + 1 = 5; P = 2 images * 25 pixels
    shapes = gemm_shapes(geometry_of(conv), (2, 8, 5, 5), input_grad=True)
    assert shapes.forward == GemmShape(m=50, n=8, k=27)
    assert shapes.input_grad == GemmShape(m=50, n=27, k=8)
    assert shapes.weight_grad == GemmShape(m=8, n=27, k=50)
    grouped = gemm_shapes(geometry_of(nn.Conv2d(4, 8, 3, groups=2)), (1, 8, 2, 2), input_grad=True)
    assert grouped.forward == GemmShape(m=4, n=4, k=18, groups=2)
    assert grouped.forward.macs == 2 * 4 * 4 * 18
    linear = gemm_shapes(geometry_of(nn.Linear(5, 7)), (3, 7), input_grad=False)
    assert linear.forward == GemmShape(m=3, n=7, k=5)
    assert linear.input_grad is None
    assert linear.weight_grad == GemmShape(m=7, n=5, k=3)


def test_im2col_mask_is_the_unfolded_input() -> None:
    torch.manual_seed(3)
    x = torch.relu(torch.randn(2, 4, 6, 6))
    conv = nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)
    cols = im2col_mask(x != 0, geometry_of(conv))
    unfolded = F.unfold(x, 3, padding=1, stride=2).transpose(1, 2).reshape(-1, 36)
    assert cols.shape == (2, 2 * 9, 18)
    assert torch.equal(cols[0], unfolded[:, :18] != 0)
    assert torch.equal(cols[1], unfolded[:, 18:] != 0)
    # the forward GEMM of the grouped conv reproduces the layer's output
    w = conv.weight.detach().reshape(2, 3, 18)
    out = torch.cat([unfolded[:, :18] @ w[0].T, unfolded[:, 18:] @ w[1].T], dim=1)
    expected = F.conv2d(x, conv.weight, None, 2, 1, groups=2).permute(0, 2, 3, 1).reshape(-1, 6)
    assert torch.allclose(out, expected, atol=1e-5)


def test_pattern_images_are_learnable() -> None:
    source = PatternImages(PatternConfig(num_classes=4, image_size=16), seed=0)
    gen = torch.Generator().manual_seed(0)
    model = nn.Linear(3 * 16 * 16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    losses = []
    for _ in range(60):
        images, labels = source.batch(32, gen)
        loss = F.cross_entropy(model(images.flatten(1)), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-10:]) / 10 < 0.6 * sum(losses[:10]) / 10


def test_folder_images_read_class_folders(tmp_path: Path) -> None:
    from PIL import Image

    for label, colour in (("cat", (200, 10, 10)), ("dog", (10, 10, 200))):
        (tmp_path / label).mkdir()
        for i in range(2):
            Image.new("RGB", (40, 30), colour).save(tmp_path / label / f"{i}.png")
    (tmp_path / "dog" / "notes.txt").write_text("not an image")
    source = FolderImages(tmp_path, image_size=32)
    assert source.classes == ["cat", "dog"] and source.num_classes == 2
    images, labels = source.batch(5, torch.Generator().manual_seed(0))
    assert images.shape == (5, 3, 32, 32) and labels.shape == (5,)
    red_minus_blue = images[:, 0].mean(dim=(1, 2)) - images[:, 2].mean(dim=(1, 2))
    assert torch.equal(red_minus_blue > 0, labels == 0)


def test_folder_errors_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(DataFileError, match="no such folder"):
        FolderImages(tmp_path / "missing", 32)
    (tmp_path / "only").mkdir()
    with pytest.raises(DataFileError, match="at least 2 class folders"):
        FolderImages(tmp_path, 32)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "broken.png").write_bytes(b"not a png")
    with pytest.raises(DataFileError, match=r"broken\.png"):
        FolderImages(tmp_path, 32)


def test_config_rejects_bad_fields() -> None:
    with pytest.raises(ConfigError, match="model"):
        AnalyzerConfig(model="")
    with pytest.raises(ConfigError, match="steps"):
        AnalyzerConfig(steps=0)
    with pytest.raises(ConfigError, match="image_size"):
        AnalyzerConfig(image_size=0)


def test_profile_training_records_every_layer_after_warmup() -> None:
    config = AnalyzerConfig(
        model="resnet18", image_size=32, batch_size=2, warmup_steps=1, steps=1, seed=5
    )
    ticks: list[int] = []
    seen: list[str] = []
    model = _zoo_model("resnet18")
    profile = profile_training(
        model, config=config, on_layer=lambda r: seen.append(r.name), progress=ticks.append
    )
    assert len(ticks) == 2  # one warm-up step, one recorded
    assert len(profile.layers) == 21 == len(seen)  # 20 convs and the classifier
    assert profile.training.warmup_steps == 1
    assert profile.training.warmup_loss_start is not None
    stem = profile.layers[0]
    assert stem.name == "stem.0" and stem.input_density == pytest.approx(1.0)
    assert all(0.0 <= layer.input_density <= 1.0 for layer in profile.layers)
    again = profile_training(model, config=config)  # seeded: the same run, the same figures
    assert again.layers == profile.layers
    assert (profile.model, profile.data) == ("resnet18", "synthetic patterns")


@pytest.mark.slow
def test_warmup_lowers_the_loss() -> None:
    config = AnalyzerConfig(model="resnet18", image_size=32, batch_size=16, warmup_steps=60)
    training = profile_training(_zoo_model("resnet18"), config=config).training
    assert training.warmup_loss_end is not None and training.warmup_loss_start is not None
    assert training.warmup_loss_end < 0.8 * training.warmup_loss_start


def test_a_resumed_warmup_equals_an_uninterrupted_one(tmp_path: Path) -> None:
    """Checkpoints hold the weights, momentum, data and dropout RNG states: resuming from one
    continues exactly (MobileNetV2 has dropout and BatchNorm running statistics)."""

    def config(warmup: int) -> AnalyzerConfig:
        return AnalyzerConfig(
            model="mobilenet_v2",
            image_size=32,
            batch_size=2,
            warmup_steps=warmup,
            steps=1,
            eval_images=8,
        )

    model = _zoo_model("mobilenet_v2")
    straight = profile_training(model, config=config(4))
    profile_training(model, config=config(3), cache_dir=tmp_path, checkpoint_every=2)
    assert [p.name.split("-step")[1] for p in tmp_path.iterdir()] == ["3.pt"]  # older dropped
    seen: list[int] = []
    resumed = profile_training(model, config=config(4), cache_dir=tmp_path, progress=seen.append)
    assert seen[0] == 3  # the cached steps are reported at once
    assert resumed.training == straight.training
    assert resumed.layers == straight.layers
    assert straight.training.eval_accuracy is not None
    assert 0.0 <= straight.training.eval_accuracy <= 1.0
    assert [p.name.split("-step")[1] for p in tmp_path.iterdir()] == ["4.pt"]
    other = AnalyzerConfig(model="mobilenet_v2", image_size=32, batch_size=2, lr=0.02)
    assert checkpoint_key(other) != checkpoint_key(config(4))
    assert checkpoint_key(config(9)) == checkpoint_key(config(4))


def test_checkpoint_names_hash_the_settings_text() -> None:
    """The names are a pure function of the settings' text, so a cache written by one version
    of the analyser is found by the next as long as the settings keep their names."""
    config = AnalyzerConfig(model="resnet18", image_size=32, batch_size=2)
    assert checkpoint_prefix(config) == "resnet18-32px-b2-363297b6e48f"
    folder = AnalyzerConfig(model="resnet18", image_size=32, batch_size=2, data="imgs/train")
    assert checkpoint_prefix(folder) == "resnet18-32px-b2-15f9beb9cce8"


def _tiny_cnn() -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 3)
    )


def test_a_given_module_and_image_source_are_used_as_they_are() -> None:
    torch.manual_seed(0)
    model = _tiny_cnn()
    weights = model[0].weight.detach().clone()
    source = PatternImages(PatternConfig(num_classes=3, image_size=8), seed=1)
    config = AnalyzerConfig(model="tiny", image_size=8, batch_size=2, warmup_steps=1)
    profile = profile_training(model, source, config=config)
    assert not torch.equal(model[0].weight, weights)  # trained in place
    assert not model[1].inplace  # the hooks need the ReLU's input and output apart
    assert profile.data == "synthetic patterns, seed 1"  # the source's own label
    assert profile.training.chance_loss == pytest.approx(math.log(3))  # the source's classes
    labelled = AnalyzerConfig(model="tiny", image_size=8, batch_size=2, data="my patterns")
    assert profile_training(_tiny_cnn, source, config=labelled).data == "my patterns"


def test_a_model_function_that_builds_no_module_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"nn\.Module"):
        profile_training(lambda: "not a model", config=AnalyzerConfig(image_size=8))  # type: ignore[arg-type, return-value]


def _wrong_linear() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(7, 10))


class _BadForward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("no forward today")


def _failing_loss(out: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    raise KeyError("no loss today")


@pytest.mark.parametrize("warmup_steps", [0, 1])
def test_a_failing_model_or_loss_in_training_is_one_line_naming_it(warmup_steps: int) -> None:
    config = AnalyzerConfig(image_size=8, batch_size=2, warmup_steps=warmup_steps)
    with pytest.raises(UserCodeError) as info:  # the built model's shapes do not fit
        profile_training(_wrong_linear, config=config)
    message = str(info.value)
    assert message.startswith("model from model function _wrong_linear (")
    assert "test_analyzer.py:" in message and "mat1 and mat2 shapes" in message
    assert "\n" not in message
    with pytest.raises(UserCodeError, match=r"model's forward _BadForward\.forward .* line \d+"):
        profile_training(_BadForward(), config=config)
    with pytest.raises(UserCodeError, match=r"loss function _failing_loss .*KeyError"):
        profile_training(_tiny_cnn, config=config, loss=_failing_loss)


def test_padding_share_counts_the_im2col_padding() -> None:
    # 3x3 convolution, padding 1, on 2x2 images: each of the 4 output pixels sees the 4 image
    # pixels and 5 padding positions of its 9 taps.
    net = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8, 1))
    _, _, records = record_step(net, torch.randn(3, 1, 2, 2), torch.zeros(3), _sum_loss)
    conv, linear = summarize(records)
    assert conv.padding_share == pytest.approx(20 / 36)
    assert linear.padding_share == 0.0
