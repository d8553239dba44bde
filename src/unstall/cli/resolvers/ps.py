"""The parameter server's resolver: command-line text to the objects :func:`unstall.ps.fit` and
:func:`unstall.ps.compare_strategies` take.

- a model: a zoo name with ``KEY=VALUE`` options (default: the scenario's model, an MLP), or
  user code (``FILE.py:FUNC``, ``package.module:FUNC``: a function returning an ``nn.Module``);
- data: ``synthetic`` (a zoo model's random batches), ``digits`` (scikit-learn's handwritten
  digits; a zoo features model gets 64 inputs and 10 classes), or user code (``(rank,
  world_size) -> iterable of (inputs, targets)``);
- a loss: a name of :data:`unstall.ps.LOSSES` or user code (``(outputs, targets) -> scalar``);
- a scenario: a preset of :data:`unstall.ps.SCENARIOS` or a ``.toml``/``.json`` scenario file;
- a strategy: a name of :data:`unstall.ps.STRATEGIES`;
- an optimizer: a name of :data:`unstall.ps.OPTIMIZERS` with its settings;
- a checkpoint to resume from (a file), and Ray's runtime environment (``--working-dir``).

Each callable comes back as a :class:`unstall.ps.Named` whose label is what the user typed, so
results say ``"model": "mlp"`` or ``"data": "digits"``. Every error is one line naming the
option (``ps.data``, ...), the file or the user's function.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from unstall.config import parse_text_options
from unstall.errors import ConfigError
from unstall.ps import (
    LOSSES,
    OPTIMIZERS,
    SCENARIOS,
    STRATEGIES,
    AdamConfig,
    ArrayData,
    BenchCase,
    Named,
    PSCheckpoint,
    Scenario,
    ServerOptimizer,
    SGDConfig,
    Strategy,
    SyntheticData,
    load_digits,
    load_scenario,
)
from unstall.usercode import is_reference, load_callable
from unstall.workload import zoo

OWNER = "ps"
DEFAULT_MODEL = "mlp"
DEFAULT_PIECE_MB = 256.0
DEFAULT_BATCH_SIZE = 32
SYNTHETIC, DIGITS = "synthetic", "digits"
DATA_SOURCES = (SYNTHETIC, DIGITS)
# What a zoo model needs to learn the digits: 64 features in, 10 classes out.
DIGITS_MODEL_OPTIONS: dict[str, object] = {"in_features": 64, "num_classes": 10}


@dataclass(frozen=True, kw_only=True)
class PSRequest:
    """A run as the command line describes it, in the user's words (saved beside a result):
    ``model`` None takes the scenario's model; ``servers``/``spares`` None the scenario's;
    ``model_options`` are the ``KEY=VALUE`` texts, typed by the zoo model's options."""

    model: str | None = None
    model_options: Mapping[str, str] = field(default_factory=dict)
    data: str = SYNTHETIC
    loss: str = "cross_entropy"
    batch_size: int | None = None  # None: DEFAULT_BATCH_SIZE (the built-in sources only)
    workers: int = 2
    servers: int | None = None
    spares: int | None = None
    strategy: str = "tf-greedy"
    scenario: str = "none"
    iterations: int = 20
    optimizer: str | None = None  # None: the checkpoint's when resuming, else sgd
    lr: float | None = None  # None: the optimizer's default
    momentum: float | None = None  # sgd only; None: SGDConfig's default
    weight_decay: float | None = None  # None: the optimizer's default (0), or the checkpoint's
    nesterov: bool = False
    seed: int = 0
    check_reference: bool = False
    timeout_s: float = 300.0
    address: str | None = None
    working_dir: str | None = None
    resume: str | None = None
    checkpoint: str | None = None
    checkpoint_every: int | None = None
    save: str | None = None
    max_recoveries: int = 0
    snapshot_every: int = 1
    piece_mb: float = DEFAULT_PIECE_MB
    step_threads: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "model_options", MappingProxyType(dict(self.model_options)))


