"""`unstall sim run`, `sim compare` and `sim policies`: the cluster simulator from the shell."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from unstall.cli.common import (
    Interrupted,
    JsonOpt,
    QuietOpt,
    check_folder_writable,
    check_writable,
    comma_list,
    console,
    handle_errors,
    known_trace_format,
    named_in_file,
    progress_bar,
    save_json,
    table,
    write_table,
)
from unstall.cli.sim_reports import report_rejected, report_unfinished, report_unused_models
from unstall.cli.sim_startup import (
    RestoreOrModelOpt,
    SpeedupOpt,
    StartupModelOpt,
    print_startup,
)
from unstall.cli.sim_text import parse_model_mix, parse_pairs, split_policy_options
from unstall.errors import UnstallError
from unstall.net import DEVICE_PRESETS, resolve_cluster
from unstall.net.topology import TOPOLOGY_PRESETS
from unstall.results import replaced_atomically, to_jsonable, write_result
from unstall.sim import SimInterrupted, SimRequest, simulate_request
from unstall.sim.duration_gpu import duration_gpus
from unstall.traces import resolve_trace

if TYPE_CHECKING:
    from unstall.sim import SimResult, SimRun
    from unstall.traces import Trace

HOUR = 3600.0

TraceOpt = Annotated[
    Path | None,
    typer.Option(
        "--trace", help="Trace file (default: the embedded generated trace).", exists=False
    ),
]
FormatOpt = Annotated[
    str,
    typer.Option(
        "--trace-format",
        help="Trace format (auto, philly-csv, pollux, ...).",
        callback=known_trace_format,
    ),
]
# Every preset, from the registry, so that the help names each (it once left tiny out).
PRESETS = ", ".join(TOPOLOGY_PRESETS)
ClusterOpt = Annotated[
    str, typer.Option("--cluster", help=f"Cluster preset ({PRESETS}) or TOML/JSON file.")
]
CongestionOpt = Annotated[
    str,
    typer.Option(
        "--congestion", help="Background congestion: none, low, medium, high, or a CSV schedule."
    ),
]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for model assignment and congestion.")]
RestoreOpt = Annotated[
    float, typer.Option("--restore-s", help="Checkpoint+restore seconds per preemption/migration.")
]
MaxJobsOpt = Annotated[
    int | None,
    typer.Option("--max-jobs", help="Simulate only the first N jobs of the trace (default: all)."),
]
JobProfileOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--job-profile",
        help="A JobProfile JSON (`unstall profile run --profile-out`), repeatable: jobs of its "
        "model run at the measured figures (a zoo name is overridden).",
        dir_okay=False,
    ),
]
ModelMixOpt = Annotated[
    str | None,
    typer.Option(
        "--model-mix",
        help="Models for jobs whose trace names none, as NAME=SHARE,... (zoo or profiled "
        "names; default: uniform over the zoo).",
    ),
]
DurationGpuOpt = Annotated[
    str | None,
    typer.Option(
        "--duration-gpu",
        help="GPU type the trace's durations were measured on, for every job (default: the "
        "trace's gpu_type column, else v100; Philly traces say p40).",
    ),
]


PolicyOpt = Annotated[
    str,
    typer.Option(
        "--policy",
        callback=named_in_file("policy class", "MyPolicy"),
        help="Scheduling policy (see sim policies), or your own class as FILE.py:Class or "
        "package.module:Class.",
    ),
]
PolicyOptionOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--policy-option",
        help="A knob of the policy as KEY=VALUE, repeatable (e.g. dally: order=las, "
        "period_s=1800; dally-fixed: preemption=false, wait_factor=4).",
    ),
]


def _row(r) -> list[object]:  # type: ignore[no-untyped-def]
    return [
        r.policy,
        r.jobs_finished,
        r.makespan_s / HOUR,
        r.avg_jct_s / HOUR,
        r.p99_jct_s / HOUR,
        r.avg_queue_s / HOUR,
        100.0 * r.comm_overhead_frac,
        100.0 * r.gpu_util,
        r.preemptions,
        r.migrations,
        r.max_moves_per_job,
        r.sim_wall_s,
    ]


# One unit a column, named in its header, the same as the live table's rows: times of the trace
# in hours, shares in percent (communication overhead: of the jobs' run time), and the wall
# seconds this machine took to simulate, labelled as wall time.
COLUMNS = [
    "policy",
    "done",
    "makespan h",
    "avg JCT h",
    "p99 JCT h",
    "avg queue h",
    "comm ovh %",
    "GPU util %",
    "preempt",
    "migr",
    "max/job",
    "sim wall s",
]


def results_table(title: str, results: Sequence[object]) -> object:
    return table(title, COLUMNS, [_row(r) for r in results])


@handle_errors
def run(
    policy: PolicyOpt,
    trace: TraceOpt = None,
    trace_format: FormatOpt = "auto",
    cluster: ClusterOpt = "small",
    congestion: CongestionOpt = "none",
    seed: SeedOpt = 0,
    restore_s: RestoreOrModelOpt = None,
    startup_model: StartupModelOpt = "default",
    speedup: SpeedupOpt = 1.0,
    max_jobs: MaxJobsOpt = None,
    policy_option: PolicyOptionOpt = None,
    job_profile: JobProfileOpt = None,
    model_mix: ModelMixOpt = None,
    duration_gpu: DurationGpuOpt = None,
    jobs_out: Annotated[
        Path | None, typer.Option("--jobs-out", help="Write per-job records (.csv or .parquet).")
    ] = None,
    json_path: JsonOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Simulate one policy on a trace and print its metrics (start-ups and restores charged by
    the start-up model: a prediction of `unstall live run` at --speedup)."""
    request = SimRequest(
        policy=policy,
        policy_options=parse_pairs(policy_option or [], "--policy-option", "KEY=VALUE"),
        cluster=cluster,
        congestion=congestion,
        seed=seed,
        restore_s=restore_s,
        startup_model=startup_model,
        speedup=speedup,
        max_jobs=max_jobs,
        job_profiles=tuple(str(p) for p in job_profile or ()),
        model_mix=parse_model_mix(model_mix),
        duration_gpu=duration_gpu,
    )
    check_writable(jobs_out, json_path)  # before the simulation, not after it
    check_jobs_out(jobs_out)
    loaded = resolve_trace(trace, trace_format)
    print_header(request, loaded)
    print_startup(startup_model, speedup, restore_s)
    total = min(len(loaded), max_jobs or len(loaded))
    try:
        with progress_bar(f"simulating {policy}", total, quiet) as advance:
            outcome = simulate_request(request, loaded, on_finish=advance)
    except SimInterrupted as exc:
        raise Interrupted(f"stopped at {exc.progress()}; nothing written") from None
    report_rejected(outcome)
    report_unfinished(outcome, policy)
    report_unused_models(outcome, request, loaded)
    r = outcome.result
    console.print(results_table(run_title(r), [r]))
    console.print(
        f"{r.events:,} events in {r.sim_wall_s:.2f} s ({r.events_per_s:,.0f} events/s)",
        highlight=False,
    )
    print_tuner_courses([outcome])
    if jobs_out is not None:
        write_table(outcome.jobs, jobs_out)
    save_json(json_path, r, {"sim": request, "trace": str(trace or "embedded default")})


