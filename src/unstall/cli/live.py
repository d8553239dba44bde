"""`unstall live run`: the simulator's policies place real training jobs on a Ray cluster."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from unstall.cli.common import (
    Interrupted,
    JsonOpt,
    QuietOpt,
    check_writable,
    console,
    err_console,
    fmt_duration,
    handle_errors,
    named_in_file,
    positive,
    progress_bar,
    save_json,
    table,
    writable_file,
)
from unstall.cli.sim_reports import REJECTED_NAMED
from unstall.cli.sim_run import (
    PRESETS,
    DurationGpuOpt,
    FormatOpt,
    ModelMixOpt,
    PolicyOpt,
    PolicyOptionOpt,
    TraceOpt,
)
from unstall.cli.sim_text import parse_model_mix, parse_pairs

if TYPE_CHECKING:
    from unstall.live import LiveRun, LiveStatus, UserWork
    from unstall.loop import JobEvent
    from unstall.sim import SimResult

app = typer.Typer(no_args_is_help=True, add_completion=False)

# Above this share of their run time lost to an emulating machine that could not keep the pace,
# a run's times say more about the machine than about the cluster: the user is told.
BEHIND_WARN_FRAC = 0.01
# Above this share of the median JCT, a job's start-up (wall seconds times the speedup) is what
# the live times are made of: it varies from job to job as the machine does, which no
# prediction follows (at --speedup 2000 on the tiny preset, 2 min of a 5 min median JCT, and
# gaps of 30-60% to the simulator). The user is told to lower --speedup.
STARTUP_WARN_FRAC = 0.2

# The rows of the live-vs-simulated table: label, SimResult field, and its kind: a count, a
# time of the trace (every one in the same unit, named in its label) or a share (percent, as
# the simulator's table shows the communication overhead: of the jobs' run time).
COUNT, TIME, SHARE = "count", "time", "share"
COMPARED: tuple[tuple[str, str, str], ...] = (
    ("jobs finished", "jobs_finished", COUNT),
    ("makespan", "makespan_s", TIME),
    ("average JCT", "avg_jct_s", TIME),
    ("median JCT", "p50_jct_s", TIME),
    ("p99 JCT", "p99_jct_s", TIME),
    ("average queueing", "avg_queue_s", TIME),
    ("comm overhead", "comm_overhead_frac", SHARE),
    ("preemptions", "preemptions", COUNT),
    ("migrations", "migrations", COUNT),
)
TIME_UNITS = (("h", 3600.0), ("min", 60.0), ("s", 1.0))


@app.command("run")
@handle_errors
def run(
    policy: PolicyOpt,
    trace: TraceOpt = None,
    trace_format: FormatOpt = "auto",
    policy_option: PolicyOptionOpt = None,
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster",
            help=f"Cluster preset ({PRESETS}) or TOML/JSON topology file. Without --address a "
            "local Ray "
            "emulates its nodes [default: tiny, 4 nodes x 4 GPUs in 2 racks]; with one, its "
            "nodes are mapped onto the Ray cluster's in order [default: read from Ray].",
            show_default=False,
        ),
    ] = None,
    address: Annotated[
        str | None,
        typer.Option(
            "--address",
            help="Ray cluster to run on, HOST:PORT (default: RAY_ADDRESS, else a local Ray "
            "started for the run).",
        ),
    ] = None,
    speedup: Annotated[
        float,
        typer.Option(
            "--speedup",
            callback=positive,
            help="Trace seconds per wall second: jobs' work is divided by it.",
        ),
    ] = 1.0,
    compute: Annotated[
        str,
        typer.Option(
            "--compute",
            help="real: train each job's model for real; emulated: wait the perf model's "
            "iteration times, with a real all-reduce every step.",
        ),
    ] = "emulated",
    max_jobs: Annotated[
        int | None, typer.Option("--max-jobs", min=1, help="Run only the first N jobs.")
    ] = None,
    seed: Annotated[
        int, typer.Option("--seed", help="Seed of model assignment, data and the policy.")
    ] = 0,
    model_mix: ModelMixOpt = None,
    duration_gpu: DurationGpuOpt = None,
    slot_resource: Annotated[
        str,
        typer.Option(
            "--slot-resource",
            help="Ray resource that counts GPUs on nodes without a GPU resource.",
        ),
    ] = "unstall_gpu",
    checkpoint_every_s: Annotated[
        float,
        typer.Option(
            "--checkpoint-every-s",
            callback=positive,
            help="Wall seconds between a job's checkpoints.",
        ),
    ] = 5.0,
    max_failures: Annotated[
        int,
        typer.Option(
            "--max-failures",
            min=1,
            help="Failures in a row (no checkpoint gained) after which a job is given up.",
        ),
    ] = 3,
    batch_size: Annotated[
        int, typer.Option("--batch-size", min=1, help="Per-GPU batch of real compute.")
    ] = 8,
    image_size: Annotated[
        int, typer.Option("--image-size", min=1, help="Image side of zoo CNNs in real compute.")
    ] = 32,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            callback=named_in_file("model function", "make_model"),
            help="Your model for every job, FILE.py:FUNC (real compute; with --data and --loss).",
        ),
    ] = None,
    data: Annotated[
        str | None,
        typer.Option(
            "--data",
            callback=named_in_file("data function", "make_data"),
            help="Your data function data(rank, world_size), FILE.py:FUNC.",
        ),
    ] = None,
    loss: Annotated[
        str | None,
        typer.Option(
            "--loss",
            help="Loss of --model: cross_entropy (the default), mse or FILE.py:FUNC.",
            show_default=False,
        ),
    ] = None,
    train: Annotated[
        str | None,
        typer.Option(
            "--train",
            callback=named_in_file("training function", "train"),
            help="Your own training loop for every job, train(ctx), FILE.py:FUNC (real "
            "compute; instead of --model/--data/--loss). See docs/live.md.",
        ),
    ] = None,
    log_dir: Annotated[
        Path | None,
        typer.Option(
            "--log-dir",
            help="Each job's processes append their course, your code's output and its "
            "reports to DIR/<job>.log.",
        ),
    ] = None,
    events: Annotated[
        bool,
        typer.Option(
            "--events",
            "-v",
            help="One line per job event as it happens (arrived, started on, preempted, "
            "migrated, finished, failed), on stderr; where stderr is not a terminal, unless "
            "--quiet, always.",
        ),
    ] = False,
    restore_s: Annotated[
        float | None,
        typer.Option(
            "--restore-s",
            min=0.0,
            help="Restore seconds the simulator's prediction charges (default: what the run "
            "measured).",
            show_default=False,
        ),
    ] = None,
    predict: Annotated[
        bool,
        typer.Option(
            "--predict/--no-predict", help="Also simulate the same run and show both side by side."
        ),
    ] = True,
    jobs_out: Annotated[
        Path | None,
        typer.Option("--jobs-out", help="Write per-job records (.csv or .parquet)."),
    ] = None,
    json_path: JsonOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Run a trace under a policy on a Ray cluster, for real, beside the simulator's prediction.

    Times are in trace seconds (wall seconds x --speedup). See docs/live.md.
    """
    from unstall.cli.sim_run import check_jobs_out
    from unstall.live import LiveConfig, LiveInterrupted, run_live
    from unstall.sched import resolve_policy
    from unstall.traces import resolve_trace

    check_writable(jobs_out, json_path)
    check_jobs_out(jobs_out)
    config = LiveConfig(
        speedup=speedup,
        compute=compute,
        slot_resource=slot_resource,
        checkpoint_every_s=checkpoint_every_s,
        max_failures=max_failures,
        batch_size=batch_size,
        image_size=image_size,
        restore_s=restore_s,
        seed=seed,
    )
    loop = _train_loop(train, any(given is not None for given in (model, data, loss)), compute)
    user = _user_work(model, data, loss)
    chosen = resolve_policy(
        policy, parse_pairs(policy_option or [], "--policy-option", "KEY=VALUE"), owner="live"
    )
    loaded = resolve_trace(trace, trace_format)
    mix = parse_model_mix(model_mix)

    def say(text: str) -> None:
        # Shown with --quiet too (it hides progress bars): failures and lost nodes are news.
        err_console.print(text, highlight=False, markup=False)

    console.print(
        f"live run: {chosen.name} on {'Ray at ' + address if address else 'a local Ray'}, "
        f"{compute} compute, speedup {speedup:g}",
        highlight=False,
    )
    total = min(len(loaded), max_jobs or len(loaded))
    try:
        with _watch(f"live run of {chosen.name}", total, quiet, events) as (advance, on_status):
            run = run_live(
                loaded,
                chosen,
                cluster=cluster,
                address=address,
                config=config,
                max_jobs=max_jobs,
                model_mix=dict(mix) if mix else None,
                duration_gpu=duration_gpu,
                user_work=user,
                train=loop,
                log_dir=log_dir,
                predict=predict,
                log=say,
                on_finish=advance,
                on_event=_event_printer(events, quiet),
                on_status=on_status,
            )
    except LiveInterrupted as stop:
        partial: LiveRun | None = getattr(stop, "run", None)
        if partial is not None:
            _write(partial, jobs_out, json_path, config)
        raise Interrupted(
            f"stopped with {stop}; every job's processes stopped"
            + ("; what finished was written" if partial is not None and json_path else "")
        ) from None
    print_live(run)
    _write(run, jobs_out, json_path, config)


