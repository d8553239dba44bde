"""`unstall recommend`: the cheapest cloud GPU configuration that trains a job within a budget."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from unstall.cli.common import (
    EXIT_FAILED,
    JsonOpt,
    QuietOpt,
    check_writable,
    console,
    err_console,
    fmt_duration,
    handle_errors,
    progress_bar,
    save_json,
    table,
)

if TYPE_CHECKING:
    from unstall.cost import Candidate, Recommendation

COLUMNS = [
    "#",
    "configuration",
    "GPUs",
    "$/h",
    "time",
    "cost $",
    "comm stall",
    "source",
    "budget",
    "front",
]


def _hours(hours: float) -> str:
    """A predicted time given in hours, in the unit that reads at its size (s, min, h)."""
    return fmt_duration(hours * 3600)


def _usd(cost: float) -> str:
    """Dollars with the cents below $10,000 and three significant figures below $1: the ranking
    compares costs to the cent (to three figures below $10), so rows that read the same
    dollars ($224) would look tied while ranked by their cents, and a small job's costs would
    all read $0 or $0.01."""
    if cost >= 10_000:
        return f"{cost:,.0f}"
    return f"{cost:,.2f}" if cost >= 1 or cost <= 0 else f"{cost:#.3g}"


def _row(rank: int, c: Candidate) -> list[object]:
    stall = f"{c.comm_stall_share:.0%} {c.slowest_link}" if c.exposed_comm_s > 0 else "-"
    return [
        str(rank),
        c.label,
        str(c.gpus),
        f"{c.usd_per_hour:,.2f}",
        _hours(c.predicted_hours),
        _usd(c.predicted_cost_usd),
        stall,
        c.source,
        "ok" if c.within_budget else "over",
        "*" if c.on_pareto_front else "",
    ]


def show_recommendation(
    rec: Recommendation,
    *,
    top: int = 15,
    plot: Path | None = None,
    json_path: Path | None = None,
    config: object = None,
) -> None:
    """Print the ranked table and the verdict; write the plot and the JSON with its config."""
    print_recommendation(rec, top)
    if plot is not None:
        from unstall.report.cost_plot import plot_recommendation

        console.print(f"wrote {plot_recommendation(rec, plot)}", highlight=False, markup=False)
    save_json(json_path, rec, config)


def print_recommendation(rec: Recommendation, top: int) -> None:
    """The first ``top`` configurations, the catalog's dates, the recommendation."""
    shown = rec.candidates[:top]
    # The job's own batch per GPU (in its origin) is what its compute time was measured or
    # estimated at; a fixed global batch changes what each GPU computes.
    batch = (
        ""
        if rec.global_batch is None
        else f" at a global batch of {rec.global_batch:,} (split over each configuration's GPUs)"
    )
    console.print(
        f"[bold]{escape(rec.job)}[/]: {escape(rec.job_origin)}; {rec.samples:,} samples x "
        f"{rec.epochs:g} epochs{batch}; budget {rec.budget_hours:g} h",
        highlight=False,
    )
    title = (
        f"{len(shown)} of {len(rec.candidates)} configurations: within the budget by cost, "
        "then over it by time"
    )
    out = table(title, COLUMNS, [_row(i + 1, c) for i, c in enumerate(shown)])
    for i in (0, 2, 3, 4, 5):
        out.columns[i].justify = "right"
    console.print(out)
    dates = ", ".join(rec.catalog_dates)
    console.print(
        f"catalog {rec.catalog} (prices of {dates}, on-demand); network at "
        f"{rec.network_efficiency:.0%} of line rate; comm stall: share of an iteration spent "
        "in communication not hidden behind compute, and the slowest link; front: on the "
        "time/cost Pareto front",
        highlight=False,
    )
    _print_verdict(rec)


