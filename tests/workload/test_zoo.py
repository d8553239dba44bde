"""The model zoo: published sizes and FLOPs, one training step of every model, facts by hand."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from unstall.errors import ConfigError
from unstall.workload import zoo
from unstall.workload.model_facts import count_flops, count_layers, is_winograd_conv, measure_model

# Published parameter counts at 224x224 with 1000 classes (torchvision's model cards, which match
# the papers): the zoo must be within 1%.
PUBLISHED_PARAMS = {
    "resnet18": 11.69e6,
    "resnet34": 21.80e6,
    "resnet50": 25.56e6,
    "resnet101": 44.55e6,
    "resnet152": 60.19e6,
    "vgg11": 132.86e6,
    "vgg13": 133.05e6,
    "vgg16": 138.36e6,
    "vgg19": 143.67e6,
    "alexnet": 61.10e6,
    "mobilenet_v2": 3.50e6,
}
# Published multiply-accumulates per 224x224 image (GMACs); the zoo counts 2 FLOPs a MAC.
PUBLISHED_GMACS = {
    "resnet18": 1.81,
    "resnet50": 4.09,
    "resnet152": 11.51,
    "vgg16": 15.47,
    "alexnet": 0.71,
    "mobilenet_v2": 0.30,
}
# Too big to build and step in the default run on two cores (the 102 M-element first
# classifier layer of VGG alone takes about a second to initialise).
HEAVY = {"vgg", "vgg11", "vgg13", "vgg16", "vgg19", "resnet101", "resnet152"}
# The depth-sweep families step at their smallest depth (the others are the fixed-depth models).
SMALLEST_DEPTH = {"resnet": 18, "vgg": 11}


def small_options(name: str) -> dict[str, object]:
    """Options that keep a training step fast: 32x32 images, 10 classes, smallest depth."""
    options: dict[str, object] = {}
    if zoo.spec(name).input_kind == "image":
        options = {"image_size": 32, "num_classes": 10}
    if name in SMALLEST_DEPTH:
        options["depth"] = SMALLEST_DEPTH[name]
    return options


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread() -> Iterator[None]:
    """Two cores are shared by several processes: more threads only oversubscribe them."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# --- sizes and FLOPs at 224 --------------------------------------------------------------------


@pytest.mark.parametrize(("name", "published"), sorted(PUBLISHED_PARAMS.items()))
def test_parameter_counts_match_the_published(name: str, published: float) -> None:
    assert zoo.facts(name).params == pytest.approx(published, rel=0.01)


@pytest.mark.parametrize(("name", "gmacs"), sorted(PUBLISHED_GMACS.items()))
def test_forward_flops_match_published_macs(name: str, gmacs: float) -> None:
    assert zoo.facts(name).flops_per_sample == pytest.approx(2 * gmacs * 1e9, rel=0.10)


def test_resnet50_and_vgg16_flops_as_in_the_brief() -> None:
    assert zoo.facts("resnet50").flops_per_sample == pytest.approx(8.2e9, rel=0.10)
    assert zoo.facts("vgg16").flops_per_sample == pytest.approx(31e9, rel=0.10)


def test_depth_sweep_families_equal_their_fixed_depth_models() -> None:
    for depth in (18, 34, 50, 101, 152):
        assert zoo.facts("resnet", depth=depth).params == zoo.facts(f"resnet{depth}").params
    for depth in (11, 13, 16, 19):
        assert zoo.facts("vgg", depth=depth).params == zoo.facts(f"vgg{depth}").params


@pytest.mark.parametrize(
    ("family", "depths"), [("resnet", (18, 34, 50, 101, 152)), ("vgg", (11, 13, 16, 19))]
)
def test_depth_sweep_strictly_increases_params_layers_and_flops(
    family: str, depths: tuple[int, ...]
) -> None:
    sweep = [zoo.facts(family, depth=d) for d in depths]
    for small, big in itertools.pairwise(sweep):
        assert big.params > small.params
        assert big.layers > small.layers
        assert big.gradient_tensors > small.gradient_tensors
        assert big.flops_per_sample > small.flops_per_sample


