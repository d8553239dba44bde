"""Where the workers compute: ``"cpu"`` (the default) or ``"cuda"``, one GPU per worker.

The servers, the optimizer's step and everything that crosses Ray stay on the CPU; a worker on
``"cuda"`` builds the user's model on the CPU (as every copy is built, from the run's seed),
moves it to its GPU, moves each batch there, and brings its gradients back to the CPU before
it pushes them. Ray picks the GPU: a worker actor asks for ``num_gpus=1`` and Ray sets its
``CUDA_VISIBLE_DEVICES``, so inside the actor the GPU is always ``cuda:0`` and a ``cuda:N`` of
the user's would name nothing useful (refused, with that hint).

This module holds the pure parts (the check of a device's name, the actor options that ask Ray
for a GPU, the refusal of a cluster without enough GPUs, the reference check's tolerance) and
the torch helpers a replica computes with on a GPU (batches moved, float32 arithmetic, seeded
generators).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from unstall import checks
from unstall.errors import ConfigError
from unstall.workload.zoo_jobs import seeded

CPU = "cpu"
CUDA = "cuda"
DEVICES = (CPU, CUDA)

# The reference check's bound (relative, per tensor). On the CPU workers and the replay run
# the same float32 operations in the same order and agree bit for bit, well within 1e-6. On a
# GPU they do not: cuBLAS and cuDNN add in another order than the CPU's kernels (the replay runs
# on the CPU when the driver has no GPU), and some backward kernels accumulate with atomics in
# no fixed order, so float32 rounding alone separates the two by more than 1e-6 over a few
# iterations. 1e-4 still catches a wrong update (a lost or doubled gradient, a stale chunk,
# which are off by the size of a step, orders of magnitude more).
CPU_REL_TOL = 1e-6
CUDA_REL_TOL = 1e-4


def check_device(owner: str, value: object) -> str:
    """``value`` as a device name, ``"cpu"`` or ``"cuda"`` (a ``torch.device`` of either kind
    is taken too); anything else raises a one-line :class:`ConfigError` naming ``device``."""
    if isinstance(value, torch.device):
        value = str(value)
    if not isinstance(value, str):
        raise ConfigError(owner, "device", f"must be 'cpu' or 'cuda', got {checks.describe(value)}")
    kind, _, index = value.partition(":")
    if kind == CUDA and index:
        raise ConfigError(
            owner,
            "device",
            f"{value!r} names one GPU, but Ray gives each worker its own (num_gpus=1, seen as "
            "cuda:0 inside the worker): use device='cuda'",
        )
    if value not in DEVICES:
        raise ConfigError(owner, "device", f"must be 'cpu' or 'cuda', got {value!r}")
    return value


def worker_options(
    device: str, count: int, cluster_cpus: float, worker_cpus: float | None = None
) -> dict[str, Any]:
    """The Ray options of a worker actor of a run of ``count`` workers: one CPU each (less when
    the cluster has fewer; ``worker_cpus`` overrides), spread over the nodes, and on
    ``"cuda"`` one GPU each (Ray sets the actor's ``CUDA_VISIBLE_DEVICES`` to it)."""
    cpus = worker_cpus if worker_cpus is not None else min(1.0, cluster_cpus / count)
    options: dict[str, Any] = {"num_cpus": cpus, "scheduling_strategy": "SPREAD"}
    if device == CUDA:
        options["num_gpus"] = 1
    return options


def check_gpus(owner: str, device: str, workers: int, cluster_gpus: float) -> None:
    """Refuse a ``"cuda"`` run on a Ray cluster with fewer GPUs than workers, before any
    actor starts (Ray would otherwise wait for GPUs that never come)."""
    if device != CUDA or cluster_gpus >= workers:
        return
    have = int(cluster_gpus) if float(cluster_gpus).is_integer() else cluster_gpus
    raise ConfigError(
        owner,
        "device",
        f"device='cuda' needs a GPU per worker ({workers} workers); this Ray cluster has "
        f"{have} GPU{'' if have == 1 else 's'}",
    )


def reference_device(device: str) -> str:
    """Where the driver replays a run for the reference check: a ``"cuda"`` run's on the
    driver's GPU when it has one (the workers' kind of arithmetic), else on the CPU."""
    return CUDA if device == CUDA and torch.cuda.is_available() else CPU


def rel_tol(device: str) -> float:
    """The reference check's bound for a run on ``device`` (see :data:`CUDA_REL_TOL`)."""
    return CUDA_REL_TOL if device == CUDA else CPU_REL_TOL


@contextmanager
def float32_math(device: torch.device) -> Iterator[None]:
    """On a GPU, float32 arithmetic as the parameters are (no TF32 in matmuls and
    convolutions, deterministic cuDNN algorithms), as it was after; on the CPU nothing."""
    if device.type != CUDA:
        yield
        return
    backends = torch.backends
    saved = (
        backends.cuda.matmul.allow_tf32,
        backends.cudnn.allow_tf32,
        backends.cudnn.deterministic,
    )
    backends.cuda.matmul.allow_tf32 = False
    backends.cudnn.allow_tf32 = False
    backends.cudnn.deterministic = True
    try:
        yield
    finally:
        (
            backends.cuda.matmul.allow_tf32,
            backends.cudnn.allow_tf32,
            backends.cudnn.deterministic,
        ) = saved


@contextmanager
def seeded_on(seed: int, device: torch.device) -> Iterator[None]:
    """Torch's generators seeded with ``seed`` inside, and as they were after: the CPU's (as
    :func:`~unstall.workload.zoo_jobs.seeded`), and on a GPU that GPU's too (dropout on a GPU
    draws from it)."""
    if device.type != CUDA:
        with seeded(seed):
            yield
        return
    index = device.index if device.index is not None else torch.cuda.current_device()
    with torch.random.fork_rng(devices=[index]):
        torch.manual_seed(seed)
        yield


def gpu_problem() -> str | None:
    """Why this process cannot compute on ``"cuda"`` (None: it can)."""
    if torch.version.cuda is None:
        return f"torch {torch.__version__} here is built without CUDA"
    if not torch.cuda.is_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        return f"torch sees no GPU here (CUDA_VISIBLE_DEVICES={visible!r})"
    return None
