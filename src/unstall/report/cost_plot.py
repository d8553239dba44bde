"""Time vs cost of every configuration of a recommendation, its Pareto front and the budget."""

from __future__ import annotations

from pathlib import Path

from unstall.cost import Recommendation
from unstall.report.plotting import new_figure, save


def plot_recommendation(rec: Recommendation, path: Path) -> Path:
    """Scatter predicted hours (x, log) against cost (y, log), one colour per GPU type.

    The Pareto front is the black step line through its points, the budget a dashed vertical
    line, the recommended configuration a star with its label.
    """
    fig, ax = new_figure(7.5, 5.0)
    by_gpu: dict[str, list[tuple[float, float]]] = {}
    for c in rec.candidates:
        by_gpu.setdefault(c.gpu, []).append((c.predicted_hours, c.predicted_cost_usd))
    for gpu, points in sorted(by_gpu.items()):
        hours, cost = zip(*points, strict=True)
        ax.scatter(hours, cost, s=12, alpha=0.6, label=gpu.upper())
    front = rec.pareto_front
    ax.step(
        [c.predicted_hours for c in front],
        [c.predicted_cost_usd for c in front],
        where="post",
        color="black",
        linewidth=1.2,
        marker="o",
        markersize=4,
        label=f"Pareto front ({len(front)})",
    )
    ax.axvline(rec.budget_hours, color="red", linestyle="--", linewidth=1, label="budget")
    best = rec.recommended
    if best is not None:
        ax.scatter(
            [best.predicted_hours],
            [best.predicted_cost_usd],
            marker="*",
            s=220,
            color="gold",
            edgecolor="black",
            zorder=5,
            label=f"recommended: {best.label}",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("predicted training time (hours)")
    ax.set_ylabel("predicted cost (USD, on-demand)")
    verdict = "within" if rec.feasible else "nothing within"
    ax.set_title(
        f"{rec.job}: {rec.samples:,} samples x {rec.epochs:g} epochs, "
        f"{verdict} {rec.budget_hours:g} h",
        fontsize=10,
    )
    ax.legend(fontsize=7, loc="best")
    return save(fig, path)
