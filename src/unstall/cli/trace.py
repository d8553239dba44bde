"""`unstall trace ...`: summarise, convert and generate cluster job traces."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from unstall.cli.common import (
    JsonOpt,
    console,
    handle_errors,
    known_trace_format,
    save_json,
    table,
    writable_file,
)
from unstall.config import check
from unstall.traces import (
    READERS,
    ReadOptions,
    SyntheticTraceConfig,
    Trace,
    TraceSummary,
    generate,
    resolve_trace,
    write_trace,
)

app = typer.Typer(
    help="Read, summarise, convert and generate cluster job traces.", no_args_is_help=True
)

FormatOpt = Annotated[
    str,
    typer.Option(
        "--format",
        "-f",
        help=f"Trace format: auto (detect) or one of {', '.join(READERS)}.",
        callback=known_trace_format,
    ),
]
DurationFromOpt = Annotated[
    str,
    typer.Option(
        "--duration-from",
        help="pollux only: how jobs get a run time, which Pollux workloads lack: 'category' "
        "(GPU time drawn log-uniformly in the application's Pollux size class, seeded) or "
        "'midpoint' (the class's geometric midpoint).",
    ),
]
SeedOpt = Annotated[int, typer.Option("--seed", help="pollux only: seed of --duration-from.")]
TaskTableOpt = Annotated[
    Path | None,
    typer.Option(
        "--task-table",
        help="pai only: the pai_task_table.csv to join (default: beside the job table).",
        dir_okay=False,
    ),
]


def _read(
    path: Path | None, fmt_name: str, duration_from: str, seed: int, task_table: Path | None
) -> tuple[Trace, dict[str, object]]:
    """The trace at ``path`` (or the embedded default) and the settings it was read with."""
    settings: dict[str, object] = {"path": "embedded default trace"}
    if path is None:  # a format given for the embedded trace is refused, not dropped
        trace = resolve_trace(None, fmt_name)
    else:
        options = ReadOptions(pollux_duration=duration_from, seed=seed, pai_task_table=task_table)
        settings = {"path": str(path), "format": fmt_name, "options": options}
        trace = resolve_trace(path, fmt_name, options)
    # An option of another format than the trace's would be dropped without a word.
    for_format = {
        "task_table": ("pai", task_table is not None),
        "duration_from": ("pollux", duration_from != ReadOptions.pollux_duration),
        "seed": ("pollux", seed != ReadOptions.seed),
    }
    for field, (fmt, given) in for_format.items():
        where = "the embedded default trace" if path is None else str(path)
        why = f"is for {fmt} traces only; {where} is in the {trace.format} format"
        check(not given or trace.format == fmt, "trace", field, why)
    return trace, settings


@app.command("show")
@handle_errors
def show(
    path: Annotated[
        Path | None, typer.Argument(help="Trace file (default: the embedded default trace).")
    ] = None,
    fmt_name: FormatOpt = "auto",
    duration_from: DurationFromOpt = "category",
    seed: SeedOpt = 0,
    task_table: TaskTableOpt = None,
    top: Annotated[int, typer.Option("--top", help="Virtual clusters to list.", min=0)] = 10,
    json_out: JsonOpt = None,
) -> None:
    """Summarise a trace: jobs, span, GPU mix, duration quantiles, GPU-hours, tenants."""
    trace, settings = _read(path, fmt_name, duration_from, seed, task_table)
    summary = trace.summary(top=top)
    print_summary(summary)
    save_json(json_out, summary, {**settings, "top": top})


@app.command("convert")
@handle_errors
def convert(
    path: Annotated[Path, typer.Argument(help="Trace file to read.")],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Where to write: .csv or .parquet.",
            dir_okay=False,
            callback=writable_file,
        ),
    ],
    fmt_name: FormatOpt = "auto",
    duration_from: DurationFromOpt = "category",
    seed: SeedOpt = 0,
    task_table: TaskTableOpt = None,
) -> None:
    """Read a trace in any known format and write it in the unstall schema."""
    trace, _ = _read(path, fmt_name, duration_from, seed, task_table)
    write_trace(trace, out)
    console.print(
        f"wrote {out}: {len(trace):,} jobs ({trace.format} -> unstall)",
        highlight=False,
        markup=False,
    )
    _print_skipped(trace.summary())


@app.command("generate")
@handle_errors
def generate_cmd(
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Where to write: .csv or .parquet.",
            dir_okay=False,
            callback=writable_file,
        ),
    ],
    jobs: Annotated[int, typer.Option("--jobs", "-n", help="Number of jobs.")] = 1000,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the whole trace.")] = 0,
    multi_gpu_share: Annotated[
        float | None,
        typer.Option(
            "--multi-gpu-share",
            help="Share of jobs with more than one GPU (default: Philly's GPU-count mix as is).",
        ),
    ] = None,
    max_gpus: Annotated[
        int | None,
        typer.Option("--max-gpus", help="Largest job (drops bigger sizes; default: none dropped)."),
    ] = None,
    arrivals_per_hour: Annotated[
        float,
        typer.Option(
            "--arrivals-per-hour",
            # The default is Philly's fitted rate to 4 decimals (31.4698): stated once, rounded,
            # in the help rather than both ways.
            help="Mean submission rate, jobs per hour (default: Philly's, "
            f"{SyntheticTraceConfig.arrivals_per_hour:.1f}).",
            show_default=False,
        ),
    ] = SyntheticTraceConfig.arrivals_per_hour,
    load: Annotated[
        float | None,
        typer.Option("--load", help="Offered load of --cluster-gpus (sets the arrival rate)."),
    ] = None,
    cluster_gpus: Annotated[
        int | None, typer.Option("--cluster-gpus", help="Cluster size that --load refers to.")
    ] = None,
    duration_scale: Annotated[
        float, typer.Option("--duration-scale", help="Multiply Philly's durations by this.")
    ] = 1.0,
    json_out: JsonOpt = None,
) -> None:
    """Generate a seeded synthetic trace with Philly's statistics (or overrides) and write it."""
    config = SyntheticTraceConfig(
        jobs=jobs,
        seed=seed,
        multi_gpu_share=multi_gpu_share,
        max_gpus=max_gpus,
        arrivals_per_hour=arrivals_per_hour,
        load=load,
        cluster_gpus=cluster_gpus,
        duration_scale=duration_scale,
    )
    trace = generate(config)
    write_trace(trace, out)
    summary = trace.summary()
    print_summary(summary)
    console.print(f"wrote {out}", highlight=False, markup=False)
    save_json(json_out, summary, config)


