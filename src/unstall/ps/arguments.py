"""The front door's argument checks: what :func:`~unstall.ps.train.fit` and
:func:`~unstall.ps.train.predict_iter_s` were given, checked for its kind before anything runs.

A wrong kind of argument (a strategy's name instead of the strategy, a scenario's factory
instead of the scenario, ``"2"`` workers) would otherwise fail far from the call: as an
``AttributeError`` inside the planner, or in a server or worker after Ray has started actors,
blamed on unstall's own code. Each check raises a one-line
:class:`~unstall.errors.ConfigError` naming the function and the parameter, saying what it
takes and, where the mistake is a common one, what to write instead; numbers, counts and flags
are checked by :mod:`unstall.checks`.

A strategy, scenario, optimizer or loss may be given by name (``"psld"``, ``"bandwidth"`` or a
scenario file, ``"adam"``, ``"mse"``): the name is turned into its object by the factory beside
its registry (an unknown one is refused naming the known ones); a model by name is the front
door's (:mod:`unstall.ps.names`), so here a name is refused with what to give instead.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from unstall.checks import describe
from unstall.errors import ConfigError
from unstall.ps.checkpoint import PSCheckpoint
from unstall.ps.data import ArrayData
from unstall.ps.optim import ServerOptimizer, make_optimizer
from unstall.ps.runtime import ActorPool
from unstall.ps.scenarios import SCENARIOS, Scenario, scenario_named
from unstall.ps.strategies import Strategy, strategy_named
from unstall.workload.losses import resolve_loss
from unstall.workload.named import unwrap
from unstall.workload.user_functions import refuse_built_model
from unstall.workload.zoo_jobs import SyntheticData


def optional_callable(owner: str, field: str, value: Any, takes: str) -> Any:
    """A callback, or None; ``takes`` says what it is called with."""
    if value is not None and not callable(value):
        raise ConfigError(
            owner, field, f"must be a function {takes} or None, got {describe(value)}"
        )
    return value


def model_function(owner: str, value: Any) -> Any:
    """A function (or class) that builds the model; an ``nn.Module`` already built is refused:
    every worker and the reference build their own copy, seeded alike, and the driver's copy
    gets the trained weights, which must not overwrite the caller's module."""
    fn = unwrap(value)
    why = "must be a function (or class) that returns an nn.Module"
    refuse_built_model(owner, "model", fn, why)
    if isinstance(fn, str):
        raise ConfigError(
            owner,
            "model",
            f"{why}, got {describe(fn)} (for a zoo model give "
            f"unstall.workload.zoo_jobs.zoo_model({fn!r}))",
        )
    if not callable(fn):
        raise ConfigError(owner, "model", f"{why}, got {describe(fn)}")
    return value


def data_function(owner: str, value: Any) -> Any:
    """A function ``data(rank, world_size)`` (an :class:`ArrayData`, a
    :class:`SyntheticData`, the user's own)."""
    fn = unwrap(value)
    why = (
        "must be a function data(rank, world_size) that returns worker rank's iterable of "
        "(inputs, targets), e.g. ps.ArrayData(features, labels)"
    )
    if fn is ArrayData or fn is SyntheticData:  # the class, not one built
        raise ConfigError(
            owner, "data", f"{why}, got {describe(fn)}: build one, ps.{fn.__name__}(...)"
        )
    if not callable(fn):
        raise ConfigError(owner, "data", f"{why}, got {describe(fn)}")
    return value


def loss_function(owner: str, value: Any) -> Any:
    """A function ``loss(outputs, targets)``, a loss module built (``nn.MSELoss()``), or a
    name (``"mse"``, user code ``FILE.py:FUNC``)."""
    return resolve_loss(value, owner=owner)


def strategy(owner: str, value: Any, field: str = "strategy") -> Strategy:
    """A :class:`~unstall.ps.strategies.Strategy`: an object with a ``name``, ``assign`` and
    ``controller`` (a protocol, so checked member by member), or a name of
    :data:`~unstall.ps.strategies.STRATEGIES`; ``field`` names it (one of a list:
    ``strategies[1]``)."""
    if isinstance(value, str):
        return strategy_named(value, owner=owner, field=field)
    why = 'must be a Strategy or its name (e.g. "psld", ps.STRATEGIES["psld"])'
    if isinstance(value, type):  # ps.PSLDStrategy: its class attributes would pass below
        raise ConfigError(owner, field, f"{why}, got {describe(value)}: call it, {_call(value)}")
    missing = [
        member
        for member, ok in (
            ("name", isinstance(getattr(value, "name", None), str)),
            ("assign", callable(getattr(value, "assign", None))),
            ("controller", callable(getattr(value, "controller", None))),
        )
        if not ok
    ]
    if isinstance(value, str | bytes | numbers.Number) or value is None:
        raise ConfigError(owner, field, f"{why}, got {describe(value)}")
    if missing:
        # A placement function (one of unstall.ps.assign's) is what a static strategy wraps.
        hint = ": wrap a placement in ps.StaticStrategy(name, place)" if callable(value) else ""
        raise ConfigError(
            owner, field, f"{why}, got {describe(value)}, which lacks {', '.join(missing)}{hint}"
        )
    return value


