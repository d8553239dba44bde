"""`unstall profile ...`: the stall profiler (run), its comm-stall model (fit), a test dataset."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from unstall.cli.common import (
    Interrupted,
    JsonOpt,
    QuietOpt,
    check_writable,
    console,
    handle_errors,
    named_in_file,
    print_error,
    progress_bar,
    save_json,
    table,
    writable_file,
)

if TYPE_CHECKING:
    from unstall.net.link import Link
    from unstall.profile import DataSource, ProfileConfig, ResolvedModel, StallReport, SweepPoint
    from unstall.profile.stalls import RunSummary

app = typer.Typer(
    help="Stall profiler: compute, data, interconnect and network stalls of DDP training.",
    no_args_is_help=True,
)

MS = 1e3

ModelOpt = Annotated[
    str,
    typer.Option(
        "--model",
        callback=named_in_file("function returning your nn.Module", "make_model"),
        help="A model name the simulator knows (unstall sim models; bert, imagenet, ... as the"
        " zoo model standing for them), or FILE.py:FUNC / package.module:FUNC: a function"
        " returning your nn.Module.",
    ),
]
WorkersOpt = Annotated[int, typer.Option("--workers", min=1, help="Data-parallel workers.")]
NetworkOpt = Annotated[
    str | None,
    typer.Option(
        "--network",
        help="Emulated link GBPS,LATENCY_MS (per-bucket delay latency + ring bytes/bandwidth).",
    ),
]
DEFAULT_BATCH = 8
BatchOpt = Annotated[
    int | None,
    typer.Option(
        "--batch",
        min=1,
        help=f"Batch per worker of synthetic and image-folder data (default {DEFAULT_BATCH});"
        " your data function (FILE.py:FUNC) yields batches of its own size.",
    ),
]
ImageOpt = Annotated[int, typer.Option("--image-size", min=32, help="Image side (image models).")]
ItersOpt = Annotated[int, typer.Option("--iterations", min=1, help="Timed iterations per run.")]
WarmupOpt = Annotated[int, typer.Option("--warmup", min=0, help="Untimed iterations first.")]
RepeatsOpt = Annotated[int, typer.Option("--repeats", min=1, help="Repeats of every run.")]
DeviceOpt = Annotated[
    str,
    typer.Option(
        "--device",
        help="auto (cuda when each worker on a host has a GPU, else cpu), cpu (gloo), cuda (NCCL).",
    ),
]


@app.command("run")
@handle_errors
def run(
    model: ModelOpt = "resnet18",
    workers: WorkersOpt = 2,
    network: NetworkOpt = None,
    data: Annotated[
        str | None,
        typer.Option(
            "--data",
            callback=named_in_file("data function", "make_data"),
            help="synthetic (a zoo model's random batches; the default), an image folder"
            " (class folders DIR/CLASS/*.png|jpg, or unstall profile data's flat files) read"
            " through a DataLoader, or FILE.py:FUNC / package.module:FUNC: your data function"
            " (rank, world_size) -> iterable of (inputs, targets).",
        ),
    ] = None,
    data_workers: Annotated[
        int,
        typer.Option(
            "--data-workers",
            min=0,
            help="DataLoader worker processes that read and decode an image folder (0: in the"
            " training process).",
        ),
    ] = 0,
    loss: Annotated[
        str | None,
        typer.Option(
            "--loss",
            callback=named_in_file("loss function", "loss"),
            help="cross_entropy (the default), mse, or FILE.py:FUNC: your loss(outputs, targets).",
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            help="The model's name in the report and JobProfile (default: --model as typed);"
            " unstall sim runs the jobs of that model name at the profile's figures.",
        ),
    ] = None,
    batch: BatchOpt = None,
    image_size: ImageOpt = 32,
    iterations: ItersOpt = 10,
    warmup: WarmupOpt = 3,
    repeats: RepeatsOpt = 3,
    device: DeviceOpt = "auto",
    profile_device: Annotated[
        str,
        typer.Option(
            "--profile-device",
            help="What labels the JobProfile: auto (the device the run used: cpu, or the preset"
            " of the GPU), or the GPU preset of a GPU no preset names.",
        ),
    ] = "auto",
    overhead: Annotated[
        bool, typer.Option("--overhead", help="Also time the loops without phase timers.")
    ] = False,
    trace: Annotated[
        Path | None,
        typer.Option(
            "--trace",
            help="Chrome/Perfetto trace JSON: every rank's timed iterations, the stalls as slices.",
        ),
    ] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Stacked-bar PNG.")] = None,
    profile_out: Annotated[
        Path | None, typer.Option("--profile-out", help="Write the JobProfile JSON here.")
    ] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress bar, no header; the results only.")
    ] = False,
    json_path: JsonOpt = None,
) -> None:
    """Differential runs of a real DDP loop: the per-iteration stall breakdown.

    On one host the command spawns its --workers itself (gloo on 127.0.0.1, or NCCL) and
    measures the network stall over an emulated link (--network GBPS,MS). Across real hosts,
    launch it with torchrun on every host; it then joins torchrun's group, takes the workers
    from WORLD_SIZE and the hosts from WORLD_SIZE / LOCAL_WORLD_SIZE, and the network stall is
    the real network's (local run: DDP within each host; network run: DDP across the hosts).
    Only rank 0 prints and writes files. Where gloo (or NCCL) picks the wrong network
    interface, set GLOO_SOCKET_IFNAME (NCCL_SOCKET_IFNAME) on every host. E.g. on each of 2
    hosts (NODE_RANK 0 and 1):

    torchrun --nnodes 2 --nproc-per-node 1 --node-rank NODE_RANK --master-addr HOST0
    --master-port 29500 -m unstall profile run --model resnet50 --json r.json

    and on one host, without spawning: torchrun --standalone --nproc-per-node 2
    -m unstall profile run --model resnet18 --network 1,0.5
    """
    import dataclasses
    import os

    check_writable(trace, plot, profile_out, json_path)  # before the runs, not after them

    from unstall.config import check
    from unstall.profile import ProfileConfig, measure_stalls, torchrun_launch
    from unstall.profile.names import resolve_data, resolve_device, resolve_loss, resolve_model
    from unstall.usercode import is_reference

    user_data = data is not None and is_reference(data)
    batch = batch_size(batch, data)
    launch = torchrun_launch(os.environ)
    nodes = launch.nodes if launch else 1
    workers = launch.world_size if launch else workers
    target = resolve_model(model, image_size=image_size)
    if name is not None:
        check(bool(name.strip()), "profile", "name", "must not be empty")
        target = dataclasses.replace(target, name=name.strip())
    source = resolve_data(data, target, batch=batch, workers=data_workers, image_size=image_size)
    loss_fn = resolve_loss(loss)
    config = ProfileConfig(
        workers=workers,
        nodes=nodes,
        network=parse_network(network),
        iterations=iterations,
        warmup=warmup,
        repeats=repeats,
        device=resolve_device(device, workers_per_node=workers // nodes),
        profile_device=profile_device,
        measure_overhead=overhead,
    )
    lead = launch is None or launch.rank == 0
    if lead and not quiet:
        print_header(target.name, config, source)
    finished: list[str] = []
    try:
        with profile_progress(config, source, quiet=quiet or not lead, finished=finished) as on_run:
            report = measure_stalls(
                target.build,
                source,
                config,
                loss=loss_fn,
                name=target.name,
                model_options=target.options,
                on_run=on_run,
            )
    except KeyboardInterrupt:
        raise Interrupted(interrupted_runs(config, source, finished)) from None
    if not lead:
        return
    if user_data:  # the batch the data function yields, as the report has it
        batch = report.batch
    saved = saved_config(target, config, batch=batch, image_size=image_size, data=data, loss=loss)
    saved |= {"model": model, "name": target.name, "data_workers": data_workers}
    show_report(
        report, trace=trace, plot=plot, profile_out=profile_out, json_path=json_path, config=saved
    )


def parse_network(text: str | None) -> Link | None:
    """``--network GBPS[,LATENCY_MS]`` (e.g. ``1,0.5``: 1 Gbit/s, 0.5 ms per bucket) to a
    link."""
    from unstall.config import check
    from unstall.errors import ConfigError
    from unstall.net.link import Link

    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    check(
        len(parts) in (1, 2),
        "profile",
        "network",
        f"want GBPS,LATENCY_MS (e.g. 1,0.5), got {text!r}",
    )
    try:
        gbps, latency_ms = float(parts[0]), float(parts[1]) if len(parts) == 2 else 0.0
    except ValueError:
        raise ConfigError(
            "profile", "network", f"GBPS,LATENCY_MS must be numbers, got {text!r}"
        ) from None
    check(gbps > 0, "profile", "network", f"bandwidth must be > 0 Gbit/s, got {text!r}")
    check(latency_ms >= 0, "profile", "network", f"latency must be >= 0 ms, got {text!r}")
    return Link(bandwidth_gbps=gbps, latency_us=latency_ms * 1e3)


def batch_size(batch: int | None, data: str | None) -> int:
    """``--batch`` (default :data:`DEFAULT_BATCH`); refused with a data function of the user's,
    which yields batches of the size it makes them (the option would be ignored)."""
    from unstall.config import check
    from unstall.usercode import is_reference

    check(
        batch is None or data is None or not is_reference(data),
        "profile",
        "batch",
        "your data function yields its batches, of the size it makes them: --batch sets the"
        " batch of synthetic and image-folder data",
    )
    return DEFAULT_BATCH if batch is None else batch


def print_header(name: str, config: ProfileConfig, source: DataSource) -> None:
    """What is about to run: the workers, hosts, device, the runs of each round, and how the
    data feeds them."""
    from unstall.profile import run_names

    runs = ", ".join(run_names(config, source.data_runs))
    console.print(
        f"profiling {name}: {config.workers} worker{'s' if config.workers != 1 else ''} on"
        f" {config.nodes} host(s), {config.device}"
        f" ({config.backend}); runs {runs}",
        highlight=False,
    )
    console.print(f"data: {source.describe()}", highlight=False)


@contextmanager
def profile_progress(
    config: ProfileConfig, source: DataSource, *, quiet: bool, finished: list[str] | None = None
) -> Iterator[Callable[[str], None]]:
    """A progress bar over the differential runs (every run of every round); yields the
    ``on_run`` hook of :func:`unstall.profile.measure_stalls`, which also appends each
    finished run's name to ``finished``."""
    from unstall.profile import run_names

    total = config.repeats * len(run_names(config, source.data_runs))
    with progress_bar("differential runs", total, quiet) as advance:

        def on_run(run: str) -> None:
            if finished is not None:
                finished.append(run)
            advance(1)

        yield on_run


