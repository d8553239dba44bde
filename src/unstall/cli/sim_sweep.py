"""`unstall sim sweep`: a grid of simulated runs as Ray tasks, gathered into one table and plot."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from unstall.cli.common import (
    EXIT_FAILED,
    Interrupted,
    JsonOpt,
    QuietOpt,
    check_folder_writable,
    check_writable,
    comma_list,
    console,
    err_console,
    handle_errors,
    named_in_file,
    progress_bar,
    save_json,
    table,
)
from unstall.cli.sim_run import (
    DurationGpuOpt,
    FormatOpt,
    JobProfileOpt,
    MaxJobsOpt,
    ModelMixOpt,
    RestoreOpt,
)
from unstall.cli.sim_text import parse_model_mix, parse_pairs, split_policy_options
from unstall.errors import ConfigError
from unstall.results import replaced_atomically

if TYPE_CHECKING:
    import pandas as pd

    from unstall.sim.sweep import CellOutcome, SweepGrid


def _seeds(text: str) -> tuple[int, ...]:
    """``0,1,2`` or a range ``0-4`` (both ends included)."""
    try:
        if "-" in text and "," not in text:
            first, _, last = text.partition("-")
            start, end = int(first), int(last)
        else:
            return tuple(int(part) for part in comma_list(text))
    except ValueError:
        raise ConfigError("--seeds", text, "expected 0,1,2 or a range 0-4") from None
    if end < start:
        # An empty range, which the grid would report as "no seeds" without saying why.
        why = f"the range's end {end} is below its start {start}: write {end}-{start}"
        raise ConfigError("--seeds", text, why)
    return tuple(range(start, end + 1))


@handle_errors
def sweep(
    policies: Annotated[
        str,
        typer.Option(
            "--policies",
            callback=named_in_file("policy class", "MyPolicy"),
            help="Comma-separated policies, built-in or FILE.py:Class; LABEL=POLICY runs one "
            "again under a label (as sim compare).",
        ),
    ],
    congestion: Annotated[
        str, typer.Option("--congestion", help="Comma-separated levels or CSV schedules.")
    ] = "none,medium,high",
    seeds: Annotated[str, typer.Option("--seeds", help="Seeds: 0,1,2 or a range 0-4.")] = "0,1,2",
    clusters: Annotated[
        str, typer.Option("--clusters", help="Comma-separated presets or TOML/JSON files.")
    ] = "small",
    traces: Annotated[
        str,
        typer.Option("--traces", help="Comma-separated trace files; 'default': the embedded one."),
    ] = "default",
    trace_format: FormatOpt = "auto",
    max_jobs: MaxJobsOpt = None,
    restore_s: RestoreOpt = 60.0,
    policy_option: Annotated[
        list[str] | None,
        typer.Option("--policy-option", help="POLICY.KEY=VALUE, repeatable (as sim compare)."),
    ] = None,
    job_profile: JobProfileOpt = None,
    model_mix: ModelMixOpt = None,
    duration_gpu: DurationGpuOpt = None,
    address: Annotated[
        str | None,
        typer.Option(
            "--address",
            help="An existing Ray cluster (HOST:PORT; or RAY_ADDRESS); default: a local Ray.",
        ),
    ] = None,
    working_dir: Annotated[
        Path | None,
        typer.Option(
            "--working-dir",
            help="Folder Ray ships to every node and runs the cells in (Ray's runtime "
            "environment): for a policy file that imports its own modules. A policy class "
            "named FILE.py:Class travels by itself.",
        ),
    ] = None,
    out: Annotated[
        Path, typer.Option("--out", help="Folder for runs/*.json, runs.csv, summary.csv, plot.")
    ] = Path("out/sim-sweep"),
    json_path: JsonOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Run policies x congestion levels x seeds x clusters x traces as Ray tasks; print the mean
    and spread over seeds; keep each run's JSON. Failed cells are reported (exit code 1) while
    the others finish."""
    # Ray is imported before user code loads: its classes then travel to Ray's workers by value.
    from unstall.ray_connect import cluster_address, working_dir_env
    from unstall.sim.sweep import SweepGrid

    runtime_env = working_dir_env(working_dir, owner="sweep")  # a bad folder costs no Ray start
    check_folder_writable(out)
    check_writable(json_path)
    grid = SweepGrid(
        policies=tuple(comma_list(policies)),
        congestions=tuple(comma_list(congestion)),
        seeds=_seeds(seeds),
        clusters=tuple(comma_list(clusters)),
        traces=tuple(comma_list(traces)),
    )
    pairs = parse_pairs(policy_option or [], "--policy-option", "POLICY.KEY=VALUE")
    settings: dict[str, object] = {
        "max_jobs": max_jobs,
        "restore_s": restore_s,
        "duration_gpu": duration_gpu,
        "model_mix": None if model_mix is None else dict(parse_model_mix(model_mix) or ()),
    }
    outcomes = _run_grid(
        grid,
        split_policy_options(pairs, grid.policies),
        settings,
        profiles=tuple(str(p) for p in job_profile or ()),
        trace_format=trace_format,
        address=address,
        runtime_env=runtime_env,
        out=out,
        quiet=quiet,
    )
    config = {
        "grid": grid,
        "settings": settings,
        "policy_options": pairs,
        "address": cluster_address(address),  # the cluster joined, RAY_ADDRESS's too
        "working_dir": None if runtime_env is None else runtime_env["working_dir"],
    }
    failed = _report(grid, outcomes, out, json_path, config)
    if failed:
        raise typer.Exit(EXIT_FAILED)