def strategies(owner: str, value: Any) -> tuple[Strategy, ...]:
    """A list of :class:`~unstall.ps.strategies.Strategy` objects or names, each checked by
    :func:`strategy`; a comma-separated text of names (``"psld,mxnet"``) is a list of them;
    :data:`STRATEGIES` itself (a dict of names) and one strategy outside a list are refused with
    what to write instead."""
    why = 'must be a list of Strategy objects or names (e.g. ["psld", "mxnet"])'
    if isinstance(value, str):
        value = [name.strip() for name in value.split(",") if name.strip()]
    if isinstance(value, Mapping):
        raise ConfigError(
            owner,
            "strategies",
            f"{why}, got a dict: give its strategies, e.g. list(ps.STRATEGIES.values())",
        )
    if not isinstance(value, Iterable) or isinstance(value, bytes):
        hint = ": put it in a list, [strategy]" if hasattr(value, "assign") else ""
        raise ConfigError(owner, "strategies", f"{why}, got {describe(value)}{hint}")
    return tuple(strategy(owner, s, f"strategies[{i}]") for i, s in enumerate(value))


def scenario(owner: str, value: Any, *, optional: bool = True) -> Scenario | None:
    """A :class:`~unstall.ps.scenarios.Scenario`, a preset's name or a scenario file (read
    here), or None (the ``none`` preset) where ``optional``."""
    if isinstance(value, Scenario) or (value is None and optional):
        return value
    if isinstance(value, str):
        return scenario_named(value, owner=owner)
    why = "must be a Scenario"
    preset = next((name for name, make in SCENARIOS.items() if make is value), None)
    if preset is not None:  # the preset's factory, not called
        raise ConfigError(
            owner,
            "scenario",
            f'{why}, got {describe(value)}: call it, ps.SCENARIOS["{preset}"]()',
        )
    if callable(value):
        raise ConfigError(
            owner,
            "scenario",
            f'{why} (e.g. ps.SCENARIOS["bandwidth"]()), got {describe(value)}: if it makes '
            "one, call it",
        )
    raise ConfigError(
        owner,
        "scenario",
        f'{why} (e.g. ps.SCENARIOS["bandwidth"]() or ps.load_scenario(path)), '
        f"got {describe(value)}",
    )


def optimizer(owner: str, value: Any) -> ServerOptimizer | None:
    """What the servers step with: a :class:`~unstall.ps.optim.SGDConfig` or
    :class:`~unstall.ps.optim.AdamConfig` (or the user's own object following
    :class:`~unstall.ps.optim.ServerOptimizer`: a ``name``, ``slots`` state arrays, a
    ``step``), an optimizer's name (``"adam"``, its default settings), or None (the
    default)."""
    if value is None:
        return None
    why = (
        "must be an optimizer the servers step with: ps.SGDConfig(...) or ps.AdamConfig(...) "
        "(or an object following ps.ServerOptimizer)"
    )
    if isinstance(value, str):
        return make_optimizer(value, owner=owner)
    kind_of = value if isinstance(value, type) else type(value)
    if issubclass(kind_of, torch.optim.Optimizer):
        # A torch optimizer steps the caller's tensors; here the servers own the parameters.
        raise ConfigError(
            owner,
            "optimizer",
            f"{why}, got {describe(value)} from torch.optim: give its settings instead, e.g. "
            "ps.AdamConfig(lr=0.001)",
        )
    if isinstance(value, type):  # ps.AdamConfig: its class attributes would pass below
        raise ConfigError(
            owner, "optimizer", f"{why}, got {describe(value)}: call it, {_call(value)}"
        )
    slots = getattr(value, "slots", None)
    follows = (
        isinstance(getattr(value, "name", None), str)
        and isinstance(slots, int)
        and not isinstance(slots, bool)
        and slots >= 0
        and callable(getattr(value, "step", None))
    )
    if not follows:
        raise ConfigError(owner, "optimizer", f"{why}, got {describe(value)}")
    return value


def checkpoint(owner: str, value: Any) -> PSCheckpoint | None:
    """A :class:`~unstall.ps.checkpoint.PSCheckpoint` to go on from, or None."""
    if value is None or isinstance(value, PSCheckpoint):
        return value
    hint = ""
    if isinstance(value, str) or hasattr(value, "__fspath__"):
        hint = f": load the file, ps.PSCheckpoint.load({str(value)!r})"
    raise ConfigError(
        owner, "resume", f"must be a PSCheckpoint or None, got {describe(value)}{hint}"
    )


def optional_text(owner: str, field: str, value: object) -> str | None:
    """A string, or None."""
    if value is not None and not isinstance(value, str):
        raise ConfigError(owner, field, f"must be a string or None, got {describe(value)}")
    return value


def optional_mapping(owner: str, field: str, value: Any) -> Mapping[str, Any] | None:
    """A mapping (a dict), or None."""
    if value is not None and not isinstance(value, Mapping):
        raise ConfigError(owner, field, f"must be a dict or None, got {describe(value)}")
    return value


def actor_pool(owner: str, value: Any) -> ActorPool | None:
    """An :class:`~unstall.ps.runtime.ActorPool`, or None."""
    if value is not None and not isinstance(value, ActorPool):
        raise ConfigError(owner, "pool", f"must be a ps.ActorPool or None, got {describe(value)}")
    return value


def _call(kind: type) -> str:
    """``ps.AdamConfig()`` for a class of this package's, ``MyOptimizer()`` for a user's."""
    return f"{'ps.' if kind.__module__.startswith('unstall.ps.') else ''}{kind.__name__}()"
