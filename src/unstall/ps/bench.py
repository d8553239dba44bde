"""The strategy x scenario grid: one short run per cell, throughput compared with ``oracle``;
and the link speed at which a model's transfers dominate its iteration (the evaluation's rule
for choosing per-model links, :func:`link_for_transfer_ratio`, :func:`scaled_links`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from unstall.config import check
from unstall.ps.assign import STRATEGIES
from unstall.ps.coordinator import ActorPool
from unstall.ps.links import MB, ServerSpec, server_cost
from unstall.ps.scenarios import SPEC_FIELDS, Scenario, resolve_scenario
from unstall.ps.train import PSConfig, run_training
from unstall.results import JsonResult

ORACLE = "oracle"


@dataclass(frozen=True, kw_only=True)
class BenchRow:
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
        return next(r for r in self.results if (r.scenario, r.strategy) == (scenario, strategy))


def grid_strategies(strategies: Sequence[str]) -> list[str]:
    """The strategies to run: as given (duplicates dropped), plus ``oracle`` for the ratios."""
    out = list(dict.fromkeys(strategies))
    for name in out:
        check(name in STRATEGIES, "bench", "strategies", f"unknown strategy {name!r}")
    return out if ORACLE in out else [*out, ORACLE]


def run_grid(
    strategies: Sequence[str],
    scenarios: Sequence[str],
    base: PSConfig,
    *,
    pool: ActorPool | None = None,
    advance: Callable[[int], None] | None = None,
) -> PSBenchResult:
    """Run ``base`` once per (scenario, strategy); scenarios are presets or files."""
    check(bool(scenarios), "bench", "scenarios", "must name at least one scenario")
    for name in scenarios:
        resolve_scenario(name)  # fail on a bad name or file before anything runs
    names = grid_strategies(strategies)
    own = pool is None
    actors = pool if pool is not None else ActorPool()
    rows = []
    try:
        for scenario in scenarios:
            runs = {}
            for strategy in names:
                config = dataclasses.replace(base, scenario=scenario, strategy=strategy)
                runs[strategy] = run_training(config, pool=actors)
                if advance is not None:
                    advance(1)
            oracle = runs[ORACLE].throughput_it_s
            rows += [
                BenchRow(
                    scenario=r.scenario,
                    strategy=name,
                    model=r.model,
                    throughput_it_s=r.throughput_it_s,
                    mean_iter_s=r.mean_iter_s,
                    predicted_iter_s=r.predicted_iter_s,
                    ratio_to_oracle=r.throughput_it_s / oracle,
                    servers_over_time=r.servers_over_time,
                    migrations=r.migrations,
                    scale_outs=r.scale_outs,
                    scale_ins=r.scale_ins,
                    max_pause_s=r.max_pause_s,
                    total_pause_s=r.total_pause_s,
                )
                for name, r in runs.items()
            ]
    finally:
        if own:
            actors.close()
    return PSBenchResult(iterations=base.iterations, workers=base.workers, results=tuple(rows))


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
    rest = server_cost(dataclasses.replace(base, bandwidth_mb_s=float("inf")), workers)
    left = ratio * engine_s - rest.seconds(share)
    check(
        left > 0,
        "links",
        "ratio",
        f"{ratio} x {engine_s:.3f} s is below the latency and step alone "
        f"({rest.seconds(share):.3f} s): no bandwidth reaches it",
    )
    return 2 * workers * share / left / MB


def scaled_links(scenario: Scenario, factor: float) -> Scenario:
    """``scenario`` with every bandwidth (the base and each override) times ``factor``: the
    same stragglers, relative to links ``factor`` times as fast."""
    check(factor > 0, "links", "factor", f"must be > 0, got {factor}")

    def scaled(value: float | None) -> float | None:
        return None if value is None else value * factor

    base = dataclasses.replace(scenario.base, bandwidth_mb_s=scenario.base.bandwidth_mb_s * factor)
    phases = tuple(
        dataclasses.replace(
            phase,
            servers=tuple(
                dataclasses.replace(o, bandwidth_mb_s=scaled(o.bandwidth_mb_s))
                for o in phase.servers
            ),
        )
        for phase in scenario.phases
    )
    return dataclasses.replace(scenario, base=base, phases=phases)


def scenario_table(scenario: Scenario) -> dict[str, Any]:
    """``scenario`` as the structure of a scenario file (:func:`~unstall.ps.scenarios.
    scenario_from_mapping` reads it back), so that a derived scenario can be run by path."""
    table: dict[str, Any] = {
        "name": scenario.name,
        "description": scenario.description,
        "servers": scenario.servers,
        "spares": scenario.spares,
        "base": {k: getattr(scenario.base, k) for k in SPEC_FIELDS},
        "phases": [
            {
                "start": phase.start,
                "servers": [
                    {k: v for k, v in dataclasses.asdict(o).items() if v is not None}
                    for o in phase.servers
                ],
            }
            for phase in scenario.phases
        ],
    }
    if scenario.model is not None:
        table["model"] = scenario.model
        table["model_options"] = dict(scenario.model_options)
    return table
