"""How a parameter-server run goes, as plain frozen data built once and handed whole.

:class:`FitConfig` is what :func:`~unstall.ps.train.fit` takes besides what it trains (the
model, data and loss functions) and the objects of the call (a checkpoint to resume from,
callbacks, an actor pool): workers, iterations, seed, servers, the strategy, the scenario, the
optimizer, the reference check, and two sections handed on whole, :class:`RecoveryConfig`
(checkpoints and surviving dead actors) and :class:`RuntimeConfig` (Ray and the exchange).

The strategy, scenario and optimizer may be objects or names (``"psld"``, ``"bandwidth"`` or a
``.toml``/``.json`` scenario file, ``"adam"``): a name is checked here and turned into its
object where the run starts (:func:`resolve_parts`), so that the config stays plain data.
Every field is checked in ``__post_init__``: a wrong kind or range raises a one-line
:class:`~unstall.errors.ConfigError` naming the field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from unstall import checks
from unstall.errors import ConfigError
from unstall.ps import arguments as args
from unstall.ps.coordinator import DEFAULT_PIECE_BYTES
from unstall.ps.device import CPU, check_device
from unstall.ps.optim import ServerOptimizer, SGDConfig, make_optimizer
from unstall.ps.scenarios import Scenario, none, scenario_named
from unstall.ps.strategies import Strategy, strategy_named

DEFAULT_STRATEGY = "tf-greedy"


@dataclass(frozen=True, kw_only=True)
class RecoveryConfig:
    """Checkpoints and dead actors: every ``checkpoint_every`` iterations (and after the last)
    the run hands out a checkpoint (None: none); it survives ``max_recoveries`` dead workers or
    servers, going on from a snapshot of the servers' state taken every ``snapshot_every``
    iterations."""

    checkpoint_every: int | None = None
    max_recoveries: int = 0
    snapshot_every: int = 1
    owner: InitVar[str] = "RecoveryConfig"

    def __post_init__(self, owner: str) -> None:
        every = checks.optional_whole(owner, "checkpoint_every", self.checkpoint_every, minimum=1)
        _set(self, "checkpoint_every", every)
        recoveries = checks.whole(owner, "max_recoveries", self.max_recoveries, minimum=0)
        _set(self, "max_recoveries", recoveries)
        snapshots = checks.whole(owner, "snapshot_every", self.snapshot_every, minimum=1)
        _set(self, "snapshot_every", snapshots)


@dataclass(frozen=True, kw_only=True)
class RuntimeConfig:
    """Ray and the exchange: ``address`` (or ``RAY_ADDRESS``) of a cluster to run on, with
    ``runtime_env`` (e.g. ``{"working_dir": "."}``; None: a local Ray on loopback); how long an
    iteration may take (``timeout_s``); the pieces a transfer is pipelined in (``piece_mb``) and
    the threads a server steps a large segment with (``step_threads``); where the workers
    compute (``device``: ``"cpu"``, or ``"cuda"``, one GPU per worker actor, the servers
    staying on the CPU; see :mod:`unstall.ps.device`)."""

    address: str | None = None
    runtime_env: Mapping[str, Any] | None = None
    timeout_s: float = 300.0
    piece_mb: float = DEFAULT_PIECE_BYTES / 1e6
    step_threads: int = 1
    device: str = CPU
    owner: InitVar[str] = "RuntimeConfig"

    def __post_init__(self, owner: str) -> None:
        _set(self, "address", args.optional_text(owner, "address", self.address))
        env = args.optional_mapping(owner, "runtime_env", self.runtime_env)
        _set(self, "runtime_env", None if env is None else MappingProxyType(dict(env)))
        timeout_s = checks.real(owner, "timeout_s", self.timeout_s)
        if not timeout_s > 0:
            raise ConfigError(owner, "timeout_s", f"must be > 0, got {timeout_s}")
        _set(self, "timeout_s", timeout_s)
        _set(self, "piece_mb", checks.positive_finite(owner, "piece_mb", self.piece_mb))
        threads = checks.whole(owner, "step_threads", self.step_threads, minimum=1)
        _set(self, "step_threads", threads)
        _set(self, "device", check_device(owner, self.device))

    @property
    def piece_bytes(self) -> int:
        return max(1, int(self.piece_mb * 1e6))


@dataclass(frozen=True, kw_only=True)
class FitConfig:
    """A parameter-server run (see the module docstring): ``workers`` worker actors train for
    ``iterations`` iterations in all (a resumed run's earlier ones included) from ``seed``;
    ``scenario`` (None: the ``none`` preset) gives the servers, ``servers`` and ``spares``
    replace its counts; ``strategy`` places the parameters; ``optimizer`` is what the servers
    step with (None: a resumed run's checkpoint's, else SGD); ``check_reference`` compares the
    result with single-process training."""

    workers: int = 2
    iterations: int = 20
    seed: int = 0
    servers: int | None = None
    spares: int | None = None
    strategy: Strategy | str = DEFAULT_STRATEGY
    scenario: Scenario | str | None = None
    optimizer: ServerOptimizer | str | None = None
    check_reference: bool = False
    recovery: RecoveryConfig = field(default_factory=RecoveryConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    owner: InitVar[str] = "FitConfig"

    def __post_init__(self, owner: str) -> None:
        _set(self, "workers", checks.whole(owner, "workers", self.workers, minimum=1))
        _set(self, "iterations", checks.whole(owner, "iterations", self.iterations, minimum=1))
        _set(self, "seed", checks.seed_of(owner, self.seed))
        _set(self, "servers", checks.optional_whole(owner, "servers", self.servers, minimum=1))
        _set(self, "spares", checks.optional_whole(owner, "spares", self.spares, minimum=0))
        _check_named(owner, "strategy", self.strategy)
        _check_named(owner, "scenario", self.scenario)
        _check_named(owner, "optimizer", self.optimizer)
        check_reference = checks.flag(owner, "check_reference", self.check_reference)
        _set(self, "check_reference", check_reference)
        for name, kind in (("recovery", RecoveryConfig), ("runtime", RuntimeConfig)):
            if not isinstance(getattr(self, name), kind):
                raise ConfigError(
                    owner,
                    name,
                    f"must be a ps.{kind.__name__}, got {checks.describe(getattr(self, name))}",
                )

    @classmethod
    def of(cls, owner: str = "FitConfig", **settings: Any) -> FitConfig:
        """A config from flat keywords: its own fields, and those of its sections
        (``checkpoint_every=``, ``address=``, ...) put in them; an unknown keyword raises a
        TypeError naming ``owner``."""
        sections: dict[str, dict[str, Any]] = {"recovery": {}, "runtime": {}}
        own = {f.name for f in dataclasses.fields(cls)} - set(sections)
        inner = {
            name: {f.name for f in dataclasses.fields(kind)}
            for name, kind in (("recovery", RecoveryConfig), ("runtime", RuntimeConfig))
        }
        top: dict[str, Any] = {}
        for key, value in settings.items():
            section = next((s for s, keys in inner.items() if key in keys), None)
            if key in own:
                top[key] = value
            elif section is not None:
                sections[section][key] = value
            else:
                raise TypeError(f"{owner}() got an unexpected keyword argument {key!r}")
        return cls(
            **top,
            recovery=RecoveryConfig(**sections["recovery"], owner=owner),
            runtime=RuntimeConfig(**sections["runtime"], owner=owner),
            owner=owner,
        )


@dataclass(frozen=True, kw_only=True)
class RunParts:
    """A config's named parts as objects: the strategy, the scenario on the run's servers and
    spares, and the optimizer."""

    strategy: Strategy
    scenario: Scenario
    optimizer: ServerOptimizer


def resolve_parts(config: FitConfig, resume_optimizer: ServerOptimizer | None = None) -> RunParts:
    """``config``'s strategy, scenario and optimizer as objects (a scenario file is read here);
    no optimizer: ``resume_optimizer`` (a checkpoint's), else SGD."""
    strategy = config.strategy
    if isinstance(strategy, str):
        strategy = strategy_named(strategy, owner="FitConfig")
    scenario = config.scenario
    if scenario is None:
        scenario = none()
    elif isinstance(scenario, str):
        scenario = scenario_named(scenario, owner="FitConfig")
    if config.servers is not None:
        scenario = scenario.with_servers(config.servers)
    if config.spares is not None:
        scenario = scenario.with_spares(config.spares)
    optimizer = config.optimizer
    if isinstance(optimizer, str):
        optimizer = make_optimizer(optimizer, owner="FitConfig")
    elif optimizer is None:
        optimizer = resume_optimizer if resume_optimizer is not None else SGDConfig()
    return RunParts(strategy=strategy, scenario=scenario, optimizer=optimizer)


def _check_named(owner: str, name: str, value: object) -> None:
    """A strategy, scenario or optimizer: an object of its kind, or a name it has (a scenario
    file's path is checked for its suffix only: it is read when the run starts)."""
    if name == "scenario" and isinstance(value, str):
        if Path(value).suffix.lower() in (".toml", ".json"):
            return
        scenario_named(value, owner=owner)  # a preset: checked by name
        return
    if name == "strategy":
        args.strategy(owner, value)
    elif name == "scenario":
        args.scenario(owner, value)
    else:
        args.optimizer(owner, value)


def _set(config: object, name: str, value: object) -> None:
    """A frozen config's field set to its checked value (plain Python: a numpy int an int)."""
    object.__setattr__(config, name, value)