def _print_verdict(rec: Recommendation) -> None:
    if rec.recommended is not None:
        best = rec.recommended
        console.print(
            f"[bold green]recommended:[/] {best.label} ({best.gpus} {best.gpu.upper()}): "
            f"{_hours(best.predicted_hours)}, ${_usd(best.predicted_cost_usd)} "
            f"({best.source}); fastest: {rec.fastest.label}, "
            f"{_hours(rec.fastest.predicted_hours)} for ${_usd(rec.fastest.predicted_cost_usd)}",
            highlight=False,
        )
        return
    fastest = rec.fastest
    err_console.print(
        f"[bold red]no configuration meets the {rec.budget_hours:g} h budget:[/] the fastest, "
        f"{fastest.label}, needs {_hours(fastest.predicted_hours)} "
        f"({rec.fastest_over_budget:.2f} x the budget) for ${_usd(fastest.predicted_cost_usd)}",
        highlight=False,
    )


@handle_errors
def recommend(
    samples: Annotated[int, typer.Option("--samples", min=1, help="Training samples per epoch.")],
    # No min= here: typer's bound is inclusive and its help would show 0 as allowed
    # ([x>=0.0]); TrainingConfig refuses 0 and below, naming --epochs.
    epochs: Annotated[
        float, typer.Option("--epochs", help="Epochs to train, > 0 (a fraction is fine).")
    ],
    budget_hours: Annotated[
        float, typer.Option("--budget-hours", help="Time budget for the whole training, hours.")
    ],
    profile: Annotated[
        Path | None,
        typer.Option(
            "--profile", help="A JobProfile JSON (from `unstall profile`).", dir_okay=False
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model", help="A zoo model (see `unstall sim models`) estimated from FLOPs."
        ),
    ] = None,
    catalog_path: Annotated[
        Path | None,
        typer.Option(
            "--catalog", help="Instance catalog CSV (default: the AWS one shipped).", dir_okay=False
        ),
    ] = None,
    families: Annotated[
        list[str] | None,
        typer.Option("--family", help="Only these instance families (repeat: --family p3 ...)."),
    ] = None,
    max_instances: Annotated[
        int, typer.Option("--max-instances", min=1, help="Try 1..N instances of each type.")
    ] = 16,
    global_batch: Annotated[
        int | None,
        typer.Option(
            "--global-batch",
            min=1,
            help="Keep this global batch on every configuration (default: keep the job's "
            "per-GPU batch, so the global batch grows with the GPUs).",
        ),
    ] = None,
    precision: Annotated[
        str, typer.Option("--precision", help="fp32, or fp16 (mixed precision, tensor cores).")
    ] = "fp32",
    network_efficiency: Annotated[
        float | None,
        typer.Option(
            "--network-efficiency",
            help="Share of the network line rate gradients achieve (default: the share "
            "calibrated on Pollux's measurements).",
        ),
    ] = None,
    top: Annotated[int, typer.Option("--top", min=1, help="Rows of the table to show.")] = 15,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot", help="Write the time/cost plot with its Pareto front (PNG).", dir_okay=False
        ),
    ] = None,
    json_path: JsonOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Rank cloud GPU configurations (instance type x 1..N) by predicted time and cost; recommend
    the cheapest one within the budget. Exit 1 when none meets it."""
    from unstall.config import check
    from unstall.cost import recommend as run_recommend
    from unstall.cost import recommend_config, resolve_catalog, resolve_job
    from unstall.net.topology import CALIBRATED_NETWORK_EFFICIENCY

    check_writable(plot, json_path)
    config = recommend_config(
        samples=samples,
        epochs=epochs,
        budget_hours=budget_hours,
        global_batch=global_batch,
        network_efficiency=(
            CALIBRATED_NETWORK_EFFICIENCY if network_efficiency is None else network_efficiency
        ),
        max_instances=max_instances,
        families=tuple(families or ()),
    )
    catalog = resolve_catalog(catalog_path)
    check(
        (profile is None) != (model is None),
        "recommend",
        "--profile/--model",
        "give exactly one of them",
    )
    job = resolve_job(profile if profile is not None else model, catalog, precision=precision)
    selected = [i for i in catalog if config.selects(i)]
    with progress_bar("predicting", len(selected), quiet) as advance:
        rec = run_recommend(job, config, catalog=catalog, on_instance=lambda _: advance(1))
    inputs = {
        "profile": profile,
        "model": model,
        "catalog": catalog.source,
        "precision": precision,
    }
    show_recommendation(
        rec, top=top, plot=plot, json_path=json_path, config={**inputs, "recommend": config}
    )
    if not rec.feasible:
        raise typer.Exit(EXIT_FAILED)