@dataclass(frozen=True, kw_only=True)
class ResolvedRun:
    """A request's objects: what :func:`unstall.ps.fit` takes besides the request's numbers
    (the scenario already on the request's servers and spares)."""

    request: PSRequest
    model: Named
    data: Named
    loss: Named
    scenario: Scenario
    strategy: Strategy
    optimizer: ServerOptimizer
    resume: PSCheckpoint | None = None
    runtime_env: Mapping[str, Any] | None = None

    def fit_options(self) -> dict[str, Any]:
        """The keyword arguments of :func:`unstall.ps.fit` this run takes (not the progress,
        checkpoint callback or pool)."""
        r = self.request
        return {
            "loss": self.loss,
            "optimizer": self.optimizer,
            "workers": r.workers,
            "strategy": self.strategy,
            "scenario": self.scenario,
            "iterations": r.iterations,
            "seed": r.seed,
            "check_reference": r.check_reference,
            "resume": self.resume,
            "checkpoint_every": r.checkpoint_every,
            "max_recoveries": r.max_recoveries,
            "snapshot_every": r.snapshot_every,
            "address": r.address,
            "runtime_env": self.runtime_env,
            "timeout_s": r.timeout_s,
            "piece_mb": r.piece_mb,
            "step_threads": r.step_threads,
        }


def model_options(items: Sequence[str] | None) -> dict[str, str]:
    """``--model-option`` texts ``KEY=VALUE`` to a dict of texts."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(OWNER, "model-option", f"expected KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def resolve_scenario(text: str) -> Scenario:
    """``--scenario``: a preset by name, or a TOML/JSON scenario file by path."""
    preset = SCENARIOS.get(text)
    if preset is not None:
        return preset()
    if Path(text).suffix.lower() in (".toml", ".json"):
        return load_scenario(text)
    known = ", ".join(SCENARIOS)
    raise ConfigError(
        OWNER, "scenario", f"{text!r} is neither a preset ({known}) nor a .toml/.json file"
    )


def resolve_strategy(text: str, *, option: str = "strategy") -> Strategy:
    """``--strategy``: a built-in strategy by name."""
    found = STRATEGIES.get(text)
    if found is None:
        known = ", ".join(STRATEGIES)
        raise ConfigError(OWNER, option, f"unknown strategy {text!r}; known: {known}")
    return found


def resolve_loss(text: str) -> Named:
    """``--loss``: a built-in loss by name, or user code."""
    if is_reference(text):
        return Named(load_callable(text, what="loss function"), text)
    found = LOSSES.get(text)
    if found is None:
        known = ", ".join(LOSSES)
        raise ConfigError(
            OWNER, "loss", f"{text!r} is neither a loss ({known}) nor FILE.py:FUNC / module:FUNC"
        )
    return Named(found, text)


def resolve_model(
    text: str | None, options: Mapping[str, str], *, scenario: Scenario, data: str
) -> Named:
    """``--model`` and ``--model-option``: user code, or a zoo model (default: the scenario's,
    with its options) with the options typed by the model's, and those the data needs."""
    if text is not None and is_reference(text):
        if options:
            raise ConfigError(OWNER, "model-option", "applies to zoo models, not to user code")
        return Named(load_callable(text, what="model function"), text)
    name = text or scenario.model or DEFAULT_MODEL
    spec = zoo.spec(name)
    merged = dict(scenario.model_options) if name == scenario.model else {}
    merged.update(parse_text_options(spec.options_type, list(options.items()), owner=name))
    if data == DIGITS:
        if spec.input_kind != "features":
            raise ConfigError(OWNER, "data", f"{data!r} needs a features model (mlp)")
        merged.update(DIGITS_MODEL_OPTIONS)
    zoo.resolve_options(name, merged)  # an unknown or bad option: a clear error now
    return Named(functools.partial(zoo.build, name, **merged), name, merged)


def resolve_data(text: str, model: Named, *, batch_size: int | None, seed: int) -> Named:
    """``--data``: ``synthetic`` batches of the zoo model ``model``, ``digits``, or user code
    (whose batches are its own: ``batch_size``, None for :data:`DEFAULT_BATCH_SIZE`, is for
    the built-in sources, and refused with user code rather than ignored)."""
    if is_reference(text):
        if batch_size is not None:
            raise ConfigError(
                OWNER,
                "batch-size",
                f"applies to the built-in data sources ({', '.join(DATA_SOURCES)}); the batches "
                f"of {text} are the size it makes them",
            )
        return Named(load_callable(text, what="data function"), text)
    if batch_size is None:
        batch_size = DEFAULT_BATCH_SIZE
    if text == DIGITS:
        features, labels = load_digits()
        return Named(ArrayData(features, labels, batch_size=batch_size, seed=seed), text)
    if text == SYNTHETIC:
        if is_reference(model.label):
            raise ConfigError(
                OWNER,
                "data",
                f"synthetic batches need a zoo model, and {model.label} is not one: give your "
                "data function (FILE.py:FUNC or package.module:FUNC)",
            )
        options: dict[str, Any] = dict(model.options)
        make = functools.partial(zoo.example_batch, model.label, **options)
        return Named(SyntheticData(make, batch_size=batch_size, seed=seed), text)
    known = ", ".join(DATA_SOURCES)
    raise ConfigError(
        OWNER, "data", f"{text!r} is neither a source ({known}) nor FILE.py:FUNC / module:FUNC"
    )


