"""The plot of `unstall sim sweep`: average JCT (mean over seeds, bars one standard deviation)
against congestion, a line per policy, a panel per cluster and trace."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from unstall.report.plotting import save

LABELS = {
    "avg_jct_h": "average JCT (hours)",
    "p99_jct_h": "p99 JCT (hours)",
    "makespan_h": "makespan (hours)",
    "queue_h": "average queueing (hours)",
    "comm_overhead_frac": "communication overhead (share of run time)",
    "gpu_util": "GPU utilisation",
}


def plot_sweep(summary: pd.DataFrame, path: Path, figure: str = "avg_jct_h") -> Path:
    """``summary`` is :func:`unstall.sim.sweep.summarise_sweep`'s table; ``figure`` one of its
    figures (columns ``FIGURE_mean`` and ``FIGURE_std``)."""
    panels = list(summary.groupby(["cluster", "trace"], sort=False))
    fig, axes = plt.subplots(
        1, len(panels), figsize=(5.5 * len(panels), 4.0), dpi=110, squeeze=False
    )
    for ax, ((cluster, trace), panel) in zip(axes[0], panels, strict=True):
        levels = list(dict.fromkeys(panel["congestion"]))
        for policy, rows in panel.groupby("policy", sort=False):
            rows = rows.set_index("congestion").reindex(levels)
            ax.errorbar(
                range(len(levels)),
                rows[f"{figure}_mean"],
                yerr=rows[f"{figure}_std"],
                marker="o",
                capsize=3,
                label=str(policy),
            )
        ax.set_xticks(range(len(levels)), levels)
        ax.set_xlabel("background congestion")
        ax.set_ylabel(LABELS.get(figure, figure))
        ax.set_title(f"{Path(str(cluster)).name}, {Path(str(trace)).name}", fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    return save(fig, path)
