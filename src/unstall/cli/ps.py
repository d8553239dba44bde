"""`unstall ps ...`: train on the Ray parameter server, benchmark the assignment strategies."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from unstall.cli.common import (
    Interrupted,
    JsonOpt,
    QuietOpt,
    check_writable,
    comma_list,
    console,
    handle_errors,
    named_in_file,
    progress_bar,
    save_json,
    table,
)
from unstall.cli.ps_names import (
    ADAM_LR,
    DATA_SOURCE_NAMES,
    LOSS_NAMES,
    OPTIMIZER_NAMES,
    SCENARIO_NAMES,
    SGD_LR,
    SGD_MOMENTUM,
    STRATEGY_NAMES,
)
from unstall.errors import ConfigError, UnstallError
from unstall.results import replaced_atomically

if TYPE_CHECKING:  # unstall.ps imports torch and Ray: the commands import it when they run
    from unstall.ps import PSBenchResult, PSCheckpoint, PSRunResult

app = typer.Typer(
    help="Parameter server on Ray: synchronous training, assignment strategies, stragglers.",
    no_args_is_help=True,
)

ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        callback=named_in_file("function returning your nn.Module", "make_model"),
        help="Zoo model (default: the scenario's, an MLP), or FILE.py:FUNC / package.module:FUNC "
        "(a function returning an nn.Module).",
    ),
]
ModelOptionOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--model-option", "-o", help="Model option KEY=VALUE (repeatable), e.g. width=256."
    ),
]
WorkersOpt = Annotated[int, typer.Option("--workers", "-w", help="Worker actors.", min=1)]
DataOpt = Annotated[
    str,
    typer.Option(
        "--data",
        callback=named_in_file("data function", "make_data"),
        help=f"Data: {', '.join(DATA_SOURCE_NAMES)} (digits: a loss that falls), or FILE.py:FUNC "
        "(a function (rank, world_size) -> iterable of (inputs, targets)).",
    ),
]
LossOpt = Annotated[
    str,
    typer.Option(
        "--loss",
        callback=named_in_file("loss function", "loss"),
        help=f"Loss: {', '.join(LOSS_NAMES)}, or FILE.py:FUNC (outputs, targets) -> scalar tensor.",
    ),
]
BatchOpt = Annotated[
    int | None,
    typer.Option(
        "--batch-size",
        help="Samples per worker per iteration of the built-in data (default: 32); a data "
        "function's batches are the size it makes them.",
        min=1,
    ),
]
OptimizerOpt = Annotated[
    str | None,
    typer.Option(
        "--optimizer",
        help=f"The servers' optimizer: {', '.join(OPTIMIZER_NAMES)}; its state moves with the "
        "parameters (default: sgd, or the checkpoint's with --resume).",
    ),
]
LrOpt = Annotated[
    float | None,
    typer.Option(
        "--lr",
        help=f"Learning rate (default: sgd {SGD_LR}, adam {ADAM_LR}).",
    ),
]
MomentumOpt = Annotated[
    float | None, typer.Option("--momentum", help=f"SGD momentum (default: {SGD_MOMENTUM}).")
]
WeightDecayOpt = Annotated[
    float | None,
    typer.Option(
        "--weight-decay",
        help="L2 weight decay, sgd and adam (default: 0, or the checkpoint's with --resume).",
        min=0.0,
    ),
]
NesterovOpt = Annotated[bool, typer.Option("--nesterov", help="Nesterov momentum (sgd).")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of the model and the data.")]
AddressOpt = Annotated[
    str | None,
    typer.Option(
        "--address",
        help="Ray cluster to run on: HOST:PORT of its head node (the GCS port, 6379 unless "
        "`ray start --head --port` set another) or ray://HOST:PORT; default: RAY_ADDRESS, else "
        "a local Ray on 127.0.0.1.",
    ),
]
WorkingDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--working-dir",
        help="Folder Ray ships to every node and runs the actors in (Ray's runtime "
        "environment): for user code that imports its own modules. Code named FILE.py:FUNC "
        "travels by itself.",
    ),
]
SparesOpt = Annotated[
    int | None,
    typer.Option(
        "--spares",
        help="Spare servers the psld strategy may add (default: the scenario's).",
        min=0,
    ),
]
TimeoutOpt = Annotated[
    float,
    typer.Option(
        "--timeout",
        help="Seconds an iteration (or the set-up: starting the actors, the first pull) may "
        "take before the run stops.",
    ),
]
DeviceOpt = Annotated[
    str,
    typer.Option(
        "--device",
        help="Where the workers compute: cpu, or cuda (each worker's forward and backward on a "
        "GPU of its own, which Ray assigns; the servers and the optimizer's step stay on the "
        "CPU). cuda needs a GPU per worker on the Ray cluster.",
    ),
]


@app.command("train")
@handle_errors
def train(
    model: ModelOpt = None,
    model_option: ModelOptionOpt = None,
    workers: WorkersOpt = 2,
    servers: Annotated[
        int | None,
        typer.Option("--servers", "-s", help="Servers (default: the scenario's).", min=1),
    ] = None,
    spares: SparesOpt = None,
    strategy: Annotated[
        str, typer.Option("--strategy", help=f"Assignment: {', '.join(STRATEGY_NAMES)}.")
    ] = "tf-greedy",
    scenario: Annotated[
        str,
        typer.Option(
            "--scenario", help=f"Preset ({', '.join(SCENARIO_NAMES)}) or a .toml/.json file."
        ),
    ] = "none",
    iterations: Annotated[int, typer.Option("--iterations", "-n", help="Iterations.", min=1)] = 20,
    data: DataOpt = "synthetic",
    loss: LossOpt = "cross_entropy",
    batch_size: BatchOpt = None,
    optimizer: OptimizerOpt = None,
    lr: LrOpt = None,
    momentum: MomentumOpt = None,
    weight_decay: WeightDecayOpt = None,
    nesterov: NesterovOpt = False,
    seed: SeedOpt = 0,
    check_reference: Annotated[
        bool,
        typer.Option(
            "--check-reference",
            help="Compare the final parameters with single-process SGD (1e-6 relative).",
        ),
    ] = False,
    address: AddressOpt = None,
    working_dir: WorkingDirOpt = None,
    save: Annotated[
        Path | None,
        typer.Option(
            "--save",
            help="Write the trained state_dict here (model.load_state_dict(torch.load(PATH))).",
        ),
    ] = None,
    checkpoint: Annotated[
        Path | None,
        typer.Option("--checkpoint", help="Checkpoint file, written every --checkpoint-every."),
    ] = None,
    checkpoint_every: Annotated[
        int | None,
        typer.Option(
            "--checkpoint-every", help="Iterations between checkpoints (and after the last).", min=1
        ),
    ] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            "--resume",
            help="Go on from this checkpoint up to --iterations in all (same model, data, "
            "workers and seed): the result an unstopped run would have had.",
        ),
    ] = None,
    max_recoveries: Annotated[
        int,
        typer.Option(
            "--max-recoveries",
            help="Dead worker or server processes the run survives: it snapshots its state "
            "every --snapshot-every iterations and goes on from the last snapshot with new "
            "actors (same result; 0: a dead actor ends the run).",
            min=0,
        ),
    ] = 0,
    snapshot_every: Annotated[
        int,
        typer.Option(
            "--snapshot-every",
            help="Iterations between the snapshots a recovery goes on from: fewer snapshots "
            "cost less while nothing fails, and a recovery re-runs up to this many iterations.",
            min=1,
        ),
    ] = 1,
    timeout: TimeoutOpt = 300.0,
    device: DeviceOpt = "cpu",
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Iteration time, loss and server busy (PNG).")
    ] = None,
    json_out: JsonOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Train a model (a zoo model or your own) with synchronous SGD on Ray servers and workers;
    print throughput, per-server load and loss. Exit 1 when --check-reference finds a
    mismatch."""
    from unstall import ps
    from unstall.ps.request import PSRequest, resolve_run
    from unstall.ray_connect import cluster_address

    request = PSRequest(
        model=model,
        model_options=model_options(model_option),
        data=data,
        loss=loss,
        batch_size=batch_size,
        workers=workers,
        servers=servers,
        spares=spares,
        strategy=strategy,
        scenario=scenario,
        iterations=iterations,
        optimizer=optimizer,
        lr=lr,
        momentum=momentum,
        weight_decay=weight_decay,
        nesterov=nesterov,
        seed=seed,
        check_reference=check_reference,
        timeout_s=timeout,
        address=address,
        working_dir=None if working_dir is None else str(working_dir),
        resume=None if resume is None else str(resume),
        checkpoint=None if checkpoint is None else str(checkpoint),
        checkpoint_every=checkpoint_every,
        save=None if save is None else str(save),
        max_recoveries=max_recoveries,
        snapshot_every=snapshot_every,
        device=device,
    )
    run = resolve_run(request)  # a bad name, file or function fails here, before Ray starts
    check_writable(save, json_out, checkpoint, plot)  # and an unwritable output here, too
    first = run.resume.iteration if run.resume is not None else 0
    saver = _Saver(checkpoint, first)
    # With --check-reference the bar goes on over the single-process replay (every worker's
    # step, one after another: it can take as long as the training), not stuck at its end.
    total = (iterations - first) * (2 if check_reference else 1)
    try:
        with progress_bar(f"{strategy} on {scenario}", total, quiet) as advance:
            result = ps.fit(
                run.model,
                run.data,
                run.config,
                loss=run.loss,
                resume=run.resume,
                on_checkpoint=None if checkpoint is None else saver,
                progress=saver.counting(advance),
                check_progress=advance,
            )
    except KeyboardInterrupt:
        raise Interrupted(f"stopped {saver.where(iterations)}") from None
    except UnstallError as exc:
        if saver.saved is None or isinstance(exc, ConfigError):
            raise
        # The run failed after writing a checkpoint: say that it is there, and how to go on.
        raise UnstallError(f"{exc}; {saver.kept()}") from exc
    print_run(result)
    if checkpoint is not None and result.checkpoints:
        console.print(f"checkpoint: {checkpoint} (iteration {iterations})", highlight=False)
    if save is not None:
        console.print(
            f"wrote {save_state_dict(result.state_dict, save)}", highlight=False, markup=False
        )
    # The JSON first: a plot that fails (a full disk, a font) then loses nothing else.
    ran_on = dataclasses.replace(request, address=cluster_address(request.address))
    save_json(json_out, result, {"run": ran_on, "scenario": ps.scenario_table(run.scenario)})
    if plot is not None:
        from unstall.report.ps_plot import plot_run

        console.print(f"wrote {plot_run(result, plot)}", highlight=False, markup=False)
    if result.params_match_reference is False:
        raise typer.Exit(1)


