"""The sparsity analyser's names: an array ``32x16``, an accelerator ``ws/per-row:16``, a CNN by
name (a zoo image CNN such as ``resnet18``, or user code ``FILE.py:NAME`` /
``package.module:NAME`` naming a function that returns an ``nn.Module``), its loss, and an image
folder, to the objects :func:`unstall.sparse.cnn.analyze_cnn` and its configs take.

Each bad name gives one :class:`~unstall.errors.ConfigError` naming the parameter of the
analysis (``analyze.array``, ``analyze.compare``, ``analyze.model``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import cast

from torch import nn

from unstall.config import check
from unstall.sparse.cnn.accelerator import (
    SKIPPING_MODELS,
    AcceleratorConfig,
    ArrayConfig,
    SkippingModel,
)
from unstall.sparse.cnn.data import FolderImages, ImageSource
from unstall.sparse.cnn.scalesim_adapter import Dataflow
from unstall.sparse.cnn.training import LossFn
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


def check_zoo_cnn(name: str, image_size: int) -> None:
    """``name`` is a zoo image CNN that can be built at ``image_size`` (else a ConfigError)."""
    spec = zoo.spec(name)
    check(spec.input_kind == "image", OWNER, "model", f"{name} is not an image CNN")
    zoo.resolve_options(name, {"image_size": image_size})


def cnn_model(text: str, *, image_size: int, num_classes: int) -> Callable[[], nn.Module]:
    """The model function ``text`` names: a zoo image CNN built for ``image_size`` px images and
    ``num_classes`` classes, or user code (called as is; what it raises names its file)."""
    if is_reference(text):
        user_fn = load_callable(text, what="model function")

        # Wrapped: what the model's failures in training name is the user's function (found
        # through __wrapped__), not this closure.
        @functools.wraps(user_fn)
        def build_user_model() -> nn.Module:
            model: nn.Module = call_user(user_fn, what="model function")
            return model

        return build_user_model
    check_zoo_cnn(text, image_size)
    spec = zoo.spec(text)
    options = zoo.resolve_options(text, {"image_size": image_size, "num_classes": num_classes})
    return functools.partial(spec.builder, options)


def cnn_loss(text: str) -> LossFn | None:
    """The training loss of the model ``text`` names: the zoo's for a zoo model; None (the
    analyser's cross-entropy) for user code."""
    return None if is_reference(text) else zoo.loss_fn(text)


def image_source(text: str | None, image_size: int) -> ImageSource | None:
    """The image folder ``text`` names, read now (None: the analyser's synthetic classes)."""
    return None if text is None else FolderImages(Path(text), image_size)
