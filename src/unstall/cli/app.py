"""The root `unstall` command: one sub-app per part, registered explicitly here."""

from __future__ import annotations

import inspect
import signal
from typing import Annotated

import typer

from unstall import __version__
from unstall.cli import (
    demo,
    jobs,
    live,
    profile,
    ps,
    recommend,
    serve,
    sim,
    sim_run,
    sim_sweep,
    sparse,
    trace,
)
from unstall.cli.common import OneLineUsageErrors, console

app = typer.Typer(
    name="unstall",
    help="Find and remove the stalls of distributed deep-learning training.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=OneLineUsageErrors,
)

sim_run.register(sim.app)
sim_sweep.register(sim.app)
app.add_typer(
    sim.app, name="sim", help="Cluster simulator: zoo facts, perf model, calibration, schedulers."
)
app.add_typer(
    trace.app, name="trace", help="Read, summarise, convert and generate cluster job traces."
)
app.add_typer(
    ps.app, name="ps", help="Parameter server on Ray: train, bench the assignment strategies."
)
app.add_typer(
    profile.app, name="profile", help="Stall profiler: compute, data, interconnect, network."
)
app.add_typer(
    sparse.app, name="sparse", help="Sparse training: structured-dropout LSTM, CNN sparsity."
)
app.add_typer(
    live.app, name="live", help="Live scheduling: the policies place real jobs on a Ray cluster."
)
app.command("serve", short_help="The scheduler service: users submit jobs, policies place them.")(
    serve.serve
)
app.add_typer(
    jobs.app, name="jobs", help="Submit to a running `unstall serve`, see the queue, cancel, logs."
)
app.command("recommend", short_help="Cheapest cloud GPU configuration that meets a time budget.")(
    recommend.recommend
)
app.command("demo", help="Show each built part at work on the embedded default data.")(demo.demo)


def _one_line_summaries(root_app: typer.Typer) -> None:
    """A command's line in its group's list is the first paragraph of its docstring, and
    typer's rich help keeps that paragraph's line breaks, so a docstring wrapped at the source's
    width broke mid-sentence there (``unstall profile --help``). Each command without a short
    help of its own gets that paragraph on one line; its own ``--help`` is unchanged."""
    for group in root_app.registered_groups:
        sub_app = group.typer_instance
        if sub_app is None:
            continue
        for info in sub_app.registered_commands:
            doc = info.callback.__doc__ if info.callback is not None else None
            if info.short_help is None and info.help is None and doc:
                first_paragraph = inspect.cleandoc(doc).split("\n\n")[0]
                info.short_help = " ".join(first_paragraph.split())


_one_line_summaries(app)


def _version(value: bool) -> None:
    if value:
        console.print(f"unstall {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Find and remove the stalls of distributed deep-learning training."""


def main() -> None:
    """Console-script entry point. A SIGTERM (a scheduler's or `kill`'s stop) ends a command as
    Ctrl-C does: cleanly, with what it started stopped, in one line."""
    signal.signal(signal.SIGTERM, _terminate)
    app()


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
