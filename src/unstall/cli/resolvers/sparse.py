"""Command-line text of ``unstall sparse analyze`` into what :func:`unstall.sparse.analyze_cnn`
takes: a model function, an image source, a loss and a plain :class:`CNNSparsityConfig`.

- ``--model``: a zoo image CNN by name (``resnet18``), or user code ``FILE.py:NAME`` /
  ``package.module:NAME`` naming a function that returns an ``nn.Module``;
- ``--data``: an image folder ``root/<class>/<images>`` (read here), or none for the synthetic
  classes;
- ``--array 16x16``, ``--dataflow os``: an :class:`ArrayConfig`; ``--compare
  os/lockstep,ws/per-row:16``: more :class:`AcceleratorConfig` on the same array size and BN
  handling.

Each bad piece of text gives one :class:`~unstall.errors.ConfigError` naming the option.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from torch import nn

from unstall.config import check
from unstall.sparse.cnn import (
    SKIPPING_MODELS,
    AcceleratorConfig,
    AnalyzerConfig,
    ArrayConfig,
    CNNSparsityConfig,
    FolderImages,
    ImageSource,
)
from unstall.sparse.cnn.accelerator import BnGradient, SkippingModel
from unstall.sparse.cnn.scalesim_adapter import Dataflow
from unstall.sparse.cnn.training import CNNModel, LossFn
from unstall.usercode import call_user, is_reference, load_callable
from unstall.workload import zoo

OWNER = "analyze"  # what error messages name: the command whose options these are


def array_config(text: str, dataflow: str = "os") -> ArrayConfig:
    """``"32x16"`` -> ``ArrayConfig(rows=32, cols=16, dataflow=dataflow)``."""
    parts = text.lower().split("x")
    ok = len(parts) == 2 and all(p.strip().isdigit() for p in parts)
    check(ok, OWNER, "array", f"must look like ROWSxCOLS (e.g. 32x32), got {text!r}")
    return ArrayConfig(rows=int(parts[0]), cols=int(parts[1]), dataflow=cast(Dataflow, dataflow))


def accelerator(spec: str, base: AcceleratorConfig) -> AcceleratorConfig:
    """``"[DATAFLOW/]MODEL[:DEPTH]"`` (e.g. ``ws/per-row:16``, ``per-row:inf``, ``is/lockstep``)
    on ``base``'s array size and BN handling."""
    text = spec.strip().lower()
    flow, _, rest = text.rpartition("/")
    name, _, depth = rest.partition(":")
    ok = name in SKIPPING_MODELS and (depth in ("", "inf") or depth.isdigit())
    check(ok, OWNER, "compare", f"must look like [os|ws|is/]MODEL[:DEPTH|inf], got {spec!r}")
    check(not depth or name == "per-row", OWNER, "compare", f"only per-row has a depth: {spec!r}")
    array = base.array
    if flow:
        array = ArrayConfig(rows=array.rows, cols=array.cols, dataflow=cast(Dataflow, flow))
    return AcceleratorConfig(
        array=array,
        skipping=cast(SkippingModel, name),
        lookahead=int(depth) if depth.isdigit() else None,
        bn_gradient=base.bn_gradient,
    )


def accelerators(text: str, base: AcceleratorConfig) -> tuple[AcceleratorConfig, ...]:
    """A comma-separated list of :func:`accelerator` specs (empty text: none)."""
    return tuple(accelerator(part, base) for part in text.split(",") if part.strip())


def _check_zoo_cnn(name: str, image_size: int) -> None:
    """``name`` is a zoo image CNN that can be built at ``image_size`` (else a ConfigError)."""
    spec = zoo.spec(name)
    check(spec.input_kind == "image", OWNER, "model", f"{name} is not an image CNN")
    zoo.resolve_options(name, {"image_size": image_size})


def cnn_model(text: str, *, image_size: int, num_classes: int) -> Callable[[], nn.Module]:
    """The model function ``--model`` names: a zoo image CNN built for ``image_size`` px images
    and ``num_classes`` classes, or user code (called as is; what it raises names its file)."""
    if is_reference(text):
        user_fn = load_callable(text, what="model function")

        # Wrapped: what the model's failures in training name is the user's function (found
        # through __wrapped__), not this closure.
        @functools.wraps(user_fn)
        def build_user_model() -> nn.Module:
            model: nn.Module = call_user(user_fn, what="model function")
            return model

        return build_user_model
    _check_zoo_cnn(text, image_size)
    spec = zoo.spec(text)
    options = zoo.resolve_options(text, {"image_size": image_size, "num_classes": num_classes})
    return functools.partial(spec.builder, options)


def cnn_loss(text: str) -> LossFn | None:
    """The training loss of the model ``--model`` names: the zoo's for a zoo model; None (the
    analyser's cross-entropy) for user code."""
    return None if is_reference(text) else zoo.loss_fn(text)


def image_source(text: str | None, image_size: int) -> ImageSource | None:
    """``--data``: the image folder, read now (None: the analyser's synthetic classes)."""
    return None if text is None else FolderImages(Path(text), image_size)


@dataclass(frozen=True, kw_only=True)
class AnalyzeRun:
    """What ``unstall sparse analyze`` hands :func:`unstall.sparse.analyze_cnn`."""

    model: CNNModel
    data: ImageSource | None
    loss: LossFn | None
    config: CNNSparsityConfig


def analyze_run(
    *,
    model: str,
    image_size: int,
    steps: int,
    warmup_steps: int,
    batch_size: int,
    array: str,
    dataflow: str,
    skipping: str,
    lookahead: int | None,
    compare: str,
    bn_gradient: str,
    data: str | None,
    lr: float,
    seed: int,
) -> AnalyzeRun:
    """The objects and config of an ``analyze`` run from its options; the cheap checks first,
    the image folder (read here) last."""
    main = AcceleratorConfig(
        array=array_config(array, dataflow),
        skipping=cast(SkippingModel, skipping),
        lookahead=lookahead,
        bn_gradient=cast(BnGradient, bn_gradient),
    )
    config = CNNSparsityConfig(
        analyzer=AnalyzerConfig(
            model=model,
            image_size=image_size,
            batch_size=batch_size,
            steps=steps,
            warmup_steps=warmup_steps,
            data=str(Path(data)) if data is not None else None,
            lr=lr,
            seed=seed,
        ),
        accelerator=main,
        compare=accelerators(compare, main),
    )
    if not is_reference(model):
        _check_zoo_cnn(model, image_size)
    source = image_source(data, image_size)
    classes = source.num_classes if source is not None else config.analyzer.num_classes
    return AnalyzeRun(
        model=cnn_model(model, image_size=image_size, num_classes=classes),
        data=source,
        loss=cnn_loss(model),
        config=config,
    )
