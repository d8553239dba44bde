"""`unstall sim models` and `sim calibrate`: zoo facts and the perf model's calibration (the
simulator's own commands, `sim run`, `sim compare` and `sim policies`, are in ``sim_run``)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from unstall.cli.common import JsonOpt, console, handle_errors, save_json, table, writable_file

if TYPE_CHECKING:
    from unstall.workload import ModelFacts

app = typer.Typer(
    help="Cluster simulator: zoo facts, perf-model calibration, schedulers.",
    no_args_is_help=True,
)

# --- models (zoo facts) -------------------------------------------------------------------------

MB = 1e6  # table figures are in decimal megabytes


@app.command("models")
@handle_errors
def models(
    image_size: Annotated[
        int, typer.Option("--image-size", min=32, help="Image side in pixels (image models).")
    ] = 224,
    model: Annotated[
        str | None,
        typer.Option("--model", help="Show this model's parameter tensors instead of the table."),
    ] = None,
    json_path: JsonOpt = None,
) -> None:
    """Static facts of every zoo model: parameters, gradient bytes and tensors, layers, FLOPs;
    then the other names a trace may give (aliases of zoo models)."""
    from unstall.workload import APPLICATION_MODELS, ZooFactsTable, facts_table, zoo

    if model is not None and model in APPLICATION_MODELS and model not in zoo.names():
        name, options = APPLICATION_MODELS[model]
        result = ZooFactsTable(image_size=image_size, models=(zoo.facts(name, **options),))
        console.print(f"{model} is an alias of {_alias_text(model)}", highlight=False)
    else:
        result = facts_table(image_size, None if model is None else [model])
    if model is None:
        print_models_table(result.models, image_size)
        print_aliases_table()
    else:
        _print_tensors(result.models[0])
    save_json(json_path, result, {"image_size": image_size, "model": model})


def _alias_text(alias: str) -> str:
    """``transformer (d_model=768, layers=12, ...)``: the zoo model a trace's name stands for."""
    from unstall.workload import APPLICATION_MODELS

    name, options = APPLICATION_MODELS[alias]
    given = ", ".join(f"{k}={v}" for k, v in options.items())
    return f"{name} ({given})" if given else name


def print_aliases_table() -> None:
    """The names a trace's ``model`` column takes beside the zoo's: Pollux's applications,
    each run as a zoo model at given options (``bert``: a transformer of BERT-base's sizes)."""
    from unstall.workload import APPLICATION_MODELS, zoo

    rows = [
        [alias, _alias_text(alias)]
        for alias in sorted(APPLICATION_MODELS)
        if alias not in zoo.names()  # ``ncf`` is the zoo's own
    ]
    title = "Aliases a trace may name (Pollux's applications), each run as a zoo model"
    console.print(table(title, ["alias", "runs as"], rows, wrap=["runs as"]))


def print_models_table(models: Sequence[ModelFacts], image_size: int) -> None:
    """One row a model; numbers preformatted so that the table fits 80 columns."""
    from unstall.workload import MODEL_REGISTRY

    rows = []
    for f in sorted(models, key=_natural_key):
        rows.append(
            [
                f.name,
                MODEL_REGISTRY[f.name].family,
                f"{f.params / 1e6:.2f}",
                f"{f.gradient_bytes / MB:.1f}",
                str(f.layers),
                str(f.gradient_tensors),
                f"{f.flops_per_sample / 1e9:#.3g}",
                f"{f.largest_tensor_bytes / MB:.1f}",
            ]
        )
    columns = ["model", "family", "params M", "grad MB", "layers", "tensors", "GFLOPs"]
    columns.append("max MB")
    title = (
        f"Zoo models, default options, images {image_size}x{image_size} (GFLOPs: forward, "
        "per sample; tensors: gradient tensors; MB: 10^6 bytes)"
    )
    console.print(_compact(table(title, columns, rows), text_columns=2))


def _compact(out: Table, text_columns: int) -> Table:
    """Right-align the preformatted number columns (``table`` already makes it borderless and
    unwrapped, but sees strings here, which it would left-align)."""
    for i, column in enumerate(out.columns):
        column.justify = "left" if i < text_columns else "right"
    return out


def _natural_key(facts: ModelFacts) -> tuple[tuple[int, str], ...]:
    """resnet, resnet18, resnet34, ..., resnet152: digits compare as numbers."""
    parts = re.split(r"(\d+)", facts.name)
    return tuple((int(p), "") if p.isdigit() else (-1, p) for p in parts)


