"""What the profiled workers train, and the static facts of its model.

A :class:`ProfiledJob` bundles the model function, the data source and the loss. Spawned
workers receive it as one cloudpickle blob: a function from a user's file (loaded through
:mod:`unstall.usercode`, which registers the file for pickling by value) then reaches a process
that could not import that file, while zoo functions travel by reference as usual.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from unstall.profile.sources import DataSource
from unstall.results import JsonResult
from unstall.usercode import UserCodeError, call_user, where_defined
from unstall.workload.model_facts import count_layers, tensor_facts

ModelFunction = Callable[[], nn.Module]
LossFunction = Callable[[Any, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class ProfiledJob:
    """The model function (``() -> nn.Module``), the data source, and the loss
    (``loss(outputs, targets) -> scalar tensor``)."""

    model: ModelFunction
    data: DataSource
    loss: LossFunction


def pack(job: ProfiledJob) -> bytes:
    """The job as bytes for a spawned worker (user code by value, see the module docstring)."""
    import cloudpickle

    return cloudpickle.dumps(job)


def unpack(blob: bytes) -> ProfiledJob:
    """The job :func:`pack` wrote."""
    job = pickle.loads(blob)
    assert isinstance(job, ProfiledJob)
    return job


def build_model(model_fn: ModelFunction) -> nn.Module:
    """``model_fn()``, checked to be an ``nn.Module``; errors name the function."""
    model = call_user(model_fn, what="model function")
    if not isinstance(model, nn.Module):
        raise UserCodeError(
            f"model function {where_defined(model_fn)} returned a {type(model).__name__},"
            " not a torch.nn.Module"
        )
    return model


@dataclass(frozen=True, kw_only=True)
class ModelShape(JsonResult):
    """What the profile needs to know of the model without running it: its gradient bytes and
    tensors, its weight layers (as :mod:`unstall.workload.model_facts` counts them), and the
    bytes of each parameter tensor in registration order (what DDP packs into buckets).
    ``parameter_bytes`` counts every parameter, frozen ones too; the gradients only the
    trainable ones."""

    parameter_bytes: int
    gradient_bytes: int
    gradient_tensors: int
    layers: int
    tensor_bytes: tuple[int, ...]


def model_shape(model_fn: ModelFunction) -> ModelShape:
    """The :class:`ModelShape` of the model ``model_fn`` builds.

    Built on the meta device (no memory, no initialisation) when the function allows it; a
    function that cannot build there (it loads weights, say) is called normally.
    """
    try:
        with torch.device("meta"):
            model = model_fn()
        if not isinstance(model, nn.Module):
            raise TypeError("not a module")
    except Exception:
        model = build_model(model_fn)
    trainable = [p for p in model.parameters() if p.requires_grad]
    return ModelShape(
        parameter_bytes=sum(p.numel() * p.element_size() for p in model.parameters()),
        gradient_bytes=sum(p.numel() * p.element_size() for p in trainable),
        gradient_tensors=len(trainable),
        layers=count_layers(model),
        tensor_bytes=tuple(t.bytes for t in tensor_facts(model)),
    )