def shows_table(quiet: bool, events: bool) -> bool:
    """The table of running and queued jobs: on a terminal, unless --quiet, or --events (its
    lines would scroll the table away; they come with a progress bar instead)."""
    return not (quiet or events) and err_console.is_terminal


@contextmanager
def _watch(
    title: str, total: int, quiet: bool, events: bool
) -> Iterator[tuple[Callable[[int], None] | None, Callable[[LiveStatus], None] | None]]:
    """What the run shows while it runs: yields ``on_finish`` and ``on_status`` for
    ``run_live``: the table of jobs where :func:`shows_table`, else a progress bar (none
    where stderr is not a terminal: the event lines tell what happens)."""
    if shows_table(quiet, events):
        from unstall.cli.live_board import status_board

        with status_board(title) as on_status:
            yield None, on_status
        return
    with progress_bar(title, total, quiet) as advance:
        yield advance, None


def _event_printer(asked: bool, quiet: bool) -> Callable[[JobEvent], None] | None:
    """One line per job event on stderr (trace seconds), where asked, or where stderr is not a
    terminal (a log file would otherwise show nothing between the start and the table) unless
    --quiet."""
    if not (asked or (not quiet and not err_console.is_terminal)):
        return None

    def show(event: JobEvent) -> None:
        detail = f" {event.detail}" if event.detail else ""
        verb = {"started": "started on", "migrated": "migrated to"}.get(event.kind, event.kind)
        err_console.print(
            f"{event.time_s:10.1f} s  job {event.job_id} {verb}{detail}",
            highlight=False,
            markup=False,
        )

    return show