def model_options(items: list[str] | None) -> dict[str, str]:
    """``--model-option`` texts ``KEY=VALUE`` to a dict of texts (typed by the zoo model's
    options when the model is resolved)."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError("ps", "model_option", f"expected KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


class _Saver:
    """The checkpoint callback (each checkpoint replaces the last at ``path``, atomically),
    and how far a run got: the iterations done and the last checkpoint written, for the line
    that a run stopped or failed says."""

    def __init__(self, path: Path | None, first: int) -> None:
        self.path = path
        self.done = first  # iterations done, a resumed run's earlier ones included
        self.saved: int | None = None  # the iteration of the last checkpoint written

    def __call__(self, checkpoint: PSCheckpoint) -> None:
        assert self.path is not None
        checkpoint.save(self.path)
        self.saved = checkpoint.iteration

    def counting(self, advance: Callable[[int], None]) -> Callable[[int], None]:
        """``advance``, counting the iterations done too."""

        def count(n: int = 1) -> None:
            self.done += n
            advance(n)

        return count

    def kept(self) -> str:
        return (
            f"the checkpoint {self.path} holds iteration {self.saved}: the same command with "
            f"--resume {self.path} goes on from it"
        )

    def where(self, iterations: int) -> str:
        """``after 7 of 20 iterations; ...``: how far the run got and what it left."""
        kept = self.kept() if self.saved is not None else "nothing written"
        return f"after {self.done} of {iterations} iterations; {kept}"


def save_state_dict(state: Any, path: Path) -> Path:
    """``torch.save`` the trained weights to ``path`` atomically (a temporary file renamed)."""
    import torch

    with replaced_atomically(path) as tmp:
        torch.save(dict(state), tmp)
    return path


def print_run(r: PSRunResult) -> None:
    """A run's summary table and its per-server table."""
    rows: list[list[Any]] = [
        ["strategy", r.strategy],
        ["scenario", r.scenario],
        ["model", f"{r.model} ({sum(r.server_bytes.values()) / 1e6:.2f} MB, {r.chunks} chunks)"],
        ["workers x servers", f"{r.workers} x {r.servers}"],
        ["optimizer", r.optimizer],
        ["ray nodes", f"{r.node_count} ({len(r.nodes)} actors)"],
        *([["resumed at", f"iteration {r.start_iteration}"]] if r.start_iteration else []),
        *[
            ["recovered", f"iteration {c.iteration}: {c.failure} ({c.seconds:.1f} s)"]
            for c in r.recoveries
        ],
        *_elastic_rows(r),
        ["throughput (it/s)", f"{r.throughput_it_s:.3g}"],
        ["mean iteration (s)", f"{r.mean_iter_s:.4g} (model: {r.predicted_iter_s:.4g})"],
        ["loss first -> last", f"{r.loss_first:.4f} -> {r.loss_last:.4f}"],
    ]
    if r.params_match_reference is not None:
        verdict = "yes" if r.params_match_reference else "NO"
        rows.append(
            ["matches reference", f"{verdict} (max rel. error {r.reference_max_rel_err:.2e})"]
        )
    console.print(table(f"ps train: {r.iterations} iterations", ["", "value"], rows))
    servers = [
        [
            sid,
            r.server_bytes[sid] / 1e6,
            r.server_traffic_bytes.get(sid, 0) / 1e6 / r.iterations,
            r.server_busy_s.get(sid, 0.0),
        ]
        for sid in r.server_bytes
    ]
    console.print(table("per server", ["server", "owned MB", "moved MB/it", "busy s/it"], servers))