def interrupted_runs(config: ProfileConfig, source: DataSource, finished: list[str]) -> str:
    """What a Ctrl-C stopped: the runs that had finished, round by round, and the workers."""
    from unstall.profile import run_names

    per_round = len(run_names(config, source.data_runs))
    rounds = [
        f"round {start // per_round + 1}: {', '.join(finished[start : start + per_round])}"
        for start in range(0, len(finished), per_round)
    ]
    done = f" ({'; '.join(rounds)})" if rounds else ""
    return (
        f"stopped with {len(finished)} of {config.repeats * per_round} runs finished{done}; "
        f"the {config.workers} workers stopped; nothing written"
    )


def saved_config(
    target: ResolvedModel,
    config: ProfileConfig,
    *,
    batch: int,
    image_size: int,
    data: str | None,
    loss: str | None = None,
) -> dict[str, object]:
    """The run's full config as ``--json`` saves it beside the report: what was profiled (as
    typed) and the config, the link in the units of ``--network``."""
    from unstall.usercode import is_reference

    settings = config.to_dict()
    user_data = data is not None and is_reference(data)
    saved: dict[str, object] = {
        "model": target.name,
        "model_options": {k: v for k, v in target.options.items() if k != "image_size"},
        "workers": settings.pop("workers"),
        "nodes": settings.pop("nodes"),
        "batch": batch,
        "image_size": image_size,
    }
    for key in ("iterations", "warmup", "repeats", "network"):
        saved[key] = settings.pop(key)
    saved["data_dir"] = None if data in (None, "synthetic") or user_data else data
    if user_data:
        saved["data"] = data
    if loss is not None:
        saved["loss"] = loss
    return saved | settings


