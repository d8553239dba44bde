"""The strategy x scenario grid: one short run per cell, throughput compared with ``oracle``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from unstall.config import check
from unstall.ps.assign import STRATEGIES
from unstall.ps.coordinator import ActorPool
from unstall.ps.scenarios import resolve_scenario
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