def _print_tensors(facts: ModelFacts) -> None:
    """One model's parameter tensors in registration order, and its totals."""
    rows = [
        [str(i), t.name, "x".join(map(str, t.shape)), f"{t.numel:,}", f"{t.bytes:,}"]
        for i, t in enumerate(facts.tensors)
    ]
    options = ", ".join(f"{k}={v}" for k, v in facts.options)
    title = f"{facts.name} ({options}): parameter tensors in registration order"
    out = table(title, ["#", "tensor", "shape", "elements", "bytes"], rows)
    out = _compact(out, text_columns=3)
    out.columns[0].justify = "right"
    console.print(out)
    console.print(
        f"{facts.params:,} parameters in {facts.gradient_tensors} gradient tensors, "
        f"{facts.gradient_bytes / MB:.2f} MB of gradients, {facts.layers} weight layers, "
        f"{facts.flops_per_sample / 1e9:.4g} GFLOPs per sample (input {facts.input_shape})",
        highlight=False,
    )


# --- calibrate (perf model against measured placements) -----------------------------------------

if TYPE_CHECKING:
    from pathlib import Path

    from unstall.workload import CalibrationResult


@app.command("calibrate")
@handle_errors
def calibrate(
    placements: Annotated[
        str | None,
        typer.Option(
            "--placements",
            help="Folder of APP/placements.csv files (Pollux format). "
            "Default: ../shared/data/pollux/placements beside the repository, when present.",
        ),
    ] = None,
    folds: Annotated[int, typer.Option("--folds", min=2, help="Folds of held-out placements.")] = 5,
    seed: Annotated[int, typer.Option("--seed", help="Seed that assigns placements to folds.")] = 0,
    plot: Annotated[
        str | None,
        typer.Option(
            "--plot",
            help="Write a predicted-vs-measured scatter plot (PNG) here.",
            callback=writable_file,
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
    json_path: JsonOpt = None,
) -> None:
    """Fit the perf model to measured step times per application; report its error."""
    from pathlib import Path

    from unstall.cli.common import progress_bar
    from unstall.workload import CalibrationConfig, read_placements_dir, run_calibration

    root = Path(placements) if placements is not None else _default_placements()
    tables = read_placements_dir(root)
    config = CalibrationConfig(folds=folds, seed=seed)
    with progress_bar("calibrating", len(tables), quiet) as advance:
        result, points = run_calibration(tables, config, on_app=lambda _: advance(1))
    _print_calibration(result)
    if plot is not None:
        from unstall.report.calibration_plot import plot_calibration

        console.print(
            f"wrote {plot_calibration(points, Path(plot))}", highlight=False, markup=False
        )
    save_json(json_path, result, {"placements": str(root), **config.__dict__})


def _default_placements() -> Path:
    from pathlib import Path

    from unstall.errors import DataFileError

    root = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "pollux" / "placements"
    if not root.is_dir():
        raise DataFileError(
            "--placements", f"not given, and the default {root.resolve()} is not present"
        )
    return root.resolve()


def _print_calibration(result: CalibrationResult) -> None:
    """Per application: held-out error figures, the linear baseline's, and the fitted links."""
    pct = lambda v: f"{100 * v:.1f}%"  # noqa: E731
    rows = [
        [
            a.app,
            str(a.points),
            pct(a.in_sample.median),
            pct(a.held_out.median),
            pct(a.held_out.p90),
            pct(a.held_out.max),
            pct(a.baseline_held_out.median),
            f"{a.params.overlap:.2f}",
            "-" if a.params.nic_gbps is None else f"{a.params.nic_gbps:.1f}",
        ]
        for a in result.apps
    ]
    rows.append(
        [
            "overall",
            str(result.points),
            pct(result.in_sample_median_rel_error),
            pct(result.median_rel_error),
            pct(result.p90_rel_error),
            pct(result.max_rel_error),
            pct(result.baseline_median_rel_error),
            "",
            "",
        ]
    )
    columns = ["app", "points", "in-sample", "median", "p90", "max", "linear", "overlap"]
    columns.append("NIC Gbps")
    title = (
        f"Perf model vs measured step time, relative error on held-out placements "
        f"({result.folds} folds); in-sample and linear-regression medians beside"
    )
    console.print(_compact(table(title, columns, rows), text_columns=1))
    console.print(result.worst_explained, highlight=False)