@app.command("formats")
def formats() -> None:
    """List the trace formats unstall reads."""
    rows = [(name, reader.description) for name, reader in READERS.items()]
    console.print(table("Trace formats", ("format", "what"), rows))


def print_summary(summary: TraceSummary) -> None:
    """The summary as rich tables: overview, GPU mix, durations, tenants, statuses."""
    overview = [
        ("source", summary.source),
        ("format", summary.format),
        ("jobs", f"{summary.jobs:,}"),
        ("span", f"{summary.span_s / 3600:,.2f} h ({summary.span_s / 86400:,.2f} days)"),
        ("GPU-hours", f"{summary.total_gpu_hours:,.1f}"),
        ("multi-GPU jobs", f"{summary.multi_gpu_share:.1%}"),
    ]
    console.print(table("Trace", ("", "value"), overview))
    mix = [(g, summary.gpu_counts[g], f"{share:.2%}") for g, share in summary.gpu_mix.items()]
    console.print(table("GPU mix", ("GPUs", "jobs", "share"), mix))
    quantiles = [(name, _duration_text(sec)) for name, sec in summary.duration_s.items()]
    console.print(table("Duration", ("quantile", "run time"), quantiles))
    for title, counts in (
        ("virtual cluster", summary.top_vcs),
        ("status", summary.status),
        ("model", summary.models),
    ):
        if counts:
            console.print(table("", (title, "jobs"), list(counts.items())))
    _print_skipped(summary)


def _print_skipped(summary: TraceSummary) -> None:
    for reason, count in summary.skipped.items():
        console.print(f"skipped {count:,} jobs: {reason}", highlight=False)
    for note in summary.notes:
        console.print(f"note: {note}", highlight=False)


def _duration_text(seconds: float) -> str:
    """Seconds with a friendlier unit beside them."""
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds:,.0f} s ({seconds / size:.3g} {unit})"
    return f"{seconds:.3g} s"