def show_report(
    report: StallReport,
    *,
    trace: Path | None = None,
    plot: Path | None = None,
    profile_out: Path | None = None,
    json_path: Path | None = None,
    config: object = None,
) -> None:
    """Print the report and write what was asked: the trace, the plot, the JobProfile, the JSON
    with its config."""
    from unstall.profile import write_chrome_trace

    print_report(report)
    if trace is not None:
        console.print(
            f"wrote {write_chrome_trace(trace, report.chrome_trace())}",
            highlight=False,
            markup=False,
        )
    if plot is not None:
        from unstall.report.stall_plot import plot_stalls

        console.print(
            f"wrote {plot_stalls([report], [report.model], plot)}", highlight=False, markup=False
        )
    if profile_out is not None:
        console.print(
            f"wrote {report.job_profile.save(profile_out)}", highlight=False, markup=False
        )
    save_json(json_path, report, config)


def noise_warning(runs: Mapping[str, RunSummary], raw: Mapping[str, float]) -> str | None:
    """What to say when noise may hide a stall: fewer than three repeats per run (the medians
    are single runs: a network run can come out faster than the local one), or a stall whose
    two runs came out the wrong way round (shown as 0). None when neither."""
    from unstall.profile.stalls import STALL_PAIRS

    said = []
    for stall, diff in raw.items():
        if diff < 0:
            later, earlier = STALL_PAIRS[stall]
            said.append(
                f"the {later} run was {-diff * MS:.3g} ms/iter faster than the {earlier} run, "
                f"so {stall.removesuffix('_s').replace('_', ' ')} shows as 0"
            )
    repeats = min((len(r.samples_s) for r in runs.values()), default=0)
    if repeats < 3:
        said.append(
            f"{repeats} repeat{'s' if repeats != 1 else ''} per run: run-to-run noise can hide a "
            "stall; give --repeats 3 or more"
        )
    return "; ".join(said) if said else None