def _train_loop(train: str | None, model_given: bool, compute: str) -> Callable[..., Any] | None:
    """The user's ``train(ctx)``, loaded here so that a missing file or function is a usage
    error at once (it travels to the executors by value)."""
    if train is None:
        return None
    from unstall.errors import ConfigError

    if model_given:
        raise ConfigError(
            "live",
            "train",
            "--train is a whole training loop: give it without --model, --data and --loss",
        )
    from unstall.usercode import load_callable

    loop = load_callable(train, what="training function")  # a missing file is said first
    if compute != "real":
        raise ConfigError("live", "train", "a training loop runs for real: add --compute real")
    return loop


@app.command("calibrate")
@handle_errors
def calibrate(
    runs: Annotated[
        list[Path],
        typer.Argument(
            help="Live runs' JSON (`unstall live run --json`), one or more.", dir_okay=False
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            help="Where to write the fitted start-up model (for `unstall sim run "
            "--startup-model FILE`).",
            dir_okay=False,
            callback=writable_file,
        ),
    ],
) -> None:
    """Fit a start-up and restore model on live runs' measured set-ups.

    Each job's start-up and each restore, in wall seconds, as a function of the GPUs, nodes
    and racks its placement spans and its model; `unstall sim run --startup-model FILE` then
    charges it (scaled by --speedup). See docs/live.md.
    """
    import shlex

    from unstall.sim import fit_startup_model, read_setups

    setups, compute = read_setups(runs)
    model = fit_startup_model(
        setups,
        compute=compute,
        source=f"{len(setups)} set-ups of {len(runs)} live runs: "
        + ", ".join(path.name for path in runs),
        command="unstall live calibrate "
        + " ".join(shlex.quote(str(a)) for a in [*runs, "--out", out]),
    )
    rows = []
    for kind, terms in (("start-up", model.startup), ("restore", model.restore)):
        rows.append(
            [
                kind,
                terms.samples or "0 (borrowed)",
                terms.median_s,
                terms.base_s,
                terms.per_gpu_s,
                terms.per_node_s,
                terms.per_rack_s,
                terms.median_abs_error_s,
                ", ".join(f"{m} {s:+.3g}" for m, s in terms.by_model_s) or "-",
            ]
        )
    columns = ["", "set-ups", "median", "base", "a GPU", "a node", "a rack", "error", "models"]
    title = f"start-up model, wall seconds ({compute} compute; error: median absolute, in-sample)"
    console.print(table(title, columns, rows, wrap=["models"]))
    if not (model.startup.samples and model.restore.samples):
        console.print(
            "a kind with fewer than 4 set-ups of its own (runs that preempt little) borrowed the "
            "other's terms",
            highlight=False,
        )
    model.save(out)
    console.print(f"wrote {out}", highlight=False, markup=False)


