"""The start-up model's options of `unstall sim run`, and the line that says what it charges."""

from __future__ import annotations

from typing import Annotated

import typer

from unstall.cli.common import console

StartupModelOpt = Annotated[
    str,
    typer.Option(
        "--startup-model",
        help="What each job's start-up and restore cost, by what its placement spans: "
        "'default' (the package's model, fitted on live runs), a model file (`unstall live "
        "calibrate --out`), or 'none' (start-up 0, restore --restore-s or 60 s).",
    ),
]
SpeedupOpt = Annotated[
    float,
    typer.Option(
        "--speedup",
        min=1e-9,
        help="Trace seconds per wall second of the live run to predict: the start-up model's "
        "wall seconds are scaled by it (1: the cluster's own time).",
    ),
]
RestoreOrModelOpt = Annotated[
    float | None,
    typer.Option(
        "--restore-s",
        min=0.0,
        help="Checkpoint+restore seconds per preemption/migration [default: the start-up "
        "model's; 60 with --startup-model none].",
        show_default=False,
    ),
]


def print_startup(startup_model: str, speedup: float, restore_s: float | None) -> None:
    """One line under the header: what the run charges for start-ups and restores."""
    from unstall.sim.startup import resolve_startup_model

    model = resolve_startup_model(startup_model, owner="sim run", field="startup_model")
    if model is None:
        restore = 60.0 if restore_s is None else restore_s
        unused = f"; --speedup {speedup:g} unused (it scales a model)" if speedup != 1.0 else ""
        console.print(
            f"start-up 0 s, restore {restore:g} s (no start-up model){unused}", highlight=False
        )
        return
    line = f"start-ups and restores: {model.for_speedup(speedup).describe()}"
    if restore_s is not None:
        line += f"; restores {restore_s:g} s (--restore-s)"
    console.print(line, highlight=False)
