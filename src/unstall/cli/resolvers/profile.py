"""The profiler's resolver: command-line text to the objects :func:`unstall.profile.measure_stalls`
takes.

- a model: any model name the simulator knows (a zoo name such as ``resnet18``, or one of the
  applications of Pollux's traces such as ``bert``, built as the zoo model that stands for it),
  a sweep variant (``resnet:depth=34``) or user code (``FILE.py:FUNC``, ``package.module:FUNC``:
  a function returning an ``nn.Module``);
- data: ``synthetic`` (a zoo model's random batches), an image folder (class folders
  ``DIR/CLASS/*.{png,jpg,jpeg}``, or the flat files of ``unstall profile data DIR``) read through
  a DataLoader, or user code (``FILE.py:FUNC``: ``(rank, world_size) -> iterable of (inputs,
  targets)``);
- a loss: a name of :data:`LOSSES` or user code (``loss(outputs, targets) -> scalar tensor``);
- the emulated link: ``GBPS[,LATENCY_MS]`` (Gbit/s per direction, milliseconds per bucket);
- a sweep of zoo variants for the comm-stall model: the function that profiles each one.

Every error is one line naming the option (``profile.model``, ``profile.data``, ...) or the file.
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
from unstall.net.link import Link
from unstall.profile import (
    DataSource,
    ImageFileData,
    ProfileConfig,
    SweepPoint,
    SyntheticData,
    UserData,
    measure_sweep_point,
)
from unstall.profile import resolve_device as choose_device
from unstall.profile.images import read_dataset
from unstall.usercode import is_reference, load_callable
from unstall.workload import zoo
from unstall.workload.job_specs import APPLICATION_MODELS

OWNER = "profile"
LOSSES: dict[str, Callable[[], nn.Module]] = {
    "cross_entropy": nn.CrossEntropyLoss,
    "mse": nn.MSELoss,
}
SYNTHETIC = "synthetic"
# The comm-stall model's default sweep: depth sweeps of three zoo families, and a model of
# another family held out to test the fit's prediction.
DEFAULT_SWEEP = (
    "resnet:depth=18",
    "resnet:depth=34",
    "resnet:depth=50",
    "vgg:depth=11",
    "vgg:depth=13",
    "vgg:depth=16",
    "mlp:depth=2",
    "mlp:depth=4",
    "mlp:depth=8",
)
DEFAULT_HELD_OUT = "mobilenet_v2"
DEFAULT_FIT_NETWORK = "1,1"


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
    """``--model``: a zoo name, a sweep variant ``NAME:key=value,...``, or user code."""
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


def synthetic_data(model: ResolvedModel, *, batch: int) -> SyntheticData:
    """Random batches of ``batch`` samples for zoo model ``model``."""
    if model.zoo_name is None:
        raise ConfigError(
            OWNER,
            "data",
            f"synthetic batches need a zoo model, and {model.name} is not one: give your data"
            " function (FILE.py:FUNC or package.module:FUNC)",
        )
    make = functools.partial(zoo.example_batch, model.zoo_name, batch, **model.options)
    return SyntheticData(make)


def resolve_data(
    text: str | None,
    model: ResolvedModel,
    *,
    batch: int = 8,
    workers: int = 0,
    image_size: int | None = None,
) -> DataSource:
    """``--data``: ``synthetic`` (the default), an image folder read by a DataLoader with
    ``workers`` worker processes (images resized to the model's ``image_size``, or to
    ``image_size`` for a model of your own), or a user data function."""
    check(batch >= 1, OWNER, "batch", f"must be >= 1, got {batch}")
    check(workers >= 0, OWNER, "data_workers", f"must be >= 0, got {workers}")
    folder = not (text is None or text == SYNTHETIC or is_reference(text))
    check(
        workers == 0 or folder,
        OWNER,
        "data_workers",
        "DataLoader workers read an image folder (--data DIR); synthetic batches need none, and"
        " a data function of your own sets up its own loader",
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
        f"{where} has {wanted} classes and {model.name} {has} outputs: give --model"
        f" {model.zoo_name}:num_classes={wanted}",
    )


def resolve_loss(text: str | None) -> Any:
    """``--loss``: a name of :data:`LOSSES` (default cross-entropy) or a user loss function."""
    if text is None:
        return LOSSES["cross_entropy"]()
    if is_reference(text):
        return load_callable(text, what="loss function")
    if text not in LOSSES:
        known = ", ".join(LOSSES)
        raise ConfigError(OWNER, "loss", f"unknown loss {text!r}; known: {known}, or FILE.py:FUNC")
    return LOSSES[text]()


def resolve_network(text: str | None) -> Link | None:
    """``--network GBPS[,LATENCY_MS]`` (e.g. ``1,0.5``: 1 Gbit/s, 0.5 ms per bucket) to a link."""
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    check(
        len(parts) in (1, 2), OWNER, "network", f"want GBPS,LATENCY_MS (e.g. 1,0.5), got {text!r}"
    )
    try:
        gbps, latency_ms = float(parts[0]), float(parts[1]) if len(parts) == 2 else 0.0
    except ValueError:
        raise ConfigError(
            OWNER, "network", f"GBPS,LATENCY_MS must be numbers, got {text!r}"
        ) from None
    check(gbps > 0, OWNER, "network", f"bandwidth must be > 0 Gbit/s, got {text!r}")
    check(latency_ms >= 0, OWNER, "network", f"latency must be >= 0 ms, got {text!r}")
    return Link(bandwidth_gbps=gbps, latency_us=latency_ms * 1e3)


def sweep_measure(
    variants: Sequence[str],
    config: ProfileConfig,
    *,
    batch: int = 8,
    image_size: int = 32,
    data: str | None = None,
    loss: str | None = None,
    data_workers: int = 0,
) -> Callable[[str], SweepPoint]:
    """Sweep variants (``NAME[:key=value,...]`` zoo models, or model functions of your own:
    ``FILE.py:FUNC``) to the function that profiles each one of them, as
    :func:`unstall.profile.measure_points` wants: on ``data`` (``--data`` as ``profile run``
    takes it, the same for every variant; default each zoo variant's synthetic batches) with
    ``loss``. Every variant is resolved now, so that a typo fails before the first minutes-long
    profile."""
    models = {v: resolve_model(v, image_size=image_size) for v in dict.fromkeys(variants)}
    sources = {
        v: resolve_data(data, model, batch=batch, workers=data_workers, image_size=image_size)
        for v, model in models.items()
    }
    loss_fn = resolve_loss(loss)

    def measure(variant: str) -> SweepPoint:
        model = models[variant]
        return measure_sweep_point(
            variant,
            model.build,
            sources[variant],
            config=config,
            loss=loss_fn,
            model_options=model.options,
        )

    return measure


def resolve_device(text: str, *, workers_per_node: int) -> str:
    """``--device auto|cpu|cuda`` on this host: ``auto`` takes CUDA when every worker of the
    host has a GPU."""
    import torch

    return choose_device(text, gpus=torch.cuda.device_count(), workers_per_node=workers_per_node)
