"""Predicted vs measured step time of the perf-model calibration, one colour per application."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from unstall.report.plotting import new_figure, save


def plot_calibration(points: pd.DataFrame, path: Path, *, column: str = "held_out_s") -> Path:
    """Scatter ``column`` (held-out predictions by default) against ``measured_s``, log-log.

    ``points`` is the per-point table of :func:`unstall.workload.calibrate.run_calibration`. The
    diagonal is a perfect prediction; the dashed lines are +-10%.
    """
    fig, ax = new_figure(6.0, 5.5)
    for app, group in points.groupby("app", sort=True):
        ax.scatter(group["measured_s"], group[column], s=6, alpha=0.5, label=str(app))
    low = float(min(points["measured_s"].min(), points[column].min())) * 0.8
    high = float(max(points["measured_s"].max(), points[column].max())) * 1.25
    line = np.geomspace(low, high, 50)
    ax.plot(line, line, color="black", linewidth=1)
    for factor in (0.9, 1.1):
        ax.plot(line, line * factor, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_xlabel("measured step time (s)")
    what = "held-out prediction" if column == "held_out_s" else "prediction"
    ax.set_ylabel(f"{what} (s)")
    errors = (points[column] - points["measured_s"]).abs() / points["measured_s"]
    ax.set_title(
        f"Perf model vs Pollux placements: median error {errors.median():.1%}", fontsize=10
    )
    ax.legend(fontsize=8, markerscale=2, loc="upper left")
    return save(fig, path)
