"""A parameter-server run described by names, to the objects :func:`unstall.ps.fit` and
:func:`unstall.ps.compare_strategies` take: what the command line and the benchmarks describe.

A :class:`PSRequest` holds names and numbers (plain data, saved beside a result);
:func:`resolve_run` turns it into a :class:`ResolvedRun`: the model, data and loss functions
(:mod:`unstall.ps.names`, :mod:`unstall.workload.losses`), the checkpoint to resume from, and
the run's :class:`~unstall.ps.config.FitConfig`, built once, which ``fit`` takes whole.
:func:`resolve_case` and :func:`resolve_bench` do the same for a grid of ``compare_strategies``.
Every bad name, file or function fails here, before Ray starts, with one line naming the
parameter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from unstall.errors import ConfigError
from unstall.ps.bench import BenchCase
from unstall.ps.checkpoint import PSCheckpoint
from unstall.ps.config import FitConfig, RecoveryConfig, RuntimeConfig
from unstall.ps.coordinator import DEFAULT_PIECE_BYTES
from unstall.ps.names import SYNTHETIC, resolve_data, resolve_model, resolve_working_dir
from unstall.ps.optim import ServerOptimizer, make_optimizer
from unstall.ps.scenarios import Scenario, scenario_named
from unstall.ps.strategies import Strategy, strategy_named
from unstall.workload.losses import resolve_loss
from unstall.workload.named import Named

OWNER = "ps"
DEFAULT_PIECE_MB = DEFAULT_PIECE_BYTES / 1e6


@dataclass(frozen=True, kw_only=True)
class PSRequest:
    """A run described by names, in the user's words (what the command line saves beside a
    result): ``model`` None takes the scenario's model; ``servers``/``spares`` None the
    scenario's; ``model_options`` are ``KEY=VALUE`` texts typed by the zoo model's options (or
    values); ``resume``, ``checkpoint`` and ``save`` are files."""

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
    device: str = "cpu"  # or "cuda": one GPU per worker

    def __post_init__(self) -> None:
        object.__setattr__(self, "model_options", MappingProxyType(dict(self.model_options)))


@dataclass(frozen=True, kw_only=True)
class ResolvedRun:
    """A request's objects: the model, data and loss functions, the checkpoint to resume from,
    and the run's config (its strategy, scenario on the request's servers and spares, and
    optimizer already objects)."""

    request: PSRequest
    model: Named
    data: Named
    loss: Named
    config: FitConfig
    resume: PSCheckpoint | None = None

    @property
    def scenario(self) -> Scenario:
        """The scenario, on the request's servers and spares."""
        assert isinstance(self.config.scenario, Scenario)
        return self.config.scenario

    @property
    def strategy(self) -> Strategy:
        assert not isinstance(self.config.strategy, str)
        return self.config.strategy

    @property
    def optimizer(self) -> ServerOptimizer:
        assert self.config.optimizer is not None and not isinstance(self.config.optimizer, str)
        return self.config.optimizer


def _parts(request: PSRequest, scenario: Scenario) -> tuple[Named, Named, Named]:
    model = resolve_model(
        request.model, request.model_options, scenario=scenario, data=request.data
    )
    data = resolve_data(request.data, model, batch_size=request.batch_size, seed=request.seed)
    loss = resolve_loss(request.loss, owner=OWNER)
    assert isinstance(loss, Named)  # a name or user code: labelled with it
    return model, data, loss


def resolve_case(request: PSRequest, scenario: Scenario) -> BenchCase:
    """What to train in ``scenario``: the request's model (or the scenario's), data and loss."""
    model, data, loss = _parts(request, scenario)
    return BenchCase(scenario=scenario, model=model, data=data, loss=loss)


def resolve_optimizer(request: PSRequest, resume: PSCheckpoint | None = None) -> ServerOptimizer:
    """The request's optimizer with its ``lr``, ``momentum``, ``weight_decay`` and
    ``nesterov`` (unset ones take the optimizer's defaults; resuming, the checkpoint's
    settings unless given)."""
    return make_optimizer(
        request.optimizer,
        lr=request.lr,
        momentum=request.momentum,
        weight_decay=request.weight_decay,
        nesterov=request.nesterov,
        resume=resume.optimizer if resume is not None else None,
        owner=OWNER,
    )


def resolve_run(request: PSRequest) -> ResolvedRun:
    """Every object of ``request``; a bad name, file or function fails here, before Ray."""
    scenario = scenario_named(request.scenario, owner=OWNER)
    if request.servers is not None:
        scenario = scenario.with_servers(request.servers)
    if request.spares is not None:
        scenario = scenario.with_spares(request.spares)
    model, data, loss = _parts(request, scenario)
    resume = PSCheckpoint.load(request.resume) if request.resume is not None else None
    if request.checkpoint_every is not None and request.checkpoint is None:
        raise ConfigError(OWNER, "checkpoint_every", "needs a checkpoint file to write to")
    config = FitConfig(
        workers=request.workers,
        iterations=request.iterations,
        seed=request.seed,
        strategy=strategy_named(request.strategy, owner=OWNER),
        scenario=scenario,
        optimizer=resolve_optimizer(request, resume),
        check_reference=request.check_reference,
        recovery=RecoveryConfig(
            checkpoint_every=request.checkpoint_every,
            max_recoveries=request.max_recoveries,
            snapshot_every=request.snapshot_every,
        ),
        runtime=RuntimeConfig(
            address=request.address,
            runtime_env=resolve_working_dir(request.working_dir),
            timeout_s=request.timeout_s,
            piece_mb=request.piece_mb,
            step_threads=request.step_threads,
            device=request.device,
        ),
    )
    return ResolvedRun(
        request=request, model=model, data=data, loss=loss, config=config, resume=resume
    )


def bench_config(request: PSRequest) -> FitConfig:
    """The config every run of a grid shares (each takes its strategy and its case's
    scenario): the request's workers, spares, iterations, seed, optimizer and Ray runtime."""
    return FitConfig(
        workers=request.workers,
        spares=request.spares,
        iterations=request.iterations,
        seed=request.seed,
        optimizer=resolve_optimizer(request),
        runtime=RuntimeConfig(
            address=request.address,
            runtime_env=resolve_working_dir(request.working_dir),
            timeout_s=request.timeout_s,
            piece_mb=request.piece_mb,
            step_threads=request.step_threads,
            device=request.device,
        ),
    )


def resolve_bench(
    request: PSRequest, strategies: Sequence[str], scenarios: Sequence[str]
) -> tuple[list[BenchCase], list[Strategy]]:
    """A grid: one case per scenario (each with its own model unless the request names one),
    and the strategies by name; every name and file is checked before anything runs."""
    if not scenarios:
        raise ConfigError(OWNER, "scenarios", "must name at least one scenario")
    chosen = [strategy_named(name, owner=OWNER, field="strategies") for name in strategies]
    cases = [resolve_case(request, scenario_named(s, owner=OWNER)) for s in scenarios]
    return cases, chosen
