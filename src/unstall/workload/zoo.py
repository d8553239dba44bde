"""The model zoo: real ``torch.nn`` models by name, synthetic batches for them, and their facts.

>>> model = build("resnet50", image_size=32, num_classes=10)
>>> inputs, targets = example_batch("resnet50", 2, image_size=32, num_classes=10)
>>> loss = loss_fn("resnet50")(model(inputs), targets)

Every model trains with the same generic loop, ``loss_fn(name)(model(inputs), targets)``: all
are classifiers under cross-entropy. The language models (``lstm_lm``, ``transformer``) return
next-token logits flattened to ``(N * T, vocab)`` and their targets are ``(N * T,)``; ``ncf``
returns two logits per (user, item) pair.

Facts (parameters, gradient bytes and tensors, weight layers, forward FLOPs; see
:mod:`unstall.workload.model_facts` for the definitions) are measured from a copy of the model
built on the ``meta`` device: shapes without storage, so even VGG-19 at 224x224 takes
milliseconds.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import torch
from torch import nn

from unstall.config import check
from unstall.errors import ConfigError, did_you_mean
from unstall.results import JsonResult
from unstall.workload.model_facts import ModelFacts, TensorFact, measure_model
from unstall.workload.options import (
    ImageOptions,
    LSTMLMOptions,
    MLPOptions,
    MobileNetV2Options,
    NCFOptions,
    ResNetOptions,
    TransformerOptions,
    VGGOptions,
    VGGSweepOptions,
    check_int,
)
from unstall.workload.zoo_sequence import LSTMLanguageModel, TransformerLM
from unstall.workload.zoo_tabular import MLP, NeuMF
from unstall.workload.zoo_vision import VGG, AlexNet, MobileNetV2, ResNet

__all__ = [
    "MODEL_REGISTRY",
    "InputKind",
    "ModelFacts",
    "ModelSpec",
    "TensorFact",
    "ZooFactsTable",
    "build",
    "example_batch",
    "facts",
    "facts_table",
    "loss_fn",
    "names",
    "resolve_options",
    "spec",
]

InputKind = Literal["image", "tokens", "features", "pairs"]


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """One registered model: what it is, what it eats, and how to build it.

    ``builder`` takes a validated instance of ``options_type`` and returns the module;
    ``defaults`` are the options' default values (read from ``options_type``).
    """

    name: str
    family: str
    input_kind: InputKind
    description: str
    builder: Callable[[Any], nn.Module]
    options_type: type
    defaults: Mapping[str, object] = field(init=False)

    def __post_init__(self) -> None:
        defaults = {f.name: f.default for f in dataclasses.fields(self.options_type)}
        object.__setattr__(self, "defaults", MappingProxyType(defaults))


# --- builders: one function a family; fixed depths are partials of it -----------------------------


def _resnet(o: ImageOptions, depth: int | None = None) -> nn.Module:
    """A fixed-depth ResNet (``depth`` given) or the sweep family (depth from the options)."""
    if depth is None:
        assert isinstance(o, ResNetOptions)
        depth = o.depth
    return ResNet(depth, o.num_classes)


def _vgg(o: VGGOptions, depth: int | None = None) -> nn.Module:
    """A fixed-depth VGG (``depth`` given) or the sweep family (depth from the options)."""
    if depth is None:
        assert isinstance(o, VGGSweepOptions)
        depth = o.depth
    return VGG(depth, o.num_classes, batch_norm=o.batch_norm)


def _alexnet(o: ImageOptions) -> nn.Module:
    return AlexNet(o.num_classes, image_size=o.image_size)


def _mobilenet_v2(o: MobileNetV2Options) -> nn.Module:
    return MobileNetV2(o.num_classes, width_mult=o.width_mult)


def _lstm_lm(o: LSTMLMOptions) -> nn.Module:
    fields = dataclasses.asdict(o)
    del fields["seq_len"]  # the model takes sequences of any length
    return LSTMLanguageModel(**fields)


def _transformer(o: TransformerOptions) -> nn.Module:
    return TransformerLM(**dataclasses.asdict(o))


def _mlp(o: MLPOptions) -> nn.Module:
    return MLP(**dataclasses.asdict(o))


def _ncf(o: NCFOptions) -> nn.Module:
    return NeuMF(**dataclasses.asdict(o))


def _registry(specs: Iterable[ModelSpec]) -> dict[str, ModelSpec]:
    return {s.name: s for s in sorted(specs, key=lambda s: s.name)}


_RESNET_BLOCK = {True: "basic", False: "bottleneck"}


def _fixed_depth_specs() -> list[ModelSpec]:
    resnets = [
        ModelSpec(
            name=f"resnet{d}",
            family="resnet",
            input_kind="image",
            description=f"ResNet-{d} (He et al. 2016), {_RESNET_BLOCK[d < 50]} blocks",
            builder=functools.partial(_resnet, depth=d),
            options_type=ImageOptions,
        )
        for d in (18, 34, 50, 101, 152)
    ]
    vggs = [
        ModelSpec(
            name=f"vgg{d}",
            family="vgg",
            input_kind="image",
            description=f"VGG-{d} (Simonyan and Zisserman 2015), optional BatchNorm",
            builder=functools.partial(_vgg, depth=d),
            options_type=VGGOptions,
        )
        for d in (11, 13, 16, 19)
    ]
    return resnets + vggs


MODEL_REGISTRY: dict[str, ModelSpec] = _registry(
    [
        *_fixed_depth_specs(),
        ModelSpec(
            name="resnet",
            family="resnet",
            input_kind="image",
            description="ResNet with `depth` in 18/34/50/101/152, for depth sweeps",
            builder=_resnet,
            options_type=ResNetOptions,
        ),
        ModelSpec(
            name="vgg",
            family="vgg",
            input_kind="image",
            description="VGG with `depth` in 11/13/16/19, for depth sweeps",
            builder=_vgg,
            options_type=VGGSweepOptions,
        ),
        ModelSpec(
            name="alexnet",
            family="alexnet",
            input_kind="image",
            description="AlexNet, one-GPU variant (Krizhevsky 2014), pooled to 6x6",
            builder=_alexnet,
            options_type=ImageOptions,
        ),
        ModelSpec(
            name="mobilenet_v2",
            family="mobilenet",
            input_kind="image",
            description="MobileNetV2 (Sandler et al. 2018), inverted residuals, `width_mult`",
            builder=_mobilenet_v2,
            options_type=MobileNetV2Options,
        ),
        ModelSpec(
            name="lstm_lm",
            family="lstm",
            input_kind="tokens",
            description="word-level LSTM language model (Zaremba et al. 2014 'medium'), tied",
            builder=_lstm_lm,
            options_type=LSTMLMOptions,
        ),
        ModelSpec(
            name="transformer",
            family="transformer",
            input_kind="tokens",
            description="small causal transformer-encoder language model",
            builder=_transformer,
            options_type=TransformerOptions,
        ),
        ModelSpec(
            name="mlp",
            family="mlp",
            input_kind="features",
            description="multilayer perceptron: `depth` Linear layers of `width`",
            builder=_mlp,
            options_type=MLPOptions,
        ),
        ModelSpec(
            name="ncf",
            family="ncf",
            input_kind="pairs",
            description="neural collaborative filtering (NeuMF, He et al. 2017)",
            builder=_ncf,
            options_type=NCFOptions,
        ),
    ]
)


# --- lookup and options --------------------------------------------------------------------------


def names() -> list[str]:
    """Every registered model name, sorted."""
    return sorted(MODEL_REGISTRY)


def spec(name: str) -> ModelSpec:
    """The registered model ``name``, or a ConfigError that lists the known names."""
    found = MODEL_REGISTRY.get(name)
    if found is None:
        raise ConfigError(
            "zoo",
            "name",
            f"unknown model {name!r}{did_you_mean(name, names())}; known: {', '.join(names())}",
        )
    return found


def resolve_options(name: str, options: Mapping[str, object]) -> Any:
    """``options`` over the defaults of model ``name``, validated: an instance of its
    ``options_type``. Errors name the model and the option."""
    model = spec(name)
    unknown = sorted(set(options) - set(model.defaults))
    if unknown:
        known = ", ".join(model.defaults) or "none"
        hint = did_you_mean(unknown[0], model.defaults)
        raise ConfigError(name, unknown[0], f"unknown option{hint}; {name} takes: {known}")
    try:
        return model.options_type(**options)
    except ConfigError as exc:
        raise ConfigError(name, exc.field, exc.why) from exc


def build(name: str, **options: object) -> nn.Module:
    """A freshly initialised model ``name`` with ``options`` over its defaults (on CPU)."""
    return spec(name).builder(resolve_options(name, options))


def loss_fn(name: str) -> nn.Module:
    """The training loss of model ``name``: cross-entropy for every model in the zoo."""
    spec(name)
    return nn.CrossEntropyLoss()


# --- synthetic batches ---------------------------------------------------------------------------

BatchMaker = Callable[[Any, int, torch.Generator | None], tuple[torch.Tensor, torch.Tensor]]


def _image_batch(o: Any, n: int, g: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    images = torch.randn(n, 3, o.image_size, o.image_size, generator=g)
    return images, torch.randint(0, o.num_classes, (n,), generator=g)


def _token_batch(o: Any, n: int, g: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.randint(0, o.vocab, (n, o.seq_len), generator=g)
    return tokens, torch.randint(0, o.vocab, (n * o.seq_len,), generator=g)


def _feature_batch(o: Any, n: int, g: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    features = torch.randn(n, o.in_features, generator=g)
    return features, torch.randint(0, o.num_classes, (n,), generator=g)


def _pair_batch(o: Any, n: int, g: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    users = torch.randint(0, o.users, (n,), generator=g)
    items = torch.randint(0, o.items, (n,), generator=g)
    return torch.stack([users, items], dim=1), torch.randint(0, 2, (n,), generator=g)


BATCH_MAKERS: dict[str, BatchMaker] = {
    "image": _image_batch,
    "tokens": _token_batch,
    "features": _feature_batch,
    "pairs": _pair_batch,
}


def example_batch(
    name: str, batch_size: int, *, generator: torch.Generator | None = None, **options: object
) -> tuple[torch.Tensor, torch.Tensor]:
    """A synthetic ``(inputs, targets)`` batch for model ``name`` built with ``options``.

    image: float ``(N, 3, S, S)`` and class ids ``(N,)``; tokens: ids ``(N, T)`` and next-token
    ids ``(N * T,)``; features: float ``(N, F)`` and class ids ``(N,)``; pairs: ``(N, 2)`` (user,
    item) ids and 0/1 labels ``(N,)``. Pass a seeded ``generator`` for reproducible batches.
    """
    check_int("example_batch", "batch_size", batch_size, minimum=1)
    model = spec(name)
    return BATCH_MAKERS[model.input_kind](resolve_options(name, options), batch_size, generator)


# --- facts ---------------------------------------------------------------------------------------


def facts(name: str, **options: object) -> ModelFacts:
    """Static facts of model ``name`` with ``options``, measured from the module (cached)."""
    return _facts(name, resolve_options(name, options))


@functools.lru_cache(maxsize=256)
def _facts(name: str, options: Any) -> ModelFacts:
    """``options`` is a frozen (so hashable) options dataclass: equal options share one entry."""
    model_spec = MODEL_REGISTRY[name]
    with torch.device("meta"):
        model = model_spec.builder(options)
    inputs, _ = BATCH_MAKERS[model_spec.input_kind](options, 1, None)
    return measure_model(
        model,
        inputs.to("meta"),
        name=name,
        options=tuple(sorted(dataclasses.asdict(options).items())),
        input_kind=model_spec.input_kind,
    )


@dataclass(frozen=True, kw_only=True)
class ZooFactsTable(JsonResult):
    """The facts of several zoo models; image models at ``image_size``, the rest at defaults."""

    image_size: int
    models: tuple[ModelFacts, ...]


def facts_table(image_size: int = 224, models: Iterable[str] | None = None) -> ZooFactsTable:
    """Facts of ``models`` (default: every registered model) at their default options, image
    models at ``image_size``."""
    check_int("facts_table", "image_size", image_size, minimum=32)
    chosen = names() if models is None else list(models)
    rows = []
    for name in chosen:
        extra = {"image_size": image_size} if spec(name).input_kind == "image" else {}
        rows.append(facts(name, **extra))
    check(bool(rows), "facts_table", "models", "must name at least one model")
    return ZooFactsTable(image_size=image_size, models=tuple(rows))