def run_title(result: SimResult) -> str:
    """The table's title: what every run of the table shares (the same in run and compare)."""
    return (
        f"{result.trace} on {result.cluster} ({result.total_gpus} GPUs), "
        f"congestion {result.congestion}"
    )


JOBS_OUT_SUFFIXES = (".csv", ".parquet", ".pq")


def check_jobs_out(path: Path | None) -> None:
    """``--jobs-out`` must say by its suffix how to write it: refused before the run, as any
    other name would get CSV under a name that promises another format (``jobs.xlsx``)."""
    if path is not None and path.suffix.lower() not in JOBS_OUT_SUFFIXES:
        suffix = f"its suffix {path.suffix!r}" if path.suffix else "a name without a suffix"
        raise UnstallError(
            f"--jobs-out {path}: cannot tell the file type from {suffix}: "
            f"use one of {list(JOBS_OUT_SUFFIXES)}"
        )


def print_header(request: SimRequest, trace: Trace | None = None) -> None:
    """The cluster as the run sees it, network efficiency included (a file's default differs
    from line rate, and results depend on it), and the GPU type the trace's durations are run
    times on (a slower cluster makes them slower)."""
    cluster = resolve_cluster(request.cluster, owner="SimRequest")
    console.print(f"cluster {cluster.describe()}", highlight=False)
    if trace is not None:
        gpu = request.duration_gpu
        known = gpu is not None and gpu.lower() in DEVICE_PRESETS  # else simulate names it
        console.print(duration_gpus(trace, gpu if known else None).describe(), highlight=False)


