"""`unstall sim ...`: the model zoo's facts, the perf model's calibration, and (later) the simulator."""

from __future__ import annotations

import typer

app = typer.Typer(
    help="Cluster simulator: zoo facts, perf-model calibration, schedulers.",
    no_args_is_help=True,
)

# --- models (zoo facts) -------------------------------------------------------------------------


# --- calibrate (perf model against measured placements) -----------------------------------------