def test_resnet_and_vgg_layers_are_their_depth() -> None:
    # ResNet-d and VGG-d are named after their weight layers (convolutions + fc); a ResNet also
    # has one projection convolution per stage (three for ResNet-18/34, four for the others).
    for depth, projections in ((18, 3), (34, 3), (50, 4), (101, 4), (152, 4)):
        assert zoo.facts("resnet", depth=depth).layers == depth + projections
    for depth in (11, 13, 16, 19):
        assert zoo.facts("vgg", depth=depth).layers == depth


def test_vgg_batch_norm_adds_only_norm_parameters() -> None:
    plain, normed = zoo.facts("vgg16"), zoo.facts("vgg16", batch_norm=True)
    assert normed.params == 138_365_992  # torchvision's vgg16_bn
    assert normed.layers == plain.layers  # norm layers are not weight layers
    assert normed.gradient_tensors == plain.gradient_tensors + 2 * 13


# --- every model trains ------------------------------------------------------------------------


def _train_step(name: str) -> None:
    options = small_options(name)
    torch.manual_seed(0)  # parameter init only; the batch has its own generator
    model = zoo.build(name, **options)
    inputs, targets = zoo.example_batch(
        name, 2, generator=torch.Generator().manual_seed(1), **options
    )
    model.train()
    loss = zoo.loss_fn(name)(model(inputs), targets)
    loss.backward()
    assert torch.isfinite(loss)
    for pname, p in model.named_parameters():
        assert p.grad is not None, f"{name}: {pname} got no gradient"
        assert torch.isfinite(p.grad).all(), f"{name}: {pname} has a non-finite gradient"
    assert any(p.grad.abs().sum() > 0 for p in model.parameters() if p.grad is not None)


# The deepest of each heavy family steps for real in the default suite too (a second or two
# each); the rest of them in the slow run.
HEAVY_IN_DEFAULT = {"vgg19", "resnet152"}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.slow) if n in HEAVY - HEAVY_IN_DEFAULT else n
        for n in zoo.names()
    ],
)
def test_every_model_does_forward_and_backward_on_its_example_batch(name: str) -> None:
    _train_step(name)


@pytest.mark.parametrize("name", sorted(HEAVY))
def test_heavy_models_do_forward_and_backward_on_the_meta_device(name: str) -> None:
    # Shapes only, no arithmetic: the real step of these models is in the slow run.
    options = small_options(name)
    with torch.device("meta"):
        model = zoo.build(name, **options)
    inputs, targets = zoo.example_batch(name, 2, **options)
    loss = zoo.loss_fn(name)(model(inputs.to("meta")), targets.to("meta"))
    loss.backward()
    assert loss.shape == ()
    for pname, p in model.named_parameters():
        assert p.grad is not None and p.grad.shape == p.shape, pname