def print_report(report: StallReport) -> None:
    """The runs, the stall breakdown, the text bar and the phase timers."""
    from unstall.profile import STALL_FIELDS, StallBreakdown, text_bar

    runs = [
        (r.name, r.median_s * MS, r.min_s * MS, r.max_s * MS, len(r.samples_s))
        for r in report.runs.values()
    ]
    console.print(table("runs (ms per iteration)", ["run", "median", "min", "max", "n"], runs))
    rows = [(n, getattr(report, n) * MS, report.fractions[n]) for n in STALL_FIELDS]
    rows.append(("total", report.total_s * MS, 1.0))
    console.print(table(f"stalls of {report.model}", ["part", "ms/iter", "fraction"], rows))
    breakdown = StallBreakdown(
        **{n: getattr(report, n) for n in STALL_FIELDS},
        total_s=report.total_s,
        fractions=report.fractions,
        raw=report.raw_differences,
    )
    console.print(text_bar(breakdown), highlight=False, markup=False)
    warning = noise_warning(report.runs, report.raw_differences)
    if warning is not None:
        print_error(warning, label="warning:", style="bold yellow")
    phases = ["data", "forward", "backward", "allreduce", "optimizer"]
    prows = [
        (run, *(per.get(p, 0.0) * MS for p in phases))
        for run, per in report.phases.items()
        if not run.endswith("_untimed")  # run without the timers: no phases to show
    ]
    console.print(table("phase timers (ms per iteration)", ["run", *phases], prows))
    extras = []
    if report.emulated_delay_s is not None:
        extras.append(f"emulated link delay {report.emulated_delay_s * MS:.3g} ms/iter")
    for run_name, value in (report.profiler_overhead or {}).items():
        extras.append(f"profiler overhead ({run_name} run) {value:+.1%}")
    if extras:
        console.print("; ".join(extras), highlight=False)
    print_job_profile(report)


