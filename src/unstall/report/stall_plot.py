"""Stacked bars of per-iteration compute and stalls, one bar per stall report."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from unstall.profile import STALL_FIELDS, StallReport
from unstall.report.plotting import new_figure, save

LABELS = {
    "compute_s": "compute",
    "fetch_stall_s": "fetch stall",
    "prep_stall_s": "prep stall",
    "interconnect_stall_s": "interconnect stall",
    "network_stall_s": "network stall",
}


def plot_stalls(reports: Sequence[StallReport], labels: Sequence[str], path: Path) -> Path:
    """One stacked bar per report: milliseconds per iteration of compute and each stall."""
    # Extra width on the right holds the legend, which would otherwise cover the bars.
    fig, ax = new_figure(max(4.0, 1.6 * len(reports) + 2.5) + 2.2, 4.0)
    bottoms = [0.0] * len(reports)
    for name in STALL_FIELDS:
        heights = [getattr(r, name) * 1e3 for r in reports]
        ax.bar(labels, heights, bottom=bottoms, label=LABELS[name])
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    ax.set_ylabel("ms per iteration")
    ax.set_title("Where an iteration's time goes")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    return save(fig, path)