def test_sgd_on_a_fixed_batch_lowers_the_loss() -> None:
    model = zoo.build("mlp", in_features=8, width=16, depth=3, num_classes=4)
    inputs, targets = zoo.example_batch(
        "mlp", 16, generator=torch.Generator().manual_seed(0), in_features=8, num_classes=4
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for _ in range(100):
        opt.zero_grad()
        loss = zoo.loss_fn("mlp")(model(inputs), targets)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.25 * losses[0]


# --- facts from the meta device are those of the real module -------------------------------------


@pytest.mark.parametrize("name", zoo.names())
def test_facts_are_self_consistent(name: str) -> None:
    f = zoo.facts(name)
    assert f.gradient_bytes == 4 * f.params  # float32
    assert f.gradient_tensors == len(f.tensors)
    assert sum(t.numel for t in f.tensors) == f.params
    assert all(t.bytes == 4 * t.numel == 4 * math.prod(t.shape) for t in f.tensors)
    assert f.largest_tensor_bytes == max(t.bytes for t in f.tensors)
    assert len({t.name for t in f.tensors}) == len(f.tensors)
    inputs, _ = zoo.example_batch(name, 1)
    assert f.input_shape == tuple(inputs.shape[1:])
    assert f.input_kind == zoo.spec(name).input_kind
    assert dict(f.options) == {**zoo.spec(name).defaults}
    assert f.flops_per_sample > 0 and f.layers > 0


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "lstm_lm", "transformer", "ncf"])
def test_facts_equal_those_of_the_real_cpu_module(name: str) -> None:
    options = small_options(name)
    f = zoo.facts(name, **options)
    model = zoo.build(name, **options)
    real = list(model.named_parameters())
    assert [t.name for t in f.tensors] == [n for n, _ in real]
    assert [t.shape for t in f.tensors] == [tuple(p.shape) for _, p in real]
    assert f.params == sum(p.numel() for _, p in real)
    assert f.layers == count_layers(model)
    inputs, _ = zoo.example_batch(name, 3, **options)
    assert count_flops(model, inputs) == pytest.approx(f.flops_per_sample)


def test_facts_are_cached_under_the_full_options() -> None:
    assert zoo.facts("resnet50") is zoo.facts("resnet50", image_size=224, num_classes=1000)
    assert zoo.facts("resnet50") is not zoo.facts("resnet50", num_classes=10)


def test_facts_round_trip_through_json() -> None:
    f = zoo.facts("mlp", depth=2)
    data = f.to_dict()
    assert data["params"] == f.params
    assert data["tensors"][0] == {
        "name": "layers.0.weight",
        "shape": [1024, 784],
        "numel": 784 * 1024,
        "bytes": 4 * 784 * 1024,
    }


# --- facts by hand on tiny models ----------------------------------------------------------------


def test_winograd_flops_are_those_of_3x3_stride_1_convolutions() -> None:
    model = nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1),  # 3x3 stride 1: counted, 8x8 out
        nn.Conv2d(4, 4, 3, stride=2, padding=1),  # strided: not, 4x4 out
        nn.Conv2d(4, 4, 1),  # 1x1: not
        nn.Conv2d(4, 4, 3, padding=1, groups=2),  # grouped: not
    )
    inputs = torch.zeros(3, 2, 8, 8)
    f = measure_model(model, inputs, name="tiny", options=(), input_kind="image")
    counted = 2 * 8 * 8 * 4 * (2 * 9)
    others = 2 * 4 * 4 * 4 * (4 * 9) + 2 * 4 * 4 * 4 * 4 + 2 * 4 * 4 * 4 * (2 * 9)
    assert f.winograd_flops_per_sample == counted
    assert f.flops_per_sample == counted + others
    assert [is_winograd_conv(m) for m in model] == [True, False, False, False]
    assert zoo.facts("mlp").winograd_flops_per_sample == 0.0
    # VGG-16 is all 3x3 stride-1 convolutions but for its classifier
    vgg = zoo.facts("vgg16")
    assert 0.95 < vgg.winograd_flops_per_sample / vgg.flops_per_sample < 1.0


def test_mlp_flops_params_and_layers_by_hand() -> None:
    f = zoo.facts("mlp", in_features=5, width=7, depth=3, num_classes=2)
    linears = [(5, 7), (7, 7), (7, 2)]
    assert f.flops_per_sample == 2 * sum(i * o for i, o in linears)  # 196
    assert f.params == sum(i * o + o for i, o in linears)  # 114
    assert f.layers == 3
    assert f.gradient_tensors == 6


@pytest.mark.parametrize("depth", [1, 2, 3, 6, 10])
def test_mlp_layers_equal_depth_including_the_output_layer(depth: int) -> None:
    f = zoo.facts("mlp", depth=depth, width=32, in_features=16)
    assert f.layers == depth
    assert f.gradient_tensors == 2 * depth