def print_job_profile(report: StallReport) -> None:
    """The JobProfile's facts in one line: the device it names, the model's sizes."""
    job = report.job_profile
    rate = f", {job.device_tflops:.3g} TFLOP/s fp32 matmul" if job.device_tflops else ""
    params = f"{job.parameter_bytes:,} parameter bytes, " if job.parameter_bytes is not None else ""
    console.print(
        f"job profile: device {job.device} ({report.device_name}{rate}); {params}"
        f"{job.gradient_bytes:,} gradient bytes in {job.gradient_tensors} tensors,"
        f" {job.layers} weight layers, {job.local_batch} samples per worker",
        highlight=False,
    )
    if job.on_cpu:
        console.print(
            "measured on a CPU: unstall recommend converts it to each GPU (compute scaled by"
            " FLOP rates); for unstall sim, convert it: unstall profile convert",
            highlight=False,
        )


@app.command("fit")
@handle_errors
def fit(
    variants: Annotated[
        list[str] | None,
        typer.Option(
            "--variant",
            callback=named_in_file("function returning your nn.Module", "make_model"),
            help="Sweep variant NAME[:key=v,...]; repeat (default sweep).",
        ),
    ] = None,
    held_out: Annotated[
        str, typer.Option("--held-out", help="Variant not in the sweep, to predict.")
    ] = "mobilenet_v2",
    workers: WorkersOpt = 2,
    network: Annotated[
        str,
        typer.Option("--network", help="Emulated link GBPS,LATENCY_MS the sweep runs over."),
    ] = "1,1",
    stall: Annotated[
        str,
        typer.Option(
            "--stall", help="Stall to model: comm (interconnect + network), network, interconnect."
        ),
    ] = "comm",
    cv: Annotated[
        str,
        typer.Option(
            "--cv",
            help="Cross-validation folds that pick the model: model (leave one zoo model's"
            " variants out) or variant (leave one sweep point out).",
        ),
    ] = "model",
    points_path: Annotated[
        Path | None,
        typer.Option(
            "--points",
            callback=writable_file,
            help="JSON of measured points: reused, and each new point appended (resumable).",
        ),
    ] = None,
    data: Annotated[
        str | None,
        typer.Option(
            "--data",
            help="What every variant trains on, as profile run takes it (default: each zoo"
            " variant's synthetic batches); needed for variants of your own (FILE.py:FUNC).",
        ),
    ] = None,
    loss: Annotated[
        str | None,
        typer.Option(
            "--loss",
            callback=named_in_file("loss function", "loss"),
            help="cross_entropy (the default), mse, or FILE.py:FUNC.",
        ),
    ] = None,
    batch: BatchOpt = None,
    image_size: ImageOpt = 32,
    iterations: ItersOpt = 4,
    warmup: WarmupOpt = 2,
    repeats: RepeatsOpt = 3,
    quiet: QuietOpt = False,
    json_path: JsonOpt = None,
) -> None:
    """Fit the communication stall over depth sweeps with every candidate model (DDP buckets,
    DDP buckets without overlap, the plain regression on layers, tensors and bytes), pick the
    one with the lowest cross-validated error, and predict a held-out model with it. Variants
    may be model functions of your own (--variant FILE.py:FUNC, with --data and --loss)."""
    from unstall.config import check
    from unstall.profile import (
        CV_GROUPS,
        DEFAULT_SWEEP,
        STALL_KINDS,
        ProfileConfig,
        fit_comm_stall,
        resolve_model,
    )

    check(stall in STALL_KINDS, "profile fit", "--stall", f"must be one of {sorted(STALL_KINDS)}")
    check(cv in CV_GROUPS, "profile fit", "--cv", f"must be one of {sorted(CV_GROUPS)}")
    batch = batch_size(batch, data)
    sweep = tuple(variants) if variants else DEFAULT_SWEEP
    link = parse_network(network)
    base = ProfileConfig(
        workers=workers, network=link, iterations=iterations, warmup=warmup, repeats=repeats
    )
    user = {"data": data, "loss": loss}
    measured = _measure_points(
        [*sweep, held_out], base, points_path, quiet, batch=batch, image_size=image_size, **user
    )
    result = fit_comm_stall(
        [measured[v] for v in sweep],
        stall=stall,
        held_out=measured[held_out],
        link=link,
        workers=workers,
        cv_groups=cv,
    )
    from unstall.cli.profile_tables import print_fit

    print_fit(result)
    if points_path is not None:
        console.print(f"measured points: {points_path}", highlight=False, markup=False)
    # The base every variant is profiled with (each variant replaces the model).
    saved_base = saved_config(
        resolve_model("mlp"), base, batch=batch, image_size=image_size, data=data, loss=loss
    )
    config = {"sweep": sweep, "held_out": held_out, "cv": cv, "base": saved_base}
    save_json(json_path, result, config)


