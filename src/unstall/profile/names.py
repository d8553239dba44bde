"""The profiler's names: what a model, data, a loss or a sweep is called, to the objects
:func:`unstall.profile.measure_stalls` takes (the command line, the benchmarks and a user's script
name them alike).

- a model: any model name the simulator knows (a zoo name such as ``resnet18``, or one of the
  applications of Pollux's traces such as ``bert``, built as the zoo model that stands for it),
  a sweep variant (``resnet:depth=34``) or user code (``FILE.py:FUNC``, ``package.module:FUNC``:
  a function returning an ``nn.Module``);
- data: ``synthetic`` (a zoo model's random batches), an image folder (class folders
  ``DIR/CLASS/*.{png,jpg,jpeg}``, or the flat files of ``unstall profile data DIR``) read through
  a DataLoader, or user code (``FILE.py:FUNC``: ``(rank, world_size) -> iterable of (inputs,
  targets)``);
- a loss: a name of :data:`unstall.workload.losses.LOSSES` or user code (``loss(outputs,
  targets) -> scalar tensor``);
- (the comm-stall model's default sweep, and the function that profiles each variant of a
  sweep, are :mod:`unstall.profile.sweep`'s ``DEFAULT_SWEEP`` and ``sweep_measure``.)

Every error is one line naming the parameter (``profile.model``, ``profile.data``, ...) or the
file.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from unstall.config import check
from unstall.errors import ConfigError
from unstall.profile.config import resolve_device as choose_device
from unstall.profile.images import read_dataset
from unstall.profile.sources import DataSource, ImageFileData, SyntheticBatches, UserData
from unstall.usercode import is_reference, load_callable
from unstall.workload import zoo
from unstall.workload.job_specs import APPLICATION_MODELS
from unstall.workload.losses import DEFAULT_LOSS, LossFn
from unstall.workload.losses import resolve_loss as resolve_any_loss
from unstall.workload.named import unwrap
from unstall.workload.zoo_jobs import zoo_data

OWNER = "profile"
SYNTHETIC = "synthetic"
DEFAULT_BATCH = 8  # samples per worker of synthetic and image-folder data


@dataclass(frozen=True)
class ResolvedModel:
    """A model function and the labels a report shows: ``name`` (the zoo name, or the user-code
    reference as typed) and ``options`` (a zoo model's options, defaults left out). ``zoo_name``
    is the zoo model behind it, if any (it has synthetic batches); ``input_kind`` what it takes
    ("image", ...)."""

    build: Callable[[], nn.Module]
    name: str
    options: dict[str, Any] = field(default_factory=dict)
    zoo_name: str | None = None
    input_kind: str | None = None


def profilable_models() -> list[str]:
    """Every model name ``--model`` takes: the zoo's and the simulator's application names."""
    return sorted({*zoo.names(), *APPLICATION_MODELS})


def parse_variant(text: str) -> tuple[str, dict[str, object]]:
    """``"NAME[:key=value,...]"`` (integer or float values) to a zoo name and its options."""
    name, _, rest = text.partition(":")
    options: dict[str, object] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError("variant", text, f"option {item!r} is not key=value")
        try:
            options[key.strip()] = (
                int(value) if value.strip().lstrip("-").isdigit() else float(value)
            )
        except ValueError as exc:
            raise ConfigError("variant", text, f"option {key!r} is not a number") from exc
    name = name.strip()
    if name not in zoo.MODEL_REGISTRY:
        known = ", ".join(profilable_models())
        raise ConfigError(
            OWNER, "model", f"unknown model {name!r}; known: {known}, or FILE.py:FUNC"
        )
    zoo.resolve_options(name, options)  # unknown option: a clear error now
    return name, options


def zoo_model(
    name: str, *, image_size: int = 32, options: dict[str, object] | None = None
) -> ResolvedModel:
    """Zoo model ``name`` with ``options``; image models at ``image_size`` pixels a side."""
    check(
        image_size >= 32, OWNER, "image_size", f"must be >= 32 (zoo image models), got {image_size}"
    )
    spec = zoo.spec(name)
    full: dict[str, object] = {}
    if "image_size" in spec.defaults:
        full["image_size"] = image_size
    full.update(options or {})
    zoo.resolve_options(name, full)
    return ResolvedModel(
        build=functools.partial(zoo.build, name, **full),
        name=name,
        options=full,
        zoo_name=name,
        input_kind=spec.input_kind,
    )


def resolve_model(text: str, *, image_size: int = 32) -> ResolvedModel:
    """A model by name: a zoo name, a sweep variant ``NAME:key=value,...``, or user code."""
    if is_reference(text) and not _is_variant(text):
        return ResolvedModel(build=load_callable(text, what="model function"), name=text)
    if text in APPLICATION_MODELS:  # the simulator's name for it labels the profile
        zoo_name, options = APPLICATION_MODELS[text]
        found = zoo_model(zoo_name, image_size=image_size, options=options)
        return dataclasses.replace(found, name=text)
    name, options = parse_variant(text)
    return zoo_model(name, image_size=image_size, options=options)


def _is_variant(text: str) -> bool:
    """``resnet:depth=34`` is a zoo variant, not ``module:function``: its right side has ``=``."""
    return "=" in text.rpartition(":")[2] and text.partition(":")[0] in zoo.names()


def synthetic_data(model: ResolvedModel, *, batch: int, seed: int = 0) -> SyntheticBatches:
    """Random batches of ``batch`` samples for zoo model ``model`` (the workload's synthetic
    data, one seed rule for every part)."""
    if model.zoo_name is None:
        raise ConfigError(
            OWNER,
            "data",
            f"synthetic batches need a zoo model, and {model.name} is not one: give your data"
            " function (FILE.py:FUNC or package.module:FUNC)",
        )
    return SyntheticBatches(zoo_data(model.zoo_name, batch, seed, model.options))


def resolve_data(
    text: str | None,
    model: ResolvedModel,
    *,
    batch: int = DEFAULT_BATCH,
    workers: int = 0,
    image_size: int | None = None,
) -> DataSource:
    """Data by name: ``synthetic`` (the default), an image folder read by a DataLoader with
    ``workers`` worker processes (images resized to the model's ``image_size``, or to
    ``image_size`` for a model of your own), or a user data function."""
    check(batch >= 1, OWNER, "batch", f"must be >= 1, got {batch}")
    check(workers >= 0, OWNER, "data_workers", f"must be >= 0, got {workers}")
    folder = not (text is None or text == SYNTHETIC or is_reference(text))
    check(
        workers == 0 or folder,
        OWNER,
        "data_workers",
        "DataLoader workers read an image folder (data a folder); synthetic batches need none,"
        " and a data function of your own sets up its own loader",
    )
    if text is None or text == SYNTHETIC:
        return synthetic_data(model, batch=batch)
    if is_reference(text):
        return UserData(load_callable(text, what="data function"), label=text)
    if model.input_kind not in (None, "image"):
        raise ConfigError(
            OWNER,
            "data",
            f"the image files of {text} feed images; {model.name} takes {model.input_kind}",
        )
    images = read_dataset(Path(text))
    memory = None
    if model.zoo_name is not None:
        memory = synthetic_data(model, batch=batch)
        _check_classes(model, images.labels, text)
    size = model.options.get("image_size", image_size)
    return ImageFileData(
        images,
        batch,
        memory=memory,
        label=text,
        workers=workers,
        image_size=size if isinstance(size, int) else None,
    )


def _check_classes(model: ResolvedModel, labels: Sequence[int], where: str) -> None:
    """A zoo model must have an output for every class of the data set."""
    assert model.zoo_name is not None
    wanted = max(labels) + 1
    has = getattr(zoo.resolve_options(model.zoo_name, model.options), "num_classes", wanted)
    check(
        wanted <= has,
        OWNER,
        "data",
        f"{where} has {wanted} classes and {model.name} {has} outputs: give the model"
        f" {model.zoo_name}:num_classes={wanted}",
    )


def resolve_loss(value: object = None, *, owner: str = OWNER) -> LossFn:
    """A loss: a name of :data:`unstall.workload.losses.LOSSES` (None: cross-entropy), user code
    or a loss function."""
    # Bare (a Named's call would be timed with the loss): failures name it by its function.
    return unwrap(resolve_any_loss(DEFAULT_LOSS if value is None else value, owner=owner))


def resolve_device(text: str, *, workers_per_node: int) -> str:
    """``auto``, ``cpu`` or ``cuda`` on this host: ``auto`` takes CUDA when every worker of the
    host has a GPU."""
    import torch

    return choose_device(text, gpus=torch.cuda.device_count(), workers_per_node=workers_per_node)