def _run_grid(
    grid: SweepGrid,
    options: dict[str, tuple[tuple[str, str], ...]],
    settings: dict[str, object],
    *,
    profiles: tuple[str, ...],
    trace_format: str,
    address: str | None,
    runtime_env: dict[str, Any] | None,
    out: Path,
    quiet: bool,
) -> list[CellOutcome]:
    """Resolve every label, connect to Ray, run the cells; each run's JSON lands in out/runs."""
    from unstall.results import write_result
    from unstall.sim.sweep_ray import run_sweep
    from unstall.sim.sweep_tasks import sweep_tasks, sweep_traces

    # Every label resolved before Ray starts: a typo costs no cluster start.
    loaded = sweep_traces(grid.traces, trace_format)
    tasks = sweep_tasks(
        grid, traces=loaded, policy_options=options, settings=settings, job_profiles=profiles
    )
    runs = out / "runs"
    finished: list[CellOutcome] = []
    try:
        with progress_bar(f"sweep: {len(tasks)} runs on Ray", len(tasks), quiet) as advance:

            def done(outcome: CellOutcome) -> None:
                if outcome.result is not None:
                    config = {"cell": outcome.cell, "settings": settings}
                    write_result(runs / f"{outcome.cell.key}.json", outcome.result, config)
                finished.append(outcome)
                advance(1)

            return run_sweep(tasks, address=address, runtime_env=runtime_env, on_done=done)
    except KeyboardInterrupt:
        raise _interrupted(grid, finished, len(tasks), runs) from None


def _interrupted(
    grid: SweepGrid, finished: list[CellOutcome], cells: int, runs: Path
) -> Interrupted:
    """Print the summary of the cells that finished before a Ctrl-C; the line to end with."""
    from unstall.sim.sweep import summarise_sweep, sweep_rows

    if finished:
        console.print(_summary_table(grid, summarise_sweep(sweep_rows(finished))))
    ok = sum(1 for outcome in finished if outcome.ok)
    kept = f" (each one's JSON in {runs})" if ok else ""
    return Interrupted(
        f"stopped with {len(finished)} of {cells} runs done, {ok} of them ok{kept}; "
        "no summary written"
    )


def _report(
    grid: SweepGrid,
    outcomes: list[CellOutcome],
    out: Path,
    json_path: Path | None,
    config: dict[str, object],
) -> int:
    """Print the summary and the failed cells; write runs.csv, summary.csv, the plot and
    --json. Returns the number of failed cells."""
    from unstall.report.sweep_plot import plot_sweep
    from unstall.sim.sweep import SweepResult, summarise_sweep, sweep_rows

    rows = sweep_rows(outcomes)
    summary = summarise_sweep(rows)
    out.mkdir(parents=True, exist_ok=True)
    for frame, name in ((rows, "runs.csv"), (summary, "summary.csv")):
        with replaced_atomically(out / name) as tmp:
            frame.to_csv(tmp, index=False)
    console.print(_summary_table(grid, summary))
    _warn_degenerate(outcomes)
    failed = rows[~rows["ok"]]
    for _, row in failed.iterrows():
        err_console.print(
            "[bold red]failed:[/] "
            + escape(
                f"{row.policy} / {row.congestion} / seed {row.seed} / {row.cluster} / "
                f"{row.trace}: {row.error}{_missing_module_hint(str(row.error))}"
            ),
            highlight=False,
            soft_wrap=True,  # one line a cell, whatever the terminal's width
        )
    wrote = [out / "runs.csv", out / "summary.csv"]
    if not summary[summary["seeds"] > 0].empty:
        wrote.append(plot_sweep(summary[summary["seeds"] > 0], out / "sweep.png"))
    console.print(
        f"{len(rows) - len(failed)} of {len(rows)} runs done; wrote {out / 'runs'}/*.json, "
        + ", ".join(str(p) for p in wrote),
        highlight=False,
        markup=False,
    )
    save_json(json_path, SweepResult.of(grid, outcomes), config)
    return len(failed)