def _parts(request: PSRequest, scenario: Scenario) -> tuple[Named, Named, Named]:
    model = resolve_model(
        request.model, request.model_options, scenario=scenario, data=request.data
    )
    data = resolve_data(request.data, model, batch_size=request.batch_size, seed=request.seed)
    return model, data, resolve_loss(request.loss)


def resolve_case(request: PSRequest, scenario: Scenario) -> BenchCase:
    """What to train in ``scenario``: the request's model (or the scenario's), data and loss."""
    model, data, loss = _parts(request, scenario)
    return BenchCase(scenario=scenario, model=model, data=data, loss=loss)


def resolve_optimizer(request: PSRequest, resume: PSCheckpoint | None = None) -> ServerOptimizer:
    """``--optimizer`` with ``--lr``, ``--momentum``, ``--weight-decay`` and ``--nesterov``
    (unset ones take the optimizer's defaults; resuming, the checkpoint's settings unless
    given)."""
    name = request.optimizer or (resume.optimizer.name if resume is not None else SGDConfig.name)
    kind = OPTIMIZERS.get(name)
    if kind is None:
        known = ", ".join(OPTIMIZERS)
        raise ConfigError(OWNER, "optimizer", f"unknown optimizer {name!r}; known: {known}")
    base: dict[str, Any] = {}
    if resume is not None and isinstance(resume.optimizer, kind):
        base = {f.name: getattr(resume.optimizer, f.name) for f in dataclasses.fields(kind)}
    for name in ("lr", "weight_decay"):
        if getattr(request, name) is not None:
            base[name] = getattr(request, name)
    if kind is AdamConfig:
        if request.momentum is not None or request.nesterov:
            raise ConfigError(
                OWNER,
                "optimizer",
                "--momentum and --nesterov are SGD's: adam keeps its own moments",
            )
        return AdamConfig(**base)
    if request.momentum is not None:
        base["momentum"] = request.momentum
    if request.nesterov:
        base["nesterov"] = True
    return SGDConfig(**base)


def resolve_working_dir(text: str | None) -> dict[str, Any] | None:
    """``--working-dir``: a folder Ray ships to every node (its runtime environment)."""
    if text is None:
        return None
    path = Path(text)
    if not path.is_dir():
        why = (
            f"a file: give the folder that holds your modules, e.g. {path.parent}"
            if path.exists()
            else "nothing is there"
        )
        raise ConfigError(OWNER, "working-dir", f"{text} is not a folder ({why})")
    return {"working_dir": str(path.resolve())}


def resolve_run(request: PSRequest) -> ResolvedRun:
    """Every object of ``request``; a bad name, file or function fails here, before Ray."""
    scenario = resolve_scenario(request.scenario)
    if request.servers is not None:
        scenario = scenario.with_servers(request.servers)
    if request.spares is not None:
        scenario = scenario.with_spares(request.spares)
    model, data, loss = _parts(request, scenario)
    resume = PSCheckpoint.load(request.resume) if request.resume is not None else None
    if request.checkpoint_every is not None and request.checkpoint is None:
        raise ConfigError(OWNER, "checkpoint", "--checkpoint-every needs --checkpoint PATH")
    return ResolvedRun(
        request=request,
        model=model,
        data=data,
        loss=loss,
        scenario=scenario,
        strategy=resolve_strategy(request.strategy),
        optimizer=resolve_optimizer(request, resume),
        resume=resume,
        runtime_env=resolve_working_dir(request.working_dir),
    )


def resolve_bench(
    request: PSRequest, strategies: Sequence[str], scenarios: Sequence[str]
) -> tuple[list[BenchCase], list[Strategy]]:
    """``ps bench``: one case per scenario (each with its own model unless ``--model``), and
    the strategies by name; every name and file is checked before anything runs."""
    if not scenarios:
        raise ConfigError(OWNER, "scenarios", "must name at least one scenario")
    chosen = [resolve_strategy(name, option="strategies") for name in strategies]
    return [resolve_case(request, resolve_scenario(s)) for s in scenarios], chosen
