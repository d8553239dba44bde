"""The strategy x scenario grid: one short run per cell, throughput compared with ``oracle``;
and the link speed at which a model's transfers dominate its iteration (the evaluation's rule
for choosing per-model links, :func:`link_for_transfer_ratio`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch.nn.functional as F

from unstall import checks
from unstall.config import check
from unstall.errors import ConfigError
from unstall.net.link import MB
from unstall.ps import arguments as args
from unstall.ps.assign import oracle
from unstall.ps.config import FitConfig, resolve_parts
from unstall.ps.data import DataFn
from unstall.ps.links import ServerSpec, server_cost
from unstall.ps.replica import ModelFn, TrainingJob
from unstall.ps.runtime import ActorPool, ray_for_run
from unstall.ps.scenarios import Scenario
from unstall.ps.strategies import StaticStrategy, Strategy
from unstall.ps.train import PSRunResult, fit_config, make_plan, run_plan
from unstall.results import JsonResult
from unstall.workload.losses import LossFn

ORACLE = StaticStrategy(oracle.NAME, oracle.assign)
DEFAULT_BENCH_ITERATIONS = 10


@dataclass(frozen=True, kw_only=True)
class BenchCase:
    """One scenario of a grid and what to train in it (a scenario's own model, typically):
    ``model()`` builds an ``nn.Module``, ``data(rank, world_size)`` gives each worker an
    iterable of ``(inputs, targets)``, ``loss(outputs, targets)`` a scalar tensor. Each is
    checked for its kind when the case is built, as :func:`~unstall.ps.train.fit` checks its
    arguments (a one-line :class:`~unstall.errors.ConfigError` naming the field)."""

    scenario: Scenario | str
    model: ModelFn
    data: DataFn
    loss: LossFn | str = F.cross_entropy

    def __post_init__(self) -> None:
        owner = "BenchCase"
        # A scenario's or a loss's name becomes its object (frozen: set through __setattr__).
        object.__setattr__(self, "scenario", args.scenario(owner, self.scenario, optional=False))
        args.model_function(owner, self.model)
        args.data_function(owner, self.data)
        object.__setattr__(self, "loss", args.loss_function(owner, self.loss))


@dataclass(frozen=True, kw_only=True)
class BenchRow:
    """One cell of the grid: a strategy in a scenario."""

    scenario: str
    strategy: str
    model: str
    throughput_it_s: float
    mean_iter_s: float
    predicted_iter_s: float
    ratio_to_oracle: float
    # What the run's controller did (psld; a static strategy keeps its servers, moves nothing).
    servers_over_time: tuple[int, ...] = ()
    migrations: int = 0
    scale_outs: int = 0
    scale_ins: int = 0
    max_pause_s: float = 0.0
    total_pause_s: float = 0.0
    warm_start_s: float = 0.0  # psld's probe and placement before the first iteration

    def servers_text(self) -> str:
        """Servers at the start and the end: ``4`` or ``4->6``."""
        if not self.servers_over_time:
            return ""
        first, last = self.servers_over_time[0], self.servers_over_time[-1]
        return str(first) if first == last else f"{first}->{last}"


@dataclass(frozen=True, kw_only=True)
class PSBenchResult(JsonResult):
    """Every cell of the grid; ``ratio_to_oracle`` is the throughput over the oracle's in the
    same scenario."""

    iterations: int
    workers: int
    results: tuple[BenchRow, ...]

    def row(self, scenario: str, strategy: str) -> BenchRow:
        """The cell of ``strategy`` in ``scenario``."""
        return next(r for r in self.results if (r.scenario, r.strategy) == (scenario, strategy))


def with_oracle(strategies: Sequence[Strategy]) -> list[Strategy]:
    """The strategies to run: as given (a name given twice runs once), plus the oracle for the
    ratios."""
    out: list[Strategy] = []
    for strategy in strategies:
        if all(s.name != strategy.name for s in out):
            out.append(strategy)
    return out if any(s.name == ORACLE.name for s in out) else [*out, ORACLE]


def compare_strategies(
    cases: Iterable[BenchCase],
    strategies: Iterable[Strategy | str] | str,
    config: FitConfig | None = None,
    *,
    pool: ActorPool | None = None,
    progress: Callable[[int], None] | None = None,
    **settings: Any,
) -> PSBenchResult:
    """Run every strategy (and the oracle) in every case, once each, on one Ray connection.

    ``config`` is every run's :class:`~unstall.ps.config.FitConfig` (built once and handed
    whole; each run takes its strategy and its case's scenario): ``workers``, ``iterations``,
    ``seed``, ``spares`` (replacing the scenarios' spare servers), ``optimizer`` (default:
    ``SGDConfig()``), and its runtime section (``address``, or ``RAY_ADDRESS``, a Ray cluster to
    run on, with ``runtime_env``, e.g. ``{"working_dir": "."}``); without one, the keyword
    ``settings`` are its fields (``iterations`` 10 unless given). ``progress(1)`` after every
    run. Strategies and the optimizer may be names (``"psld"``, ``"adam"``). An argument of the
    wrong kind (an unknown name, a scenario instead of a :class:`BenchCase`, ``"2"`` workers)
    raises a one-line :class:`~unstall.errors.ConfigError` naming it, before Ray is used."""
    owner = "compare_strategies"
    cases = _cases(owner, cases)
    runs = with_oracle(args.strategies(owner, strategies))
    if config is None:
        settings.setdefault("iterations", DEFAULT_BENCH_ITERATIONS)
    base = fit_config(owner, config, settings)
    pool = args.actor_pool(owner, pool)
    progress = args.optional_callable(owner, "progress", progress, "progress(runs_done)")
    rows: list[BenchRow] = []
    runtime = base.runtime
    with ray_for_run(
        runtime.address,
        max(base.workers + 1, 2),
        pool,
        runtime_env=runtime.runtime_env,
        device=runtime.device,
        workers=base.workers,
        owner=owner,
    ) as actors:
        for case in cases:
            job = TrainingJob(
                model=case.model,
                data=case.data,
                loss=case.loss,  # type: ignore[arg-type]  # a name became its loss
                seed=base.seed,
                workers=base.workers,
                device=runtime.device,
            )
            results = {}
            for strategy in runs:
                config = dataclasses.replace(base, strategy=strategy, scenario=case.scenario)
                plan = make_plan(job, config, resolve_parts(config))
                results[strategy.name] = run_plan(plan, actors)
                if progress is not None:
                    progress(1)
            rows += _rows(results)
    return PSBenchResult(iterations=base.iterations, workers=base.workers, results=tuple(rows))


def _cases(owner: str, value: Any) -> tuple[BenchCase, ...]:
    """A non-empty list of :class:`BenchCase` (a scenario alone, or one case outside a list,
    is refused with what to write instead)."""
    case_text = "ps.BenchCase(scenario=..., model=..., data=...)"
    why = f"must be a list of {case_text}"
    if isinstance(value, BenchCase):
        raise ConfigError(owner, "cases", f"{why}, got a BenchCase instance: put it in a list")
    if isinstance(value, str | bytes | Mapping | Scenario) or not isinstance(value, Iterable):
        hint = f": wrap it, {case_text}" if isinstance(value, Scenario) else ""
        raise ConfigError(owner, "cases", f"{why}, got {checks.describe(value)}{hint}")
    cases = tuple(value)
    if not cases:
        raise ConfigError(owner, "cases", f"{why}, got an empty one: give at least one case")
    for i, case in enumerate(cases):
        if not isinstance(case, BenchCase):
            hint = f": wrap it, {case_text}" if isinstance(case, Scenario) else ""
            raise ConfigError(
                owner, f"cases[{i}]", f"must be a {case_text}, got {checks.describe(case)}{hint}"
            )
    return cases


def _rows(runs: dict[str, PSRunResult]) -> list[BenchRow]:
    oracle_it_s = runs[ORACLE.name].throughput_it_s
    return [
        BenchRow(
            scenario=r.scenario,
            strategy=name,
            model=r.model,
            throughput_it_s=r.throughput_it_s,
            mean_iter_s=r.mean_iter_s,
            predicted_iter_s=r.predicted_iter_s,
            ratio_to_oracle=r.throughput_it_s / oracle_it_s,
            servers_over_time=r.servers_over_time,
            migrations=r.migrations,
            scale_outs=r.scale_outs,
            scale_ins=r.scale_ins,
            max_pause_s=r.max_pause_s,
            total_pause_s=r.total_pause_s,
            warm_start_s=r.warm_start_s,
        )
        for name, r in runs.items()
    ]


# --- links at which transfer dominates ----------------------------------------------------------


def even_split_s(spec: ServerSpec, *, model_bytes: int, workers: int, servers: int) -> float:
    """The cost model's time of one server holding an even share of the model: the part of an
    iteration that the assignment decides (links both ways, latency, step)."""
    return server_cost(spec, workers).seconds(model_bytes / servers)


def link_for_transfer_ratio(
    base: ServerSpec, *, model_bytes: int, engine_s: float, workers: int, servers: int, ratio: float
) -> float:
    """The bandwidth (MB/s) at which the even split's time on ``base`` with that bandwidth is
    ``ratio`` times ``engine_s``, the iteration's time with unlimited links (the workers'
    compute and the runtime's own cost, which no assignment changes)."""
    check(engine_s > 0, "links", "engine_s", f"must be > 0, got {engine_s}")
    check(ratio > 0, "links", "ratio", f"must be > 0, got {ratio}")
    check(model_bytes > 0, "links", "model_bytes", f"must be > 0, got {model_bytes}")
    share = model_bytes / servers
    # What is left for the links once the latency and the step are paid.
    free_link = dataclasses.replace(base.link, bandwidth_gbps=math.inf)
    rest = server_cost(dataclasses.replace(base, link=free_link), workers)
    left = ratio * engine_s - rest.seconds(share)
    check(
        left > 0,
        "links",
        "ratio",
        f"{ratio} x {engine_s:.3f} s is below the latency and step alone "
        f"({rest.seconds(share):.3f} s): no bandwidth reaches it",
    )
    return 2 * workers * share / left / MB