def test_lstm_lm_flops_params_and_layers_by_hand() -> None:
    vocab, steps, hidden, layers = 50, 3, 4, 2
    f = zoo.facts(
        "lstm_lm", vocab=vocab, seq_len=steps, embed_dim=hidden, hidden=hidden, num_layers=layers
    )
    lstm_macs_per_step = layers * 4 * (hidden + hidden) * hidden
    assert f.flops_per_sample == 2 * steps * (lstm_macs_per_step + hidden * vocab)
    lstm_params = layers * (4 * hidden * (hidden + hidden) + 2 * 4 * hidden)
    assert f.params == vocab * hidden + lstm_params + vocab  # tied decoder: bias only
    assert f.layers == 1 + layers + 1  # embedding, LSTM layers, decoder


def test_untied_lstm_has_one_more_vocab_by_hidden_matrix() -> None:
    tied, untied = zoo.facts("lstm_lm"), zoo.facts("lstm_lm", tie_weights=False)
    assert untied.params - tied.params == 10000 * 650
    assert untied.gradient_tensors == tied.gradient_tensors + 1


def test_transformer_flops_and_layers_by_hand() -> None:
    v, t, e, ff, n = 20, 5, 8, 16, 2
    f = zoo.facts("transformer", vocab=v, seq_len=t, d_model=e, heads=2, layers=n, ff=ff)
    per_layer_macs = t * 4 * e * e + 2 * t * t * e + t * 2 * e * ff  # qkv+out, QK^T+AV, FF
    assert f.flops_per_sample == 2 * (n * per_layer_macs + t * e * v)
    assert f.layers == n * 4 + 2 + 1  # 4 per encoder layer, 2 embeddings, decoder


def test_convolution_flops_by_hand_including_groups() -> None:
    x = torch.zeros(2, 4, 5, 5)
    dense = nn.Conv2d(4, 6, 3, padding=1)
    assert count_flops(dense, x) == 2 * (6 * 25) * (4 * 9)
    depthwise = nn.Conv2d(4, 4, 3, padding=1, groups=4)
    assert count_flops(depthwise, x) == 2 * (4 * 25) * 9
    assert count_layers(nn.Sequential(dense, nn.BatchNorm2d(6), nn.ReLU())) == 1


@settings(max_examples=25, deadline=None)
@given(
    name=st.sampled_from(["resnet18", "vgg11", "alexnet", "mobilenet_v2"]),
    image_size=st.integers(min_value=32, max_value=320),
)
def test_image_models_take_any_size_from_32_with_the_same_parameters(
    name: str, image_size: int
) -> None:
    f = zoo.facts(name, image_size=image_size)
    assert f.params == zoo.facts(name).params
    assert f.input_shape == (3, image_size, image_size)
    assert f.flops_per_sample > 0


# --- batches --------------------------------------------------------------------------------------


def test_example_batches_have_the_shapes_and_dtypes_of_their_kind() -> None:
    x, y = zoo.example_batch("resnet18", 3, image_size=40, num_classes=7)
    assert (x.shape, x.dtype, y.shape, y.dtype) == (
        (3, 3, 40, 40),
        torch.float32,
        (3,),
        torch.int64,
    )
    assert int(y.min()) >= 0 and int(y.max()) < 7
    x, y = zoo.example_batch("lstm_lm", 2, seq_len=6, vocab=30)
    assert (x.shape, x.dtype, y.shape) == ((2, 6), torch.int64, (12,))
    assert int(x.max()) < 30 and int(y.max()) < 30
    x, y = zoo.example_batch("mlp", 4, in_features=9)
    assert (x.shape, y.shape) == ((4, 9), (4,))
    x, y = zoo.example_batch("ncf", 50, users=3, items=5)
    assert x.shape == (50, 2) and int(x[:, 0].max()) < 3 and int(x[:, 1].max()) < 5
    assert set(y.tolist()) <= {0, 1}


