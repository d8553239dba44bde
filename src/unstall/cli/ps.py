"""`unstall ps ...`: train on the Ray parameter server, benchmark the assignment strategies."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from unstall.cli.common import (
    JsonOpt,
    QuietOpt,
    comma_list,
    console,
    handle_errors,
    progress_bar,
    save_json,
    table,
)
from unstall.errors import ConfigError
from unstall.ps.assign import STRATEGIES
from unstall.ps.data import DATA_SOURCES
from unstall.ps.optim import SGDConfig
from unstall.ps.scenarios import SCENARIOS
from unstall.ps.train import PSConfig, PSRunResult, prepare

app = typer.Typer(
    help="Parameter server on Ray: synchronous training, assignment strategies, stragglers.",
    no_args_is_help=True,
)

ModelOpt = Annotated[
    str | None,
    typer.Option("--model", help="Zoo model (default: the scenario's, an MLP)."),
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
    typer.Option("--data", help=f"Data: {', '.join(DATA_SOURCES)} (digits: a loss that falls)."),
]
BatchOpt = Annotated[
    int, typer.Option("--batch-size", help="Samples per worker per iteration.", min=1)
]
LrOpt = Annotated[float, typer.Option("--lr", help="Learning rate.")]
MomentumOpt = Annotated[float, typer.Option("--momentum", help="SGD momentum.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of the model and the data.")]
AddressOpt = Annotated[
    str | None,
    typer.Option(
        "--address",
        help="Ray cluster to run on (as `ray start` printed it; default: RAY_ADDRESS, else a "
        "local Ray on 127.0.0.1).",
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
    float, typer.Option("--timeout", help="Seconds an iteration may take before the run stops.")
]


def parse_model_options(items: list[str] | None) -> dict[str, object]:
    """``KEY=VALUE`` pairs; values read as JSON (numbers, true/false), else kept as text."""
    out: dict[str, object] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError("ps", "model-option", f"expected KEY=VALUE, got {item!r}")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


@contextmanager
def ray_running(address: str | None, workers: int) -> Iterator[None]:
    """Ray for one command: connect or start (on loopback), and stop it after if started here.
    Runs take their actors from the session's pool, so a Ray that outlives the command (a test
    session) keeps them for the next one."""
    import ray

    from unstall.ps.coordinator import close_session_pool, ensure_ray

    started = ensure_ray(address, num_cpus=max(workers + 1, 2))
    try:
        yield
    finally:
        if started:
            close_session_pool()
            ray.shutdown()


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
        str, typer.Option("--strategy", help=f"Assignment: {', '.join(STRATEGIES)}.")
    ] = "tf-greedy",
    scenario: Annotated[
        str,
        typer.Option("--scenario", help=f"Preset ({', '.join(SCENARIOS)}) or a .toml/.json file."),
    ] = "none",
    iterations: Annotated[int, typer.Option("--iterations", "-n", help="Iterations.", min=1)] = 20,
    data: DataOpt = "synthetic",
    batch_size: BatchOpt = 32,
    lr: LrOpt = SGDConfig.lr,
    momentum: MomentumOpt = SGDConfig.momentum,
    seed: SeedOpt = 0,
    check_reference: Annotated[
        bool,
        typer.Option(
            "--check-reference",
            help="Compare the final parameters with single-process SGD (1e-6 relative).",
        ),
    ] = False,
    address: AddressOpt = None,
    timeout: TimeoutOpt = 300.0,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Iteration time, loss and server busy (PNG).")
    ] = None,
    json_out: JsonOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Train a zoo model with synchronous SGD on Ray servers and workers; print throughput,
    per-server load and loss. Exit 1 when --check-reference finds a mismatch."""
    from unstall.ps.coordinator import session_pool
    from unstall.ps.train import run_training

    config = PSConfig(
        model=model,
        model_options=parse_model_options(model_option),
        data=data,
        batch_size=batch_size,
        workers=workers,
        servers=servers,
        spares=spares,
        strategy=strategy,
        scenario=scenario,
        iterations=iterations,
        sgd=SGDConfig(lr=lr, momentum=momentum),
        seed=seed,
        check_reference=check_reference,
        timeout_s=timeout,
        address=address,
    )
    prepared = prepare(config)  # a bad scenario file fails here, before Ray starts
    with (
        ray_running(address, workers),
        progress_bar(f"{strategy} on {scenario}", iterations, quiet) as advance,
    ):
        result = run_training(config, pool=session_pool(), advance=advance)
    print_run(result)
    if plot is not None:
        from unstall.report.ps_plot import plot_run

        console.print(f"wrote {plot_run(result, plot)}", highlight=False)
    save_json(json_out, result, {"run": config, "scenario": prepared.scenario})
    if result.params_match_reference is False:
        raise typer.Exit(1)


def print_run(r: PSRunResult) -> None:
    rows: list[list[Any]] = [
        ["strategy", r.strategy],
        ["scenario", r.scenario],
        ["model", f"{r.model} ({sum(r.server_bytes.values()) / 1e6:.2f} MB, {r.chunks} chunks)"],
        ["workers x servers", f"{r.workers} x {r.servers}"],
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
    ]


@app.command("bench")
@handle_errors
def bench(
    strategies: Annotated[
        str, typer.Option("--strategies", help="Comma-separated strategies (oracle is added).")
    ] = ",".join(STRATEGIES),
    scenarios: Annotated[
        str, typer.Option("--scenarios", help="Comma-separated presets or scenario files.")
    ] = ",".join(SCENARIOS),
    model: ModelOpt = None,
    model_option: ModelOptionOpt = None,
    workers: WorkersOpt = 2,
    spares: SparesOpt = None,
    iterations: Annotated[
        int, typer.Option("--iterations", "-n", help="Iterations a run.", min=2)
    ] = 10,
    data: DataOpt = "synthetic",
    batch_size: BatchOpt = 32,
    seed: SeedOpt = 0,
    address: AddressOpt = None,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Bar chart of throughput (PNG).")
    ] = None,
    json_out: JsonOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Run every strategy in every scenario; print throughput and the ratio to oracle."""
    from unstall.ps.bench import grid_strategies, run_grid
    from unstall.ps.coordinator import session_pool

    names = comma_list(strategies)
    cases = comma_list(scenarios)
    base = PSConfig(
        model=model,
        model_options=parse_model_options(model_option),
        data=data,
        batch_size=batch_size,
        workers=workers,
        spares=spares,
        iterations=iterations,
        seed=seed,
        address=address,
    )
    total = len(grid_strategies(names)) * len(cases)
    with ray_running(address, workers), progress_bar("ps bench", total, quiet) as advance:
        result = run_grid(names, cases, base, pool=session_pool(), advance=advance)
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
            f"ps bench: {iterations} iterations, {workers} workers",
            ["scenario", "strategy", "it/s", "mean s", "model s", "vs oracle", "servers", "migr."],
            rows,
        )
    )
    if plot is not None:
        from unstall.report.ps_plot import plot_bench

        console.print(f"wrote {plot_bench(result, plot)}", highlight=False)
    save_json(json_out, result, {"base": base, "strategies": names, "scenarios": cases})


@app.command("scenarios")
def scenarios_cmd() -> None:
    """List the straggler scenario presets."""
    rows = []
    for name, preset in SCENARIOS.items():
        s = preset()
        rows.append([name, s.servers, s.model or "mlp", s.description])
    console.print(table("ps scenarios", ["name", "servers", "model", "what"], rows))
