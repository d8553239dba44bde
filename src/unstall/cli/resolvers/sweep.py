"""Resolver of ``unstall sim sweep``: the grid's labels (policy names or ``FILE.py:Class``,
cluster presets or files, congestion levels or schedules, trace files or ``default``) into the
objects each cell runs on. Every label is resolved once, before any cell runs, so a typo stops
the sweep at once instead of failing its cells one by one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from unstall.cli.resolvers.sim import (
    resolve_cluster,
    resolve_congestion,
    resolve_job_profiles,
    resolve_policy,
)
from unstall.cli.resolvers.traces import resolve_trace
from unstall.errors import ConfigError
from unstall.sim.sweep import SweepGrid
from unstall.sim.sweep_ray import CellTask
from unstall.traces import Trace

DEFAULT_TRACE = "default"  # the label of the embedded default trace


def resolve_traces(labels: Sequence[str], trace_format: str) -> dict[str, Trace]:
    """``default`` is the embedded trace; anything else a trace file in ``trace_format``."""
    return {
        label: resolve_trace(None)
        if label == DEFAULT_TRACE
        else resolve_trace(Path(label), trace_format)
        for label in labels
    }


def resolve_sweep_working_dir(path: str | Path | None) -> dict[str, Any] | None:
    """``--working-dir``: Ray's runtime environment that ships the folder to every node (the
    parameter server's helper, whose errors are named here as the sweep's option)."""
    if path is None:
        return None
    from unstall.cli.resolvers.ps import resolve_working_dir  # imports torch: only when given

    try:
        return resolve_working_dir(str(path))
    except ConfigError as exc:
        raise ConfigError("sweep", "working_dir", exc.why) from None


def sweep_tasks(
    grid: SweepGrid,
    *,
    traces: Mapping[str, Any],
    policy_options: Mapping[str, Sequence[tuple[str, str]]],
    settings: Mapping[str, Any],
    job_profiles: Sequence[str] = (),
) -> list[CellTask]:
    """One task per cell. ``traces`` maps each trace label to a Trace or an ObjectRef of one;
    every cell gets a fresh policy object (policies keep state during a run)."""
    clusters = {label: resolve_cluster(label) for label in grid.clusters}
    congestions = {label: resolve_congestion(label) for label in grid.congestions}
    options = {label: tuple(policy_options.get(label, ())) for label in grid.policies}
    for label in grid.policies:
        resolve_policy(label, options[label])  # a bad name or option stops the sweep here
    profiles = resolve_job_profiles(job_profiles)
    return [
        CellTask(
            cell=cell,
            trace=traces[cell.trace],
            cluster=clusters[cell.cluster],
            policy=resolve_policy(cell.policy, options[cell.policy]),  # fresh: policies keep state
            congestion=congestions[cell.congestion],
            settings={**settings, "job_profiles": profiles},
        )
        for cell in grid.cells()
    ]