def _user_work(model: str | None, data: str | None, loss: str | None) -> UserWork | None:
    """The user's model, data and loss for every job, or None for the jobs' zoo models."""
    if model is None and data is None:
        return None
    if model is None or data is None:
        from unstall.errors import ConfigError

        raise ConfigError(
            "live", "model" if model is None else "data", "give --model and --data together"
        )
    from unstall.live import UserWork
    from unstall.usercode import load_callable
    from unstall.workload.losses import resolve_loss

    return UserWork(
        model_fn=load_callable(model, what="model function"),
        data_fn=load_callable(data, what="data function"),
        loss=resolve_loss(loss or "cross_entropy", owner="live"),
    )


def _write(run: LiveRun, jobs_out: Path | None, json_path: Path | None, config: object) -> None:
    from unstall.cli.common import write_table

    if jobs_out is not None:
        write_table(run.jobs, jobs_out)
    save_json(json_path, run, {"live": config})


def _gap(live: float, simulated: float) -> str:
    if simulated == 0:
        return "-" if live == 0 else "n/a"
    return f"{100 * (live - simulated) / simulated:+.1f}%"


def _print_tuner_course(run: LiveRun) -> None:
    """What a look-ahead tuner (``dally``'s) chose live, and in the simulator's prediction: a
    tuning sees the cluster as it is, so a small difference in timing can make it choose
    otherwise live than simulated."""
    from unstall.sim.lookahead import tuner_course

    live = tuner_course(run.telemetry)
    if live is None:
        return
    console.print(f"tuner live: {live.describe()}", highlight=False)
    if run.prediction is not None:
        simulated = tuner_course(run.prediction.telemetry)
        if simulated is not None:
            console.print(f"tuner simulated: {simulated.describe()}", highlight=False)


def time_unit(results: list[SimResult]) -> tuple[str, float]:
    """One unit for every time of the table: the largest that the longest time (the makespan)
    is at least one of."""
    longest = max((r.makespan_s for r in results), default=0.0)
    return next(((u, size) for u, size in TIME_UNITS if longest >= size), TIME_UNITS[-1])


