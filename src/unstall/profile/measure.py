"""The profiler's entry: profile a model, its data and its loss; report the stalls."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from unstall.checks import describe
from unstall.errors import ConfigError
from unstall.profile.config import ProfileConfig, profile_label
from unstall.profile.failures import check_not_bootstrapping
from unstall.profile.job import (
    LossFunction,
    ModelFunction,
    ModelShape,
    ProfiledJob,
    model_shape,
)
from unstall.profile.names import (
    DEFAULT_BATCH,
    ResolvedModel,
    resolve_data,
    resolve_loss,
    resolve_model,
)
from unstall.profile.report import StallReport, build_report
from unstall.profile.runner import run_workers
from unstall.profile.sources import DataFunction, DataSource, SyntheticBatches, UserData
from unstall.usercode import where_defined
from unstall.workload.user_functions import refuse_built_model
from unstall.workload.zoo_jobs import SyntheticData


def measure_stalls(
    model: ModelFunction | str,
    data: DataSource | SyntheticData | DataFunction | str | None = None,
    config: ProfileConfig | None = None,
    *,
    loss: LossFunction | str | None = None,
    name: str | None = None,
    model_options: Mapping[str, object] | None = None,
    batch: int = DEFAULT_BATCH,
    on_run: Callable[[str], None] | None = None,
    **settings: Any,
) -> StallReport:
    """The differential stall profile of training ``model`` data-parallel on ``data``.

    ``model`` builds the model (``() -> nn.Module``; every worker calls it), or names one (a zoo
    name, a sweep variant ``resnet:depth=34``, user code ``FILE.py:FUNC``); ``data`` is a
    :class:`DataSource`, a :class:`SyntheticData`, a data function ``(rank, world_size) ->
    iterable of (inputs, targets)``, or a name (``synthetic``, the default with a named zoo
    model; an image folder; user code), named data in batches of ``batch``;
    ``loss(outputs, targets)`` returns a scalar tensor (or a name: ``cross_entropy``, the
    default, ``mse``, user code).

    ``config`` is how the runs go (a :class:`ProfileConfig`: workers, hosts, repeats, the
    emulated link, the device...), built once by the caller and handed over whole; without one,
    the keyword ``settings`` are its fields (``workers=2, network=link, iterations=2``), built
    into one here. ``workers`` train with DDP (gloo on the CPU, NCCL with ``device="cuda"``),
    spawned on this host, or the processes torchrun launched (then ``workers`` and ``nodes``
    must be its world size and hosts); one worker alone times no DDP run (no interconnect to
    measure). ``network`` is the emulated link of the network run (``None``: no network run on
    one host; it needs two workers or more). The :class:`JobProfile` is labelled with the
    device the run used (``cpu`` and the CPU's name, or the GPU's preset). ``name`` and
    ``model_options`` label the report and its :class:`JobProfile` (default: the model's name,
    or the function's, and a named zoo model's options). ``on_run(name)`` is called as each run
    of each round ends (there are ``config.repeats * len(run_names(config, data.data_runs))``):
    a progress bar's hook.

    Functions from a user's file loaded with :mod:`unstall.usercode` reach the spawned workers by
    value; other functions must be importable by the workers (defined in a module, not in
    ``__main__`` or a notebook cell, unless cloudpickle can send them by value).

    The workers are started with spawn, which runs the calling script again in each of them: a
    script that calls ``measure_stalls`` must guard its top-level code with
    ``if __name__ == "__main__":`` (or call it from an importable file), as with any
    multiprocessing code; without the guard every worker would call it again.
    """
    # In a worker spawn is starting (an unguarded script run again): one clear line, before
    # the model is built or multiprocessing refuses to start processes in many lines.
    check_not_bootstrapping()
    config = profile_config(config, settings)
    if isinstance(model, str):
        target = resolve_model(model)
        model, name = target.build, target.name if name is None else name
        model_options = target.options if model_options is None else model_options
    else:
        target = ResolvedModel(build=check_model(model), name=name or _name_of(model))
    if isinstance(data, str) or data is None:
        data = resolve_data(data, target, batch=batch)
    job = profiled_job(model, data, loss)
    label = name if name is not None else _name_of(model)
    return profile_job(config, job, name=label, model_options=model_options or {}, on_run=on_run)


def profile_config(config: object, settings: Mapping[str, Any]) -> ProfileConfig:
    """``config``, or one built of the keyword ``settings`` (its fields) when it is None."""
    if config is None:
        unknown = sorted(set(settings) - {f.name for f in dataclasses.fields(ProfileConfig)})
        if unknown:
            raise TypeError(
                f"measure_stalls() got unexpected keyword argument(s) {', '.join(unknown)}: it"
                " takes a ProfileConfig's fields, or config=ProfileConfig(...)"
            )
        return ProfileConfig(**settings)
    if not isinstance(config, ProfileConfig):
        raise ConfigError(
            "measure_stalls", "config", f"must be a ProfileConfig, got {describe(config)}"
        )
    if settings:
        raise ConfigError(
            "measure_stalls",
            "config",
            f"given with {', '.join(sorted(settings))}: put them in the config,"
            " dataclasses.replace(config, ...)",
        )
    return config


def check_model(model: Any) -> ModelFunction:
    """A function (or class) that builds the model; a module already built is refused."""
    # Each worker builds its own copy of the model from the function.
    why = "must be a function (or class) returning an nn.Module, or a model's name"
    refuse_built_model("measure_stalls", "model", model, why)
    if not callable(model):
        raise ConfigError("measure_stalls", "model", f"{why}, got {describe(model)}")
    return model  # callable, checked above


def profiled_job(
    model: ModelFunction,
    data: DataSource | SyntheticData | DataFunction,
    loss: LossFunction | str | None = None,
) -> ProfiledJob:
    """The bundle the workers train: a data function becomes a :class:`UserData` source, a
    :class:`SyntheticData` a :class:`SyntheticBatches` one; the loss a name or a function (no
    loss: cross-entropy)."""
    check_model(model)
    if isinstance(data, SyntheticData):
        data = SyntheticBatches(data)
    elif not isinstance(data, DataSource):
        if not callable(data):
            raise ConfigError(
                "measure_stalls",
                "data",
                "must be a DataSource, a SyntheticData, a function (rank, world_size) -> batches"
                f" or a name, got {describe(data)}",
            )
        data = UserData(data, label=where_defined(data))
    return ProfiledJob(model=model, data=data, loss=resolve_loss(loss, owner="measure_stalls"))


def profile_job(
    config: ProfileConfig,
    job: ProfiledJob,
    *,
    name: str,
    model_options: Mapping[str, object],
    shape: ModelShape | None = None,
    on_run: Callable[[str], None] | None = None,
) -> StallReport:
    """Run the differential profile of ``job`` as ``config`` says; report it as ``name``.
    ``shape`` is the model's, when the caller has it already; ``on_run`` follows the runs."""
    shape = shape or model_shape(job.model)
    if shape.gradient_tensors == 0 or shape.layers == 0:
        raise ConfigError(
            "measure_stalls",
            "model",
            f"{name} has {shape.gradient_tensors} trainable tensors and {shape.layers} weight"
            " layers (Linear, convolution, embedding, recurrent, attention); a data-parallel"
            " profile needs at least one of each",
        )
    if config.device == "cuda":  # a GPU no preset names fails now, not after the runs
        import torch

        profile_label(config.device, config.profile_device, torch.cuda.get_device_name(0))
    raw = run_workers(config, job, on_run)
    return build_report(
        config,
        raw,
        model=name,
        model_options=model_options,
        shape=shape,
        data=job.data.describe(),
    )


def _name_of(model: Any) -> str:
    return str(getattr(model, "__name__", None) or type(model).__name__)
