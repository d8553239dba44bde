"""What the profiled workers train, and the static facts of its model.

A :class:`ProfiledJob` bundles the model function, the data source and the loss. Spawned
workers receive it as one cloudpickle blob: a function from a user's file (loaded through
:mod:`unstall.usercode`, which registers the file for pickling by value) then reaches a process
that could not import that file, while zoo functions travel by reference as usual.

What the user's file imported from its own folder (``from layers import Block`` beside
``my_model.py``) travels by reference, as any import: the blob names the folders of the user's
files, and a worker puts them on its ``sys.path`` before it unpickles the job, as the loader did
while the file ran.
"""

from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from unstall.profile.sources import DataSource
from unstall.results import JsonResult
from unstall.usercode import UserCodeError, call_user, is_library_file, where_defined
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
    """The job as bytes for a spawned worker (user code by value, see the module docstring),
    with the folders of the user's files."""
    import cloudpickle

    return cloudpickle.dumps((user_folders(job), cloudpickle.dumps(job)))


def unpack(blob: bytes) -> ProfiledJob:
    """The job :func:`pack` wrote; the user's folders go first on ``sys.path`` (for what their
    files import from beside them)."""
    folders, packed = pickle.loads(blob)
    for folder in reversed(folders):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    job = pickle.loads(packed)
    assert isinstance(job, ProfiledJob)
    return job


def user_folders(job: ProfiledJob) -> tuple[str, ...]:
    """The folders of the files that define the job's model, loss and data functions, those of
    Python, its installed packages and unstall left out."""
    functions = [job.model, job.loss, getattr(job.data, "fn", None)]
    functions.append(getattr(job.data, "make_batch", None))
    folders: dict[str, None] = {}
    for fn in filter(None, functions):
        target = getattr(fn, "__func__", fn)
        path = getattr(target, "__globals__", {}).get("__file__")
        if path is None:  # a class, or a loss module: its module's file
            module = sys.modules.get(getattr(target, "__module__", None) or "")
            path = getattr(module, "__file__", None)
        if isinstance(path, str) and not is_library_file(path):
            folders[os.path.dirname(os.path.realpath(path))] = None
    return tuple(folders)


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
