"""Losses: the built-in ones by name, the resolver every front door shares, and the loss contract.

A loss is a callable ``loss(outputs, targets) -> scalar tensor`` that depends on the model.
:data:`LOSSES` holds the built-in ones by name; :func:`resolve_loss` turns what a caller gave (a
name, user code ``FILE.py:FUNC`` / ``package.module:FUNC``, or a callable) into one, the same for
the parameter server, the profiler and the live backend; :func:`loss_problem` says what is wrong
with a loss's value, the one rule both training loops check.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from unstall.checks import describe
from unstall.errors import ConfigError
from unstall.usercode import is_reference, load_callable
from unstall.workload.named import Named, unwrap
from unstall.workload.user_functions import refuse_loss_class

LossFn = Callable[[Any, Any], torch.Tensor]

LOSSES: dict[str, LossFn] = {"cross_entropy": F.cross_entropy, "mse": F.mse_loss}
DEFAULT_LOSS = "cross_entropy"
LOSS_WHY = "must be a function loss(outputs, targets) that returns a scalar tensor"


def resolve_loss(value: object, *, owner: str, field: str = "loss") -> LossFn:
    """A loss from ``value``: a name of :data:`LOSSES` (a :class:`Named` labelled with it), user
    code ``FILE.py:FUNC`` or ``package.module:FUNC`` (labelled with the reference), or a callable
    (a function, a loss module built, e.g. ``nn.MSELoss()``), returned as is. Anything else, a
    loss class not built among them, raises a :class:`~unstall.errors.ConfigError` naming
    ``owner`` and ``field``."""
    if isinstance(value, str):
        if is_reference(value):
            return Named(load_callable(value, what="loss function"), value)
        found = LOSSES.get(value)
        if found is None:
            known = ", ".join(LOSSES)
            raise ConfigError(
                owner,
                field,
                f"{value!r} is neither a loss ({known}) nor FILE.py:FUNC / module:FUNC",
            )
        return Named(found, value)
    fn = unwrap(value) if callable(value) else value
    refuse_loss_class(owner, field, fn, LOSS_WHY)  # nn.CrossEntropyLoss, not called
    if not callable(fn):
        raise ConfigError(
            owner, field, f"{LOSS_WHY} (or a name: {', '.join(LOSSES)}), got {describe(fn)}"
        )
    return value  # type: ignore[return-value]  # callable, checked above


def loss_problem(loss: object) -> str | None:
    """What is wrong with a value a loss function returned (``"returned a float, not a scalar
    tensor that depends on the model (...)"``; ``"returned nan"`` for a value that is not finite),
    or None for a finite scalar tensor that backward can start from: the loss contract every
    training loop checks."""
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        what = _describe_value(loss)
        return f"returned {what}, not a scalar tensor that depends on the model{_hint(loss)}"
    if not loss.requires_grad:
        return (
            f"returned {_describe_value(loss)} that does not require grad, not a scalar tensor"
            " that depends on the model: the backward pass has nothing to start from (compute"
            " it from the outputs without .detach(), .item() or torch.no_grad())"
        )
    if not math.isfinite(float(loss.detach().item())):
        return f"returned {float(loss.detach().item())}"  # (the caller says why that cannot go)
    return None


def _hint(loss: object) -> str:
    """What to do about a loss that is not a scalar tensor."""
    if isinstance(loss, torch.Tensor):
        return " (reduce it to one value, e.g. .mean())"
    if isinstance(loss, numbers.Number):
        return " (compute it from the outputs with torch, without .item(), float() or .detach())"
    return ""


def _describe_value(value: object) -> str:
    """``a float32 tensor of shape (8,)``, ``a float``, ``None``."""
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        return f"a {dtype} tensor of shape {tuple(value.shape)}"
    return "None" if value is None else f"a {type(value).__name__}"