@handle_errors
def compare(
    policies: Annotated[
        str,
        typer.Option(
            "--policies",
            callback=named_in_file("policy class", "MyPolicy"),
            help="Comma-separated policies, built-in or FILE.py:Class (default: all built-in); "
            "LABEL=POLICY runs one again under a label (nodelay=dally-fixed, options "
            "nodelay.KEY=VALUE).",
        ),
    ] = "",
    trace: TraceOpt = None,
    trace_format: FormatOpt = "auto",
    cluster: ClusterOpt = "small",
    congestion: CongestionOpt = "none",
    seed: SeedOpt = 0,
    restore_s: RestoreOpt = 60.0,
    max_jobs: MaxJobsOpt = None,
    policy_option: Annotated[
        list[str] | None,
        typer.Option(
            "--policy-option",
            help="A knob of one policy as POLICY.KEY=VALUE, repeatable, POLICY as written in "
            "--policies (e.g. dally.period_s=1800, dally-fixed.order=las, "
            "my_policy.py:Mine.patience_s=600).",
        ),
    ] = None,
    job_profile: JobProfileOpt = None,
    model_mix: ModelMixOpt = None,
    duration_gpu: DurationGpuOpt = None,
    out: Annotated[
        Path, typer.Option("--out", help="Folder for summary.json, per-job data, plots, report.")
    ] = Path("out/sim-compare"),
    json_path: JsonOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Simulate several policies on the same trace; write a table, plots and an HTML report."""
    from unstall.sched import POLICIES, labelled_policy

    names = comma_list(policies) or list(POLICIES)
    labelled = [labelled_policy(name) for name in names]  # LABEL=POLICY: (LABEL, POLICY)
    labels = [label for label, _ in labelled]
    twice = next((label for i, label in enumerate(labels) if label in labels[:i]), None)
    if twice is not None:
        raise UnstallError(
            f"--policies {policies}: {twice!r} is named twice (LABEL=POLICY names a second run "
            "of one policy, e.g. nodelay=dally-fixed)"
        )
    pairs = parse_pairs(policy_option or [], "--policy-option", "POLICY.KEY=VALUE")
    options = split_policy_options(pairs, names)
    requests = [
        SimRequest(
            policy=policy,
            label=label if policy != name else None,
            policy_options=options[name],
            cluster=cluster,
            congestion=congestion,
            seed=seed,
            restore_s=restore_s,
            max_jobs=max_jobs,
            job_profiles=tuple(str(p) for p in job_profile or ()),
            model_mix=parse_model_mix(model_mix),
            duration_gpu=duration_gpu,
        )
        for name, (label, policy) in zip(names, labelled, strict=True)
    ]
    check_folder_writable(out)
    check_writable(json_path)
    loaded = resolve_trace(trace, trace_format)
    print_header(requests[0], loaded)
    runs = distinct_names(simulate_all(requests, loaded, quiet), requests)
    report_rejected(runs[0])  # the same jobs in every run: the cluster decides
    for request, outcome in zip(requests, runs, strict=True):
        report_unfinished(outcome, request.label or request.policy)
    report_unused_models(runs[0], requests[0], loaded)
    label = str(trace or "embedded")
    write_comparison(runs, requests, label, out)
    print_tuner_courses(runs)
    if trace is None and max_jobs is None:
        # One draw of its generator, on which dally can lose: said, not hidden (issue 22).
        dally_in_context([r.result for r in runs], loaded, demo_hint=True)
    results = _ResultList([r.result for r in runs])
    save_json(json_path, results, {"runs": list(requests), "trace": label})


def print_tuner_courses(runs: Sequence[SimRun]) -> None:
    """A line for each run whose policy tuned itself by looking ahead (``dally``): what it
    chose and when (the plot: ``tuner_course.png``)."""
    from unstall.sim.lookahead import tuner_course

    for run in runs:
        course = tuner_course(run.telemetry)
        if course is not None:
            console.print(f"{run.result.policy}'s tuner: {course.describe()}", highlight=False)


# What Dally is set against the other policies on, where the embedded trace is compared.
CONTEXT_METRICS = (
    ("avg_jct_s", "average JCT"),
    ("makespan_s", "makespan"),
    ("comm_overhead_frac", "comm overhead"),
)


# Dally and its fixed form (no look-ahead tuner): neither is "another policy" of the other's
# comparison.
DALLY_FAMILY = frozenset({"dally", "dally-fixed"})


def dally_in_context(
    results: Sequence[SimResult], trace: Trace, *, demo_hint: bool = False
) -> None:
    """Where our scheduler stands on this trace against the best of the others, metric by
    metric, and what kind of trace this is: its gains are elsewhere, and the user should know
    (``demo_hint``: say that `unstall demo` sets it against traces generated like it)."""
    by_name = {r.policy: r for r in results}
    dally = by_name.get("dally") or by_name.get("dally-fixed")
    others = [r for r in results if r.policy not in DALLY_FAMILY]
    if dally is None or not others:
        return
    parts = []
    for metric, label in CONTEXT_METRICS:
        best = min(others, key=lambda r: getattr(r, metric))
        ours, theirs = getattr(dally, metric), getattr(best, metric)
        if theirs > 0:
            change = f"{ours / theirs - 1:+.1%}"
        else:  # nothing to compare a share with: say whether dally's is nothing too
            change = "level at 0" if ours == 0 else f"{ours:.2g} against 0"
        parts.append(f"{label} {change} vs {best.policy}")
    summary = trace.summary(top=0)
    console.print(
        f"{dally.policy} against the best other policy on each metric: {'; '.join(parts)}. "
        "This trace is "
        f"{summary.jobs} jobs with a median run time of {summary.duration_s['p50']:.0f} s "
        f"and {summary.multi_gpu_share:.0%} multi-GPU jobs on {dally.total_gpus} GPUs; dally's "
        "gains are in long queues of multi-GPU jobs (the regime map: benchmarks/BENCHMARKS.md, "
        "`benchmarks/dally_regimes.py`)."
        + (" `unstall demo` sets it against traces generated like this one." if demo_hint else ""),
        highlight=False,
    )


def simulate_all(requests: Sequence[SimRequest], trace: Trace, quiet: bool) -> list[SimRun]:
    """Every request on the same trace, one after the other, under one progress bar. A Ctrl-C
    prints the table of the policies that finished and says which one it stopped."""
    total = sum(min(len(trace), r.max_jobs or len(trace)) for r in requests)
    runs: list[SimRun] = []
    try:
        with progress_bar(f"simulating {len(requests)} policies", total, quiet) as advance:
            for request in requests:
                runs.append(simulate_request(request, trace, on_finish=advance))
    except KeyboardInterrupt as exc:
        raise interrupted_comparison(runs, requests, exc) from None
    return runs


def distinct_names(runs: Sequence[SimRun], requests: Sequence[SimRequest]) -> list[SimRun]:
    """The runs, each result named by its policy's own name unless another policy of the
    comparison has that name too (two versions of one's policy, each ``name = "mine"``): those
    are named as ``--policies`` wrote them, so that no run's table row, plot line or per-job
    file stands for another's."""
    import dataclasses

    counts = Counter(run.result.policy for run in runs)
    return [
        run
        if counts[run.result.policy] == 1
        else dataclasses.replace(
            run, result=dataclasses.replace(run.result, policy=request.label or request.policy)
        )
        for run, request in zip(runs, requests, strict=True)
    ]


def jobs_file_names(policies: Sequence[str]) -> list[str]:
    """A per-job file name for each policy: path characters replaced (a name may hold a ``/``
    or be a ``FILE.py:Class``), made distinct by position where two names become the same."""
    safe = [re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "policy" for name in policies]
    counts = Counter(safe)
    return [
        f"jobs_{name}.parquet" if counts[name] == 1 else f"jobs_{i}_{name}.parquet"
        for i, name in enumerate(safe)
    ]


def interrupted_comparison(
    runs: Sequence[SimRun], requests: Sequence[SimRequest], exc: KeyboardInterrupt
) -> Interrupted:
    """Print the results of the policies that finished before ``exc``; the line to end with."""
    if runs:
        title = (
            f"{run_title(runs[0].result)}: the {len(runs)} of {len(requests)} policies that "
            "finished"
        )
        console.print(results_table(title, [r.result for r in runs]))
    finished = f"{len(runs)} of {len(requests)} policies finished"
    if len(runs) == len(requests):
        return Interrupted(f"stopped after the simulations ({finished}); nothing written")
    stopped = requests[len(runs)].policy
    where = f" at {exc.progress()}" if isinstance(exc, SimInterrupted) else ""
    return Interrupted(f"stopped {stopped}{where}; {finished}; nothing written")


def write_comparison(
    runs: Sequence[SimRun], requests: Sequence[SimRequest], trace_label: str, out: Path
) -> None:
    """Print the runs' table; write ``summary.json`` (with the requests beside it), per-job
    Parquet files, plots and an HTML report into ``out``."""
    from unstall.report.sim_report import write_html, write_plots

    results = [r.result for r in runs]
    out.mkdir(parents=True, exist_ok=True)
    console.print(results_table(run_title(results[0]), results))
    jobs = {r.result.policy: r.jobs for r in runs}
    timelines = {r.result.policy: r.timeline for r in runs}
    files = jobs_file_names(list(jobs))
    for frame, name in zip(jobs.values(), files, strict=True):
        with replaced_atomically(out / name) as tmp:
            frame.to_parquet(tmp, index=False)
    summary = out / "summary.json"
    write_result(summary, _ResultList(results), {"runs": list(requests), "trace": trace_label})
    telemetry = {r.result.policy: r.telemetry for r in runs}
    plots = write_plots(results, jobs, timelines, out, telemetry)
    report = write_html(results, plots, out, "unstall sim compare")
    console.print(
        f"wrote {len(files) + len(plots) + 3} files to {out}/: {summary.name} (config beside "
        f"it), per-job data ({', '.join(files)}), {len(plots)} plots and {report.name}",
        highlight=False,
        markup=False,
    )


class _ResultList:
    """``summary.json`` is a list of SimResult objects."""

    def __init__(self, results: Sequence[object]) -> None:
        self.results = results

    def to_json(self) -> str:
        return json.dumps(to_jsonable(list(self.results)), indent=2)


def policies() -> None:
    """List the scheduling policies."""
    from unstall.sched import describe_policies

    console.print(
        table(
            "scheduling policies",
            ["policy", "what it does"],
            list(describe_policies().items()),
            wrap=["what it does"],
        )
    )


def register(app: typer.Typer) -> None:
    app.command("run")(run)
    app.command("compare")(compare)
    app.command("policies")(policies)
