"""A model replica: the torch side of a worker, and of the single-process reference.

Workers and the reference compute gradients with this same code, on one thread, so the two see
the same float32 operations on the same inputs and agree bit for bit. Every copy of the model
(the driver's, whose parameters are the run's starting point, each worker's and the
reference's) is built by the user's model function with torch's generator seeded by the run's
seed, so parameters that are not trained and buffers start equal everywhere too.

On ``"cuda"`` (:mod:`unstall.ps.device`) the model is built on the CPU as everywhere, then moved
to the GPU; the parameters the servers send are written into CPU copies, uploaded before each
forward, and the gradients come back to the CPU as float32 arrays.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from unstall.errors import UnstallError
from unstall.ps.chunks import Chunk, TensorInfo, tensor_infos
from unstall.ps.data import DataFn
from unstall.ps.device import CPU, float32_math, gpu_problem, seeded_on
from unstall.usercode import (
    UserCodeError,
    call_user,
    describe_exception,
    innermost_user_frame,
    where_defined,
)
from unstall.workload.batches import to_device
from unstall.workload.losses import LossFn, loss_problem
from unstall.workload.named import unwrap
from unstall.workload.zoo_jobs import Batch, derive_seed, seeded

ModelFn = Callable[[], nn.Module]


@dataclass(frozen=True, kw_only=True)
class TrainingJob:
    """What every worker of a run trains: the model, data and loss functions, the run's seed
    and the number of workers; ``record_batches``: workers keep every batch they train on (for
    the reference to replay); ``device``: where the workers compute (``"cpu"`` or
    ``"cuda"``)."""

    model: ModelFn
    data: DataFn
    loss: LossFn
    seed: int = 0
    workers: int = 2
    record_batches: bool = False
    device: str = CPU


def trainable(model: nn.Module) -> list[nn.Parameter]:
    """The parameters the servers own: those that require a gradient, in creation order."""
    return [p for p in model.parameters() if p.requires_grad]


def build_model(model_fn: ModelFn, seed: int) -> nn.Module:
    """The user's model, built with torch's generator seeded by ``seed`` (forked, so the
    caller's is untouched), checked to be a module of float32 CPU parameters."""
    fn = unwrap(model_fn)
    with seeded(seed):
        model = call_user(fn, what="model function")
    if not isinstance(model, nn.Module):
        raise UserCodeError(
            f"model function {where_defined(fn)} returned a {type(model).__name__}, "
            "not a torch.nn.Module"
        )
    params = trainable(model)
    if not params:
        frozen = sum(1 for _ in model.parameters())
        why = (
            f"none of the model's {frozen} parameter tensors requires a gradient (all frozen: "
            "the servers train those that do)"
            if frozen
            else "the model has no parameters"
        )
        raise UserCodeError(f"model function {where_defined(fn)}: {why}")
    for name, p in model.named_parameters():
        if p.requires_grad and (p.dtype != torch.float32 or p.device.type != "cpu"):
            raise UserCodeError(
                f"model function {where_defined(fn)}: parameter {name!r} is {p.dtype} on "
                f"{p.device}; the parameter server trains float32 parameters on the CPU"
            )
    return model


def describe_value(value: object) -> str:
    """What a batch's inputs or a loss is, for a message: ``a float32 tensor of shape (8, 5)``,
    ``a numpy float64 array of shape (8, 6)``, ``a list of 2``, ``a float``."""
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        return f"a {dtype} tensor of shape {tuple(value.shape)}"
    if isinstance(value, np.ndarray):
        return f"a numpy {value.dtype} array of shape {value.shape}"
    if isinstance(value, list | tuple | dict):
        return f"a {type(value).__name__} of {len(value)}"
    return "None" if value is None else f"a {type(value).__name__}"


def forward_error(
    model_fn: ModelFn, model: nn.Module, exc: BaseException, inputs: object
) -> UserCodeError:
    """The one-line error of a model's forward that raised: the model function that built it,
    the innermost line of code outside torch (the user's, where there is one), and the inputs
    it was given (a wrong shape or dtype of the data function's batches is the common cause)."""
    built = f"{type(model).__name__} built by model function {where_defined(unwrap(model_fn))}"
    frame = innermost_user_frame(exc)
    at = f" at {frame.path}, line {frame.line}" if frame is not None else ""
    hint = (
        " (the data function yields numpy arrays: yield torch tensors, torch.from_numpy(array))"
        if isinstance(inputs, np.ndarray)
        else ""
    )
    return UserCodeError(
        f"model's forward ({built}) failed{at} on inputs {describe_value(inputs)}: "
        f"{describe_exception(exc)}{hint}"
    )


def initial_params(model: nn.Module) -> tuple[list[TensorInfo], list[np.ndarray]]:
    """The run's starting point: ``model``'s trainable tensors, as flat float32 arrays."""
    return tensor_infos(model), [p.detach().reshape(-1).numpy().copy() for p in trainable(model)]


class ModelReplica:
    """One copy of the model whose parameters are written chunk by chunk and whose gradients
    are read as flat float32 arrays (views on the torch storage, no copy). On a GPU the
    chunks are written into CPU copies (:attr:`own`), which :meth:`gradients` uploads, and the
    gradients are copied back."""

    def __init__(self, job: TrainingJob) -> None:
        self.job = job
        self.device = torch.device(job.device)
        self.on_gpu = self.device.type != CPU
        if self.on_gpu and (problem := gpu_problem()) is not None:
            raise UnstallError(f"device={job.device!r}: {problem}")
        self.model = build_model(job.model, job.seed)  # trained values come with the first pull
        self.model.train()
        self.params = trainable(self.model)
        self.own = [p.data for p in self.params]  # the replica's own storage, writable
        self.flat = [p.view(-1).numpy() for p in self.own]
        if self.on_gpu:  # the parameters and buffers move; ``own`` stays on the CPU
            self.model.to(self.device)
            self.params = trainable(self.model)  # (``to`` may replace a Parameter object)
        self.loss_fn = unwrap(job.loss)

    def load(self, chunk: Chunk, values: np.ndarray) -> None:
        """Set the chunk's elements. A chunk that is a whole tensor becomes the parameter's
        storage as it is (zero-copy: a read-only view of the object store, which forward and
        backward only read); a slice is copied into the replica's own storage."""
        param = self.params[chunk.tensor]
        if self.on_gpu:
            np.copyto(self.flat[chunk.tensor][chunk.start : chunk.stop], values)
        elif chunk.start == 0 and chunk.stop == param.numel():
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
        if not self.on_gpu and param.data.data_ptr() != self.own[tensor].data_ptr():
            param.data = self.own[tensor]
        np.copyto(self.flat[tensor][start:stop], values)

    def load_all(self, values: list[np.ndarray]) -> None:
        for dst, src in zip(self.flat, values, strict=True):
            np.copyto(dst, src)

    def gradients(self, batch: Batch, iteration: int, rank: int) -> tuple[float, list[np.ndarray]]:
        """Loss and flat gradients of worker ``rank``'s ``batch`` in iteration ``iteration``."""
        if self.on_gpu:
            with float32_math(self.device):
                return self._gpu_gradients(batch, iteration, rank)
        inputs, targets = batch
        self.model.zero_grad(set_to_none=True)
        # Dropout draws from torch's global generator: seed a fork of it per (iteration, rank)
        # so that the reference draws the same masks.
        with seeded(derive_seed(self.job.seed, iteration, rank, 1)):
            loss = self._loss(inputs, targets)
            value = float(loss.item())
            if not math.isfinite(value):
                # Its gradients would make every parameter nan or inf at the step, and every
                # later iteration (and checkpoint) would carry them: stop before the push.
                raise self._not_finite(value, iteration, rank, inputs)
            loss.backward()
        grads = [
            p.grad.detach().reshape(-1).numpy() if p.grad is not None else np.zeros_like(flat)
            for p, flat in zip(self.params, self.flat, strict=True)
        ]
        return value, grads

    def _gpu_gradients(
        self, batch: Batch, iteration: int, rank: int
    ) -> tuple[float, list[np.ndarray]]:
        """:meth:`gradients` on the GPU: the CPU copies uploaded, the batch moved, the
        gradients brought back to the CPU."""
        with torch.no_grad():
            for param, own in zip(self.params, self.own, strict=True):
                param.data.copy_(own)
        inputs, targets = batch
        inputs, targets = to_device(inputs, self.device), to_device(targets, self.device)
        self.model.zero_grad(set_to_none=True)
        with seeded_on(derive_seed(self.job.seed, iteration, rank, 1), self.device):
            loss = self._loss(inputs, targets)
            value = float(loss.item())
            if not math.isfinite(value):
                raise self._not_finite(value, iteration, rank, inputs)
            loss.backward()
        grads = [
            p.grad.detach().reshape(-1).to(CPU).numpy()
            if p.grad is not None
            else np.zeros_like(flat)
            for p, flat in zip(self.params, self.flat, strict=True)
        ]
        return value, grads

    def _not_finite(self, value: float, iteration: int, rank: int, inputs: object) -> UserCodeError:
        return UserCodeError(
            f"loss function {where_defined(self.loss_fn)} returned {value} on worker "
            f"{rank}'s batch of iteration {iteration} (inputs: {describe_value(inputs)}): "
            "training cannot go on from it (lower the learning rate, or check the "
            "batches and the model's outputs)"
        )

    def _loss(self, inputs: object, targets: object) -> torch.Tensor:
        try:
            outputs = self.model(inputs)
        except UnstallError:
            raise
        except Exception as exc:
            raise forward_error(self.job.model, self.model, exc, inputs) from exc
        loss = call_user(self.loss_fn, outputs, targets, what="loss function")
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.requires_grad:
            # (A value that is not finite is for the caller to say, with the iteration's batch.)
            raise UserCodeError(f"loss function {where_defined(self.loss_fn)} {loss_problem(loss)}")
        return loss

    def buffers(self) -> dict[str, torch.Tensor]:
        """The model's buffers (e.g. BatchNorm's running statistics), copied."""
        return {name: b.detach().to(CPU, copy=True) for name, b in self.model.named_buffers()}

    def set_buffers(self, buffers: Mapping[str, torch.Tensor | np.ndarray]) -> None:
        """Set the model's buffers by name (a resumed run's, from its checkpoint)."""
        named = dict(self.model.named_buffers())
        unknown = sorted(set(buffers) - set(named))
        if unknown:
            raise UnstallError(f"the model has no buffer(s) {unknown}; it has {sorted(named)}")
        with torch.no_grad():
            for name, value in buffers.items():
                named[name].copy_(torch.as_tensor(value))