def summary_table(run: LiveRun) -> object:
    """Live beside simulated, a row a figure, one unit a row (named in its label)."""
    r = run.result
    predicted: SimResult | None = run.prediction.result if run.prediction is not None else None
    unit, size = time_unit([r] + ([predicted] if predicted is not None else []))
    columns = ["", "live"] + (["simulated", "gap"] if predicted is not None else [])
    rows = []
    for label, name, kind in COMPARED:
        scale = {COUNT: 1, TIME: 1.0 / size, SHARE: 100.0}[kind]
        shown = {COUNT: label, TIME: f"{label} ({unit})", SHARE: f"{label} (% of run time)"}
        value = getattr(r, name)
        row: list[object] = [shown[kind], value * scale]
        if predicted is not None:
            other = getattr(predicted, name)
            row += [other * scale, _gap(value, other)]
        rows.append(row)
    # No title: a table's title wraps at the table's width (44 columns here); the line above
    # the table says what it shows.
    return table("", columns, rows)


def print_live(run: LiveRun) -> None:
    """The live run beside the simulator's prediction, then what only a live run measures."""
    r = run.result
    console.print(
        f"{r.policy} on {r.cluster} ({r.total_gpus} GPUs), {r.jobs} jobs; times are trace time "
        f"(wall time x speedup {run.facts.speedup:g})",
        highlight=False,
    )
    console.print(summary_table(run))
    f = run.facts
    console.print(
        f"measured in trace time: job start-up {_trace(f.startup_s_median)}, restore "
        f"{_trace(f.restore_s_median)}, checkpoint {_trace(f.checkpoint_s_median)} (medians); "
        f"in wall time: executors started in {f.executor_start_wall_s:.1f} s, decisions "
        f"{1000 * f.decide_wall_s_median:.2f} ms median and {1000 * f.decide_wall_s_max:.1f} ms "
        f"max; {f.process_failures} process failures"
        + (f", nodes lost {f.nodes_lost}" if f.nodes_lost else "")
        + (
            f"; emulated jobs behind pace {100 * f.emulation_behind_frac:.1f}% of their run time"
            if f.compute == "emulated"
            else ""
        ),
        highlight=False,
    )
    _print_tuner_course(run)
    if f.emulation_behind_frac > BEHIND_WARN_FRAC:
        err_console.print(
            f"warning: the emulated jobs fell behind the perf model's pace by "
            f"{100 * f.emulation_behind_frac:.1f}% of their run time (this machine's cores could "
            "not keep up): the live times are slower than the emulated cluster would be; use a "
            "lower --speedup or a quieter machine",
            highlight=False,
        )
    if f.startup_s_median > STARTUP_WARN_FRAC * r.p50_jct_s > 0:
        err_console.print(
            f"warning: a job's start-up took {_trace(f.startup_s_median)} of trace time (median), "
            f"{f.startup_s_median / r.p50_jct_s:.0%} of the median JCT: at --speedup "
            f"{f.speedup:g} each wall second of start-up is {f.speedup:g} trace seconds, and how "
            "it varies from job to job is the machine's, not the cluster's; use a lower "
            "--speedup for live times that tell about the scheduler",
            highlight=False,
        )
    if r.jobs_rejected:
        # Named before the run started as well (run_live's log); repeated where the results are.
        rejected = run.jobs.loc[run.jobs["outcome"] == "rejected", "job_id"].astype(str)
        more = len(rejected) - REJECTED_NAMED
        console.print(
            f"rejected before the run (more GPUs than the cluster's {r.total_gpus}): "
            + ", ".join(rejected[:REJECTED_NAMED])
            + (f" and {more} more" if more > 0 else ""),
            highlight=False,
        )


def _trace(seconds: float) -> str:
    return "-" if math.isnan(seconds) else fmt_duration(seconds)