def _missing_module_hint(error: str) -> str:
    """What to do when a cell's worker could not import a module that the policy's file
    imports: Ray's workers have the file's class, not the folder beside it."""
    if "No module named" not in error:
        return ""
    if "No module named 'unstall" in error:
        return " (every node of the Ray cluster needs unstall installed)"
    return (
        " (a module your policy's file imports: ship the folder that holds it with "
        "--working-dir FOLDER)"
    )


def _warn_degenerate(outcomes: list[CellOutcome]) -> None:
    """One warning line per trace and cluster whose runs simulated nothing (a trace without
    jobs, or none that fits the cluster: their figures are zeros, no measurement) or left jobs
    out (larger than the whole cluster), as `sim run` warns of its one run."""
    said: set[tuple[str, str]] = set()
    for outcome in sorted(outcomes, key=lambda o: o.cell.index):
        cell, result = outcome.cell, outcome.result
        key = (cell.trace, cell.cluster)
        if result is None or key in said or (result.jobs > 0 and not result.jobs_rejected):
            continue
        said.add(key)  # the same jobs fit in every run of a trace on a cluster
        where = f"trace {Path(cell.trace).name} on cluster {Path(cell.cluster).name}"
        if result.jobs == 0:
            why = "the trace holds no jobs: nothing was simulated and its figures are 0"
        elif result.jobs_rejected == result.jobs:
            why = "no job fits the cluster: nothing was simulated and its figures are 0"
        else:
            why = (
                f"{result.jobs_rejected} of {result.jobs} jobs need more than the cluster's "
                f"{result.total_gpus} GPUs and were left out"
            )
        warning = f"[bold yellow]warning:[/] {escape(where)}: {why}"
        err_console.print(warning, highlight=False, soft_wrap=True)


def _summary_table(grid: SweepGrid, summary: pd.DataFrame) -> object:
    def both(row: Mapping[Hashable, Any], figure: str, digits: int = 3, scale: float = 1.0) -> str:
        mean, std = scale * float(row[f"{figure}_mean"]), scale * float(row[f"{figure}_std"])
        if mean != mean:  # no seed ran
            return "-"
        std = 0.0 if std <= 1e-9 * abs(mean) else std  # float noise between equal runs
        return f"{mean:.{digits}g}±{std:.1g}"

    columns = ["trace", "cluster", "congestion", "policy", "seeds", "avg JCT h", "p99 JCT h"]
    # The units of `sim run`'s table: trace hours, shares in percent.
    columns += ["makespan h", "avg queue h", "comm ovh %", "GPU util %"]
    rows = []
    for r in summary.to_dict("records"):
        failed = f" ({r['failed']} failed)" if r["failed"] else ""
        rows.append(
            [
                Path(str(r["trace"])).name,
                Path(str(r["cluster"])).name,
                str(r["congestion"]),
                _short(str(r["policy"])),
                f"{r['seeds']}{failed}",
                both(r, "avg_jct_h"),
                both(r, "p99_jct_h"),
                both(r, "makespan_h"),
                both(r, "queue_h"),
                both(r, "comm_overhead_frac", scale=100.0),
                both(r, "gpu_util", scale=100.0),
            ]
        )
    seeds = ",".join(str(s) for s in grid.seeds)
    return table(f"sweep: mean±standard deviation over seeds {seeds}", columns, rows)


def _short(label: str) -> str:
    """A policy from a file by the file's name: ``a/b/mine.py:Mine`` -> ``mine.py:Mine``."""
    target, sep, name = label.rpartition(":")
    return f"{Path(target).name}:{name}" if sep else label


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep)
