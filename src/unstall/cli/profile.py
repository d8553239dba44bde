"""`unstall profile ...`: the stall profiler (run), its comm-stall model (fit), a test dataset."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from unstall.cli.common import (
    JsonOpt,
    QuietOpt,
    console,
    handle_errors,
    progress_bar,
    save_json,
    table,
)

if TYPE_CHECKING:
    from unstall.profile.fit import CommStallFit
    from unstall.profile.report import StallReport

app = typer.Typer(
    help="Stall profiler: compute, data, interconnect and network stalls of DDP training.",
    no_args_is_help=True,
)

MS = 1e3

ModelOpt = Annotated[str, typer.Option("--model", help="Zoo model name (unstall sim models).")]
WorkersOpt = Annotated[int, typer.Option("--workers", min=1, help="Data-parallel workers.")]
NetworkOpt = Annotated[
    str | None,
    typer.Option(
        "--network",
        help="Emulated link GBPS,LATENCY_MS (per-bucket delay latency + ring bytes/bandwidth).",
    ),
]
BatchOpt = Annotated[int, typer.Option("--batch", min=1, help="Batch per worker.")]
ImageOpt = Annotated[int, typer.Option("--image-size", min=32, help="Image side (image models).")]
ItersOpt = Annotated[int, typer.Option("--iterations", min=1, help="Timed iterations per run.")]
WarmupOpt = Annotated[int, typer.Option("--warmup", min=0, help="Untimed iterations first.")]
RepeatsOpt = Annotated[int, typer.Option("--repeats", min=1, help="Repeats of every run.")]
DeviceOpt = Annotated[str, typer.Option("--device", help="cpu (gloo) or cuda (NCCL).")]


@app.command("run")
@handle_errors
def run(
    model: ModelOpt = "resnet18",
    workers: WorkersOpt = 2,
    network: NetworkOpt = None,
    data: Annotated[
        Path | None, typer.Option("--data", help="Image dataset dir (unstall profile data).")
    ] = None,
    batch: BatchOpt = 8,
    image_size: ImageOpt = 32,
    iterations: ItersOpt = 10,
    warmup: WarmupOpt = 3,
    repeats: RepeatsOpt = 3,
    device: DeviceOpt = "cpu",
    profile_device: Annotated[
        str, typer.Option("--profile-device", help="Device preset that labels the JobProfile.")
    ] = "k80",
    overhead: Annotated[
        bool, typer.Option("--overhead", help="Also time the loop without phase timers.")
    ] = False,
    trace: Annotated[
        Path | None, typer.Option("--trace", help="Chrome-trace JSON of one iteration.")
    ] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Stacked-bar PNG.")] = None,
    profile_out: Annotated[
        Path | None, typer.Option("--profile-out", help="Write the JobProfile JSON here.")
    ] = None,
    json_path: JsonOpt = None,
) -> None:
    """Differential runs of a real DDP loop: the per-iteration stall breakdown."""
    from unstall.profile.config import ProfileConfig
    from unstall.profile.link import LinkSpec
    from unstall.profile.report import profile_stalls
    from unstall.profile.trace import write_chrome_trace

    config = ProfileConfig(
        model=model,
        workers=workers,
        network=LinkSpec.parse(network) if network else None,
        data_dir=data,
        batch=batch,
        image_size=image_size,
        iterations=iterations,
        warmup=warmup,
        repeats=repeats,
        device=device,
        profile_device=profile_device,
        measure_overhead=overhead,
    )
    console.print(f"profiling {model}: runs {', '.join(config.run_names())}", highlight=False)
    report = profile_stalls(config)
    print_report(report)
    if trace is not None:
        console.print(f"wrote {write_chrome_trace(trace, report.chrome_trace())}", highlight=False)
    if plot is not None:
        from unstall.report.stall_plot import plot_stalls

        console.print(f"wrote {plot_stalls([report], [model], plot)}", highlight=False)
    if profile_out is not None:
        console.print(f"wrote {report.job_profile.save(profile_out)}", highlight=False)
    save_json(json_path, report, config)


def print_report(report: StallReport) -> None:
    """The runs, the stall breakdown, the text bar and the phase timers."""
    from unstall.profile.stalls import STALL_FIELDS, StallBreakdown, text_bar

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
    phases = ["data", "forward", "backward", "allreduce", "optimizer"]
    prows = [(run, *(per.get(p, 0.0) * MS for p in phases)) for run, per in report.phases.items()]
    console.print(table("phase timers (ms per iteration)", ["run", *phases], prows))
    extras = []
    if report.emulated_delay_s is not None:
        extras.append(f"emulated link delay {report.emulated_delay_s * MS:.3g} ms/iter")
    if report.profiler_overhead is not None:
        extras.append(f"profiler overhead {report.profiler_overhead:+.1%}")
    if extras:
        console.print("; ".join(extras), highlight=False)


@app.command("fit")
@handle_errors
def fit(
    variants: Annotated[
        list[str] | None,
        typer.Option("--variant", help="Sweep variant NAME[:key=v,...]; repeat (default sweep)."),
    ] = None,
    held_out: Annotated[
        str, typer.Option("--held-out", help="Variant not in the sweep, to predict.")
    ] = "mobilenet_v2",
    workers: WorkersOpt = 2,
    network: NetworkOpt = None,
    batch: BatchOpt = 8,
    image_size: ImageOpt = 32,
    iterations: ItersOpt = 5,
    warmup: WarmupOpt = 2,
    repeats: RepeatsOpt = 3,
    quiet: QuietOpt = False,
    json_path: JsonOpt = None,
) -> None:
    """Fit communication stall against layers, gradient tensors and bytes over depth sweeps."""
    from unstall.profile.config import ProfileConfig
    from unstall.profile.fit import DEFAULT_SWEEP, fit_comm_stall, measure_point
    from unstall.profile.link import LinkSpec
    from unstall.profile.report import profile_stalls

    sweep = tuple(variants) if variants else DEFAULT_SWEEP
    link = LinkSpec.parse(network) if network else None
    stall = "network" if link else "interconnect"
    base = ProfileConfig(
        model="mlp",
        workers=workers,
        network=link,
        batch=batch,
        image_size=image_size,
        iterations=iterations,
        warmup=warmup,
        repeats=repeats,
    )
    points = []
    with progress_bar("profiling variants", len(sweep) + 1, quiet) as advance:
        for variant in sweep:
            points.append(measure_point(variant, base, stall, profile_stalls))
            advance(1)
        held = measure_point(held_out, base, stall, profile_stalls)
        advance(1)
    result = fit_comm_stall(points, stall=stall, held_out=held)
    print_fit(result)
    save_json(json_path, result, {"sweep": sweep, "held_out": held_out, "base": base})


def print_fit(result: CommStallFit) -> None:
    rows = [
        (p.variant, p.layers, p.gradient_tensors, p.gradient_bytes / 1e6, p.stall_s * MS, f * MS)
        for p, f in zip(result.points, result.fitted_s, strict=True)
    ]
    if result.held_out is not None and result.held_out_predicted_s is not None:
        h = result.held_out
        rows.append(
            (
                f"{h.variant} (held out)",
                h.layers,
                h.gradient_tensors,
                h.gradient_bytes / 1e6,
                h.stall_s * MS,
                result.held_out_predicted_s * MS,
            )
        )
    columns = ["variant", "layers", "tensors", "grad MB", "measured ms", "fitted ms"]
    console.print(table(f"{result.stall} stall per iteration", columns, rows))
    c = result.coefficients
    console.print(
        f"stall = {result.intercept_s * MS:.4g} ms + {c['layers'] * 1e6:.4g} us/layer"
        f" + {c['gradient_tensors'] * 1e6:.4g} us/tensor + {c['gradient_bytes'] * 1e9:.4g} s/GB"
        f"; R^2 {result.r2:.3f}, mean |rel err| {result.mean_abs_rel_error:.1%}",
        highlight=False,
    )
    if result.held_out_rel_error is not None:
        console.print(
            f"held-out prediction error {result.held_out_rel_error:+.1%}", highlight=False
        )


@app.command("data")
@handle_errors
def data(
    directory: Annotated[Path, typer.Argument(help="Where to write the PNG files.")],
    count: Annotated[int, typer.Option("--count", min=1, help="Number of images.")] = 512,
    image_size: ImageOpt = 32,
    num_classes: Annotated[int, typer.Option("--num-classes", min=2)] = 10,
    seed: Annotated[int, typer.Option("--seed")] = 0,
) -> None:
    """Write a small random image dataset (PNG, NNNNNN_LABEL.png) for `profile run --data`."""
    from unstall.profile.data import write_image_dataset

    paths = write_image_dataset(
        directory, count=count, image_size=image_size, num_classes=num_classes, seed=seed
    )
    console.print(f"wrote {len(paths)} images to {directory}", highlight=False)