def _measure_points(
    variants: list[str],
    base: ProfileConfig,
    points_path: Path | None,
    quiet: bool,
    *,
    batch: int,
    image_size: int,
    data: str | None = None,
    loss: str | None = None,
) -> dict[str, SweepPoint]:
    """Each variant's point: read from ``points_path`` when there, else profiled (zoo variants
    on their synthetic batches) and the file rewritten at once."""
    from unstall.profile import load_points, measure_points, save_points, sweep_measure

    known = load_points(points_path) if points_path is not None else {}
    missing = [v for v in dict.fromkeys(variants) if v not in known]
    measure = sweep_measure(missing, base, batch=batch, image_size=image_size, data=data, loss=loss)

    with progress_bar("profiling variants", len(missing), quiet) as advance:

        def saved(point: SweepPoint, points: dict[str, SweepPoint]) -> None:
            if points_path is not None:
                save_points(points_path, points)
            advance(1)

        return measure_points(variants, measure, known=known, on_point=saved)


@app.command("convert")
@handle_errors
def convert(
    profile: Annotated[
        Path, typer.Argument(help="A JobProfile JSON measured on a CPU.", dir_okay=False)
    ],
    gpu: Annotated[str, typer.Option("--gpu", help="The GPU preset to convert it to.")],
    out: Annotated[
        Path,
        typer.Option(
            "--out", help="Where to write the converted JobProfile.", callback=writable_file
        ),
    ],
) -> None:
    """Convert a CPU profile to a GPU for `unstall sim --job-profile`: compute time scaled by
    the CPU's measured fp32 matmul rate over the GPU's fp32 peak (the factor is printed); the
    input pipeline's time kept; the CPU's placement times dropped."""
    from unstall.workload import JobProfile

    measured = JobProfile.from_json(profile)
    converted = measured.on_gpu(gpu)
    if measured.on_cpu:
        assert measured.device_tflops is not None
        console.print(
            f"{measured.model}: compute {measured.compute_s * MS:.4g} ms on the CPU"
            f" ({measured.device_name or 'unnamed'}, {measured.device_tflops:.3g} TFLOP/s fp32"
            f" matmul) x {measured.cpu_factor(gpu):.4g} = {converted.compute_s * MS:.4g} ms on"
            f" {converted.device} (its fp32 peak); the CPU's placement times dropped",
            highlight=False,
        )
    console.print(f"wrote {converted.save(out)}", highlight=False, markup=False)


@app.command("data")
@handle_errors
def data(
    directory: Annotated[Path, typer.Argument(help="Where to write the PNG files.")],
    count: Annotated[int, typer.Option("--count", min=1, help="Number of images.")] = 512,
    image_size: ImageOpt = 32,
    num_classes: Annotated[
        int,
        typer.Option(
            "--num-classes", min=2, help="Classes: each image's label, 0..N-1, is drawn at random."
        ),
    ] = 10,
    seed: Annotated[
        int, typer.Option("--seed", help="Seed of the pixels and labels (same seed, same files).")
    ] = 0,
) -> None:
    """Write a small random image dataset (PNG, NNNNNN_LABEL.png) for `profile run --data`."""
    from unstall.profile import write_image_dataset

    paths = write_image_dataset(
        directory, count=count, image_size=image_size, num_classes=num_classes, seed=seed
    )
    console.print(f"wrote {len(paths)} images to {directory}", highlight=False, markup=False)
