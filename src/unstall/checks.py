"""Checks of a value's kind for the front doors (the parameter server's, the profiler's) and the
data sources they take (:mod:`unstall.workload.zoo_jobs`): each raises a one-line
:class:`~unstall.errors.ConfigError` naming the owner and field, and returns
the value as plain Python (a numpy integer becomes ``int``), so that what a result and its JSON
show is the same whatever the caller passed.

It imports nothing of the package but its config helpers and errors, so that every part (and
every module of it) can use it.
"""

from __future__ import annotations

import inspect
import math
import numbers
import operator

import numpy as np

from unstall.config import is_real_number, is_whole_number
from unstall.errors import ConfigError

# The largest seed torch's generator takes (``torch.manual_seed`` refuses more); numpy's seed
# sequences, which derive every worker's and iteration's draws from it, refuse negative ones.
MAX_SEED = 2**64 - 1


def describe(value: object) -> str:
    """What ``value`` is, for a message: ``str 'psld'``, ``the function bandwidth``, ``the
    class AdamConfig``, ``a Linear instance``."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, str | bytes | numbers.Number):
        text = repr(value)
        return f"{type(value).__name__} {text[:57] + '...' if len(text) > 60 else text}"
    if isinstance(value, type):
        return f"the class {value.__qualname__}"
    if inspect.isroutine(value):
        return f"the function {getattr(value, '__qualname__', None) or value.__name__}"
    kind = type(value)
    if kind.__module__ == "builtins":  # "a list", not "a list instance"
        return f"a {kind.__name__}"
    return f"a {kind.__name__} instance"


def whole(
    owner: str,
    field: str,
    value: object,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int:
    """``value`` as an ``int``: an integer (a numpy one too; ``True`` is no count), within
    ``[minimum, maximum]`` where given."""
    if not is_whole_number(value):
        raise ConfigError(owner, field, f"must be an integer, got {describe(value)}")
    number = operator.index(value)
    if minimum is not None and number < minimum:
        raise ConfigError(owner, field, f"must be >= {minimum}, got {number}")
    if maximum is not None and number > maximum:
        raise ConfigError(owner, field, f"must be <= {maximum}, got {number}")
    return number


def optional_whole(
    owner: str, field: str, value: object, *, minimum: int | None = None
) -> int | None:
    """:func:`whole`, or None."""
    return None if value is None else whole(owner, field, value, minimum=minimum)


def seed_of(owner: str, value: object) -> int:
    """A run's seed: an integer that both torch's and numpy's generators take."""
    return whole(owner, "seed", value, minimum=0, maximum=MAX_SEED)


def real(owner: str, field: str, value: object) -> float:
    """``value`` as a ``float``: a real number (not a bool); its range is the caller's check."""
    if not is_real_number(value):
        raise ConfigError(owner, field, f"must be a number, got {describe(value)}")
    return float(value)


def flag(owner: str, field: str, value: object) -> bool:
    """``value`` as a ``bool``: True or False (a numpy bool too), not a truthy object."""
    if not isinstance(value, bool | np.bool_):
        raise ConfigError(owner, field, f"must be True or False, got {describe(value)}")
    return bool(value)


def positive_finite(owner: str, field: str, value: object) -> float:
    """A real number above 0 and finite (an infinite size cannot be cut into pieces)."""
    number = real(owner, field, value)
    if not (math.isfinite(number) and number > 0):
        raise ConfigError(owner, field, f"must be a finite number > 0, got {number}")
    return number
