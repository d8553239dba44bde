"""Checks shared by the front doors that take a user's model and loss functions (the parameter
server's :func:`~unstall.ps.train.fit`, the profiler's
:func:`~unstall.profile.measure.measure_stalls`): the two mistakes torch makes easy, a model
already built where the function that builds it belongs, and a loss class where a loss is.

Both fail far from the call otherwise: a module is callable (its forward), so every worker
would call it with no input; a loss class called with ``(outputs, targets)`` builds a module of
them instead of returning a loss.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from unstall.errors import ConfigError


def import_path(kind: type) -> str:
    """How a user writes ``kind``: ``torch.nn.Linear`` for torch's layers (their module is
    ``torch.nn.modules.linear``), else ``module.Name`` (just ``Name`` for a script's own)."""
    if kind.__module__.startswith("torch.nn.") and getattr(nn, kind.__name__, None) is kind:
        return f"torch.nn.{kind.__name__}"
    if kind.__module__ in ("__main__", "builtins"):
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


def refuse_built_model(owner: str, field: str, value: Any, why: str) -> None:
    """Raise when ``value`` is a module already built: ``why`` says what the field takes."""
    if isinstance(value, nn.Module):
        kind = type(value)
        raise ConfigError(
            owner,
            field,
            f"{why}, got a {kind.__name__} instance: pass what builds one, e.g. "
            f"functools.partial({import_path(kind)}, ...) with its arguments",
        )


def refuse_loss_class(owner: str, field: str, value: Any, why: str) -> None:
    """Raise when ``value`` is a module class (``nn.MSELoss``) rather than one built."""
    if isinstance(value, type) and issubclass(value, nn.Module):
        raise ConfigError(
            owner,
            field,
            f"{why}, got the class {value.__qualname__}: build one, {import_path(value)}()",
        )
