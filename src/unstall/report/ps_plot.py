"""Parameter-server plots: throughput of each strategy in each scenario, and a run's iterations."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from unstall.ps.bench import PSBenchResult
from unstall.ps.train import PSRunResult
from unstall.report.plotting import new_figure, save


def plot_bench(result: PSBenchResult, path: Path) -> Path:
    """Grouped bars: one group per scenario, one bar per strategy (iterations/s), each bar
    labelled with its ratio to the oracle's throughput."""
    scenarios = list(dict.fromkeys(r.scenario for r in result.results))
    strategies = list(dict.fromkeys(r.strategy for r in result.results))
    fig, ax = new_figure(max(7.0, 1.4 * len(scenarios) + 2), 4.2)
    width = 0.8 / len(strategies)
    x = np.arange(len(scenarios))
    for i, strategy in enumerate(strategies):
        rows = [result.row(s, strategy) for s in scenarios]
        bars = ax.bar(
            x + (i - (len(strategies) - 1) / 2) * width,
            [r.throughput_it_s for r in rows],
            width,
            label=strategy,
        )
        ax.bar_label(bars, [f"{r.ratio_to_oracle:.2f}" for r in rows], fontsize=6, padding=1)
    ax.set_xticks(x, scenarios)
    ax.set_ylabel("iterations / s")
    ax.set_title(
        f"Throughput by strategy and straggler scenario ({result.workers} workers, "
        f"{result.iterations} iterations; labels: ratio to oracle)",
        fontsize=9,
    )
    ax.legend(fontsize=8, ncols=min(len(strategies), 5), loc="upper right")
    ax.set_ylim(0, ax.get_ylim()[1] * 1.15)
    return save(fig, path)


def plot_run(result: PSRunResult, path: Path) -> Path:
    """Iteration time and loss over a run, and each server's busy seconds per iteration."""
    fig, ax = new_figure(7.0, 4.0)
    its = [t.iteration for t in result.telemetry]
    ax.plot(its, [t.iter_s for t in result.telemetry], color="black", label="iteration time")
    for sid in result.server_busy_s:
        busy = [
            next((s.busy_s for s in t.servers if str(s.server) == sid), 0.0)
            for t in result.telemetry
        ]
        ax.plot(its, busy, linewidth=0.8, label=f"server {sid} busy")
    ax.set_xlabel("iteration")
    ax.set_ylabel("seconds")
    loss_ax = ax.twinx()
    loss_ax.plot(its, [t.loss for t in result.telemetry], color="tab:red", linestyle="--")
    loss_ax.set_ylabel("loss (dashed)", color="tab:red")
    ax.legend(fontsize=7, loc="upper right")
    ax.set_title(
        f"{result.strategy} on {result.scenario}: {result.throughput_it_s:.2f} it/s", fontsize=10
    )
    return save(fig, path)