def test_example_batch_is_reproducible_from_its_generator() -> None:
    a = zoo.example_batch("transformer", 2, generator=torch.Generator().manual_seed(7))
    b = zoo.example_batch("transformer", 2, generator=torch.Generator().manual_seed(7))
    c = zoo.example_batch("transformer", 2, generator=torch.Generator().manual_seed(8))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_language_models_output_one_row_per_token() -> None:
    for name in ("lstm_lm", "transformer"):
        opts = {"vocab": 30, "seq_len": 4}
        model = zoo.build(name, **opts)
        x, y = zoo.example_batch(name, 3, **opts)
        assert model(x).shape == (12, 30)
        assert y.shape == (12,)


# --- registry and errors -------------------------------------------------------------------------


def test_registry_is_sorted_and_complete() -> None:
    expected = {"resnet", "vgg", "alexnet", "mobilenet_v2", "lstm_lm", "transformer", "mlp", "ncf"}
    expected |= {f"resnet{d}" for d in (18, 34, 50, 101, 152)}
    expected |= {f"vgg{d}" for d in (11, 13, 16, 19)}
    assert zoo.names() == sorted(expected) == sorted(zoo.MODEL_REGISTRY)
    for name, spec in zoo.MODEL_REGISTRY.items():
        assert spec.name == name
        assert spec.input_kind in zoo.BATCH_MAKERS
        assert spec.description and "\n" not in spec.description


def test_unknown_model_lists_the_known_names() -> None:
    for call in (zoo.build, zoo.facts, zoo.loss_fn):
        with pytest.raises(ConfigError, match="unknown model 'resnet51'") as err:
            call("resnet51")
        assert err.value.field == "name"
        assert "resnet50" in str(err.value) and "ncf" in str(err.value)


@pytest.mark.parametrize(
    ("name", "options", "field", "why"),
    [
        ("resnet50", {"colour": "red"}, "colour", "unknown option"),
        ("resnet50", {"depth": 50}, "depth", "unknown option"),  # fixed depth: use `resnet`
        ("resnet50", {"image_size": 16}, "image_size", ">= 32"),
        ("resnet50", {"image_size": "224"}, "image_size", "integer"),
        ("resnet50", {"num_classes": True}, "num_classes", "integer"),
        ("resnet", {"depth": 20}, "depth", "[18, 34, 50, 101, 152]"),
        ("vgg", {"depth": 12}, "depth", "[11, 13, 16, 19]"),
        ("vgg16", {"batch_norm": 1}, "batch_norm", "true or false"),
        ("mobilenet_v2", {"width_mult": 0}, "width_mult", "(0, 4]"),
        ("transformer", {"heads": 3}, "heads", "must divide d_model=256"),
        ("lstm_lm", {"hidden": 200}, "tie_weights", "embed_dim == hidden"),
        ("lstm_lm", {"dropout": 1.0}, "dropout", "[0, 1)"),
        ("mlp", {"depth": 0}, "depth", ">= 1"),
        ("ncf", {"users": 0}, "users", ">= 1"),
    ],
)
def test_bad_options_raise_config_errors_naming_the_option(
    name: str, options: dict[str, object], field: str, why: str
) -> None:
    for call in (zoo.build, zoo.facts):
        with pytest.raises(ConfigError) as err:
            call(name, **options)
        assert err.value.owner == name
        assert err.value.field == field
        assert why in str(err.value)


def test_example_batch_rejects_a_bad_batch_size_and_bad_options() -> None:
    with pytest.raises(ConfigError, match="batch_size"):
        zoo.example_batch("mlp", 0)
    with pytest.raises(ConfigError, match="image_size"):
        zoo.example_batch("alexnet", 2, image_size=31)


def test_facts_table_covers_every_model_at_the_image_size() -> None:
    table = zoo.facts_table(image_size=64)
    assert [f.name for f in table.models] == zoo.names()
    for f in table.models:
        if f.input_kind == "image":
            assert f.input_shape == (3, 64, 64)
            assert f == zoo.facts(f.name, image_size=64)
        else:
            assert f == zoo.facts(f.name)
