"""A model replica: the torch side of a worker, and of the single-process reference.

Workers and the reference compute gradients with this same code, on one thread, so the two see
the same float32 operations on the same inputs and agree bit for bit.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
import torch

from unstall.ps.chunks import Chunk, TensorInfo, tensor_infos
from unstall.ps.data import Dataset, DataSpec, derive_seed, worker_batch
from unstall.workload import zoo


@dataclass(frozen=True, kw_only=True)
class ModelJob:
    """The model and data every worker of a run trains on."""

    model: str
    model_options: Mapping[str, object] = field(default_factory=dict)
    data: DataSpec = field(default_factory=DataSpec)
    workers: int = 2

    def __post_init__(self) -> None:
        object.__setattr__(self, "model_options", MappingProxyType(dict(self.model_options)))
        zoo.resolve_options(self.model, dict(self.model_options))  # validates name and options


@contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one thread (as the workers do), then restore the thread count."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _build(job: ModelJob, seed: int) -> torch.nn.Module:
    # Model builders draw from torch's global generator; fork it so the caller's is untouched.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return zoo.build(job.model, **job.model_options)


def initial_params(job: ModelJob) -> tuple[list[TensorInfo], list[np.ndarray]]:
    """The run's starting point: the model built with the data seed, as flat float32 arrays."""
    model = _build(job, job.data.seed)
    params = [p for p in model.parameters() if p.requires_grad]
    return tensor_infos(model), [p.detach().reshape(-1).numpy().copy() for p in params]


class ModelReplica:
    """One copy of the model whose parameters are written chunk by chunk and whose gradients
    are read as flat float32 arrays (views on the torch storage, no copy)."""

    def __init__(self, job: ModelJob, dataset: Dataset | None) -> None:
        self.job = job
        self.dataset = dataset
        self.model = _build(job, 0)  # its values are overwritten by the first pull
        self.model.train()
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.own = [p.data for p in self.params]  # the replica's own storage, writable
        self.flat = [p.view(-1).numpy() for p in self.own]
        self.loss_fn = zoo.loss_fn(job.model)

    def load(self, chunk: Chunk, values: np.ndarray) -> None:
        """Set the chunk's elements. A chunk that is a whole tensor becomes the parameter's
        storage as it is (zero-copy: a read-only view of the object store, which forward and
        backward only read); a slice is copied into the replica's own storage."""
        param = self.params[chunk.tensor]
        if chunk.start == 0 and chunk.stop == param.numel():
            with warnings.catch_warnings():  # read-only on purpose: nothing writes parameters
                warnings.simplefilter("ignore", UserWarning)
                param.data = torch.from_numpy(values).view(param.shape)
        else:
            self._copy_in(chunk.tensor, chunk.start, chunk.stop, values)

    def load_part(self, chunk: Chunk, start: int, stop: int, values: np.ndarray) -> None:
        """Set elements ``[start, stop)`` of the chunk (a piece of a pipelined push-pull)."""
        if start == 0 and stop == chunk.numel:
            self.load(chunk, values)
        else:
            self._copy_in(chunk.tensor, chunk.start + start, chunk.start + stop, values)

    def _copy_in(self, tensor: int, start: int, stop: int, values: np.ndarray) -> None:
        """Copy into the replica's own storage, which becomes the parameter's again if a
        whole-tensor load had replaced it (a run's first pull loads whole chunks that its
        push-pulls then return in parts; every part arrives before the next compute)."""
        param = self.params[tensor]
        if param.data.data_ptr() != self.own[tensor].data_ptr():
            param.data = self.own[tensor]
        np.copyto(self.flat[tensor][start:stop], values)

    def load_all(self, values: list[np.ndarray]) -> None:
        for dst, src in zip(self.flat, values, strict=True):
            np.copyto(dst, src)

    def gradients(self, iteration: int, rank: int) -> tuple[float, list[np.ndarray]]:
        """Loss and flat gradients of worker ``rank``'s shard of iteration ``iteration``."""
        job = self.job
        inputs, targets = worker_batch(
            job.data,
            job.model,
            dict(job.model_options),
            iteration=iteration,
            rank=rank,
            workers=job.workers,
            dataset=self.dataset,
        )
        self.model.zero_grad(set_to_none=True)
        # Dropout draws from torch's global generator: seed a fork of it per (iteration, rank)
        # so that the reference draws the same masks.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(job.data.seed, iteration, rank, 1))
            loss = self.loss_fn(self.model(inputs), targets)
            loss.backward()
        grads = [
            p.grad.detach().reshape(-1).numpy() if p.grad is not None else np.zeros_like(flat)
            for p, flat in zip(self.params, self.flat, strict=True)
        ]
        return float(loss.item()), grads