def _elastic_rows(r: PSRunResult) -> list[list[Any]]:
    """What a controller (psld) did: servers over time, moves, scalings, pauses."""
    if not r.elastic_events:
        return []
    first, last = r.servers_over_time[0], r.servers_over_time[-1]
    return [
        ["servers first -> last", f"{first} -> {last} (max {max(r.servers_over_time)})"],
        ["migrations / out / in", f"{r.migrations} / {r.scale_outs} / {r.scale_ins}"],
        ["pause max / total (s)", f"{r.max_pause_s:.3g} / {r.total_pause_s:.3g}"],
        ["warm start (s)", f"{r.warm_start_s:.3g}" if r.warm_start_s else "off"],
    ]


@app.command("bench")
@handle_errors
def bench(
    strategies: Annotated[
        str, typer.Option("--strategies", help="Comma-separated strategies (oracle is added).")
    ] = ",".join(STRATEGY_NAMES),
    scenarios: Annotated[
        str, typer.Option("--scenarios", help="Comma-separated presets or scenario files.")
    ] = ",".join(SCENARIO_NAMES),
    model: ModelOpt = None,
    model_option: ModelOptionOpt = None,
    workers: WorkersOpt = 2,
    spares: SparesOpt = None,
    iterations: Annotated[
        int, typer.Option("--iterations", "-n", help="Iterations a run.", min=2)
    ] = 10,
    data: DataOpt = "synthetic",
    loss: LossOpt = "cross_entropy",
    batch_size: BatchOpt = None,
    seed: SeedOpt = 0,
    address: AddressOpt = None,
    working_dir: WorkingDirOpt = None,
    device: DeviceOpt = "cpu",
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Bar chart of throughput (PNG).")
    ] = None,
    json_out: JsonOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Run every strategy in every scenario; print throughput and the ratio to oracle."""
    from unstall import ps
    from unstall.ps.request import PSRequest, bench_config, resolve_bench
    from unstall.ray_connect import cluster_address

    check_writable(plot, json_out)
    names, cases = comma_list(strategies), comma_list(scenarios)
    base = PSRequest(
        model=model,
        model_options=model_options(model_option),
        data=data,
        loss=loss,
        batch_size=batch_size,
        workers=workers,
        spares=spares,
        iterations=iterations,
        seed=seed,
        address=address,
        working_dir=None if working_dir is None else str(working_dir),
        device=device,
    )
    grid, chosen = resolve_bench(base, names, cases)  # every name and file checked first
    config = bench_config(base)  # and the folder, before Ray starts
    total = len(ps.with_oracle(chosen)) * len(grid)
    with progress_bar("ps bench", total, quiet) as advance:
        result = ps.compare_strategies(grid, chosen, config, progress=advance)
    print_bench(result)
    ran_on = dataclasses.replace(base, address=cluster_address(base.address))
    save_json(json_out, result, {"base": ran_on, "strategies": names, "scenarios": cases})
    if plot is not None:
        from unstall.report.ps_plot import plot_bench

        console.print(f"wrote {plot_bench(result, plot)}", highlight=False, markup=False)


def print_bench(result: PSBenchResult) -> None:
    """The grid's table: each strategy's throughput in each scenario, against the oracle's."""
    rows = [
        [
            r.scenario,
            r.strategy,
            r.throughput_it_s,
            r.mean_iter_s,
            r.predicted_iter_s,
            r.ratio_to_oracle,
            r.servers_text(),
            r.migrations,
        ]
        for r in result.results
    ]
    console.print(
        table(
            f"ps bench: {result.iterations} iterations, {result.workers} workers",
            ["scenario", "strategy", "it/s", "mean s", "model s", "vs oracle", "servers", "migr."],
            rows,
        )
    )


@app.command("scenarios")
def scenarios_cmd() -> None:
    """List the straggler scenario presets."""
    from unstall.ps import SCENARIOS

    rows = []
    for name, preset in SCENARIOS.items():
        s = preset()
        rows.append([name, s.servers, s.model or "mlp", s.description])
    console.print(table("ps scenarios", ["name", "servers", "model", "what"], rows, wrap=["what"]))
