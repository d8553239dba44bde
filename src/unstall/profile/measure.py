"""The profiler's entry: profile a model, its data and its loss; report the stalls."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

from unstall.errors import ConfigError
from unstall.net.link import Link
from unstall.profile.config import AUTO_LABEL, InjectedDelays, ProfileConfig, profile_label
from unstall.profile.failures import check_not_bootstrapping
from unstall.profile.job import (
    LossFunction,
    ModelFunction,
    ModelShape,
    ProfiledJob,
    model_shape,
)
from unstall.profile.report import StallReport, build_report
from unstall.profile.runner import run_workers
from unstall.profile.sources import DataFunction, DataSource, UserData
from unstall.usercode import where_defined
from unstall.workload.user_functions import refuse_built_model, refuse_loss_class


def measure_stalls(
    model: ModelFunction,
    data: DataSource | DataFunction,
    *,
    loss: LossFunction | None = None,
    workers: int = 2,
    network: Link | None = None,
    iterations: int = 10,
    warmup: int = 3,
    repeats: int = 3,
    device: str = "cpu",
    nodes: int = 1,
    threads: int | None = None,
    bucket_mb: float = 25.0,
    seed: int = 0,
    profile_device: str = AUTO_LABEL,
    measure_overhead: bool = False,
    delays: InjectedDelays | None = None,
    timeout_s: float = 600.0,
    name: str | None = None,
    model_options: Mapping[str, object] | None = None,
    on_run: Callable[[str], None] | None = None,
) -> StallReport:
    """The differential stall profile of training ``model`` data-parallel on ``data``.

    ``model`` builds the model (``() -> nn.Module``; every worker calls it); ``data`` is a
    :class:`DataSource` or a data function ``(rank, world_size) -> iterable of (inputs,
    targets)``; ``loss(outputs, targets)`` returns a scalar tensor (default: cross-entropy).
    ``workers`` train with DDP (gloo on the CPU, NCCL with ``device="cuda"``), spawned on this
    host, or the processes torchrun launched (then ``workers`` and ``nodes`` must be its world
    size and hosts); one worker alone times no DDP run (no interconnect to measure). ``network``
    is the emulated link of the network run (``None``: no network run on one host; it needs two
    workers or more). The other settings are those of :class:`ProfileConfig`; the
    :class:`JobProfile` is labelled with the device the run used (``cpu`` and the CPU's name,
    or the GPU's preset). ``name`` and
    ``model_options`` label the report and its :class:`JobProfile` (default: the function's
    name, no options). ``on_run(name)`` is called as each run of each round ends (there are
    ``repeats * len(run_names(config, data.data_runs))``): a progress bar's hook.

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
    config = ProfileConfig(
        workers=workers,
        nodes=nodes,
        iterations=iterations,
        warmup=warmup,
        repeats=repeats,
        network=network,
        device=device,
        threads=threads,
        bucket_mb=bucket_mb,
        seed=seed,
        profile_device=profile_device,
        measure_overhead=measure_overhead,
        delays=delays or InjectedDelays(),
        timeout_s=timeout_s,
    )
    job = profiled_job(model, data, loss)
    label = name if name is not None else _name_of(model)
    return profile_job(config, job, name=label, model_options=model_options or {}, on_run=on_run)


def profiled_job(
    model: ModelFunction, data: DataSource | DataFunction, loss: LossFunction | None = None
) -> ProfiledJob:
    """The bundle the workers train: a data function becomes a :class:`UserData` source, no
    loss cross-entropy."""
    # Each worker builds its own copy of the model from the function.
    why = "must be a function (or class) returning an nn.Module"
    refuse_built_model("measure_stalls", "model", model, why)
    if not callable(model):
        raise ConfigError("measure_stalls", "model", f"{why}, got {type(model).__name__}")
    if not isinstance(data, DataSource):
        if not callable(data):
            raise ConfigError(
                "measure_stalls",
                "data",
                "must be a DataSource or a function (rank, world_size) -> batches",
            )
        data = UserData(data, label=where_defined(data))
    if loss is not None and not callable(loss):
        raise ConfigError("measure_stalls", "loss", "must be a function (outputs, targets)")
    refuse_loss_class(
        "measure_stalls", "loss", loss, "must be a function (outputs, targets) -> scalar tensor"
    )
    return ProfiledJob(model=model, data=data, loss=loss or nn.CrossEntropyLoss())


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
