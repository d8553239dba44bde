"""The cells of a sweep with the objects they run on: the grid's labels (policy names or
``FILE.py:Class``, cluster presets or files, congestion levels or schedules, trace files or
``default``) resolved, each by its own part. Every label is resolved once, before any cell
runs (and before Ray starts), so a typo stops the sweep at once instead of failing its cells
one by one. Nothing here needs Ray; :mod:`unstall.sim.sweep_ray` runs the tasks on it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unstall.net.topology import TopologyConfig
from unstall.net.topology_files import resolve_cluster
from unstall.sched.base import Policy
from unstall.sched.resolve import labelled_policy, resolve_policy
from unstall.sim.congestion import Congestion, resolve_congestion
from unstall.sim.request import read_job_profiles
from unstall.sim.sweep import SweepCell, SweepGrid
from unstall.traces.resolve import resolve_trace
from unstall.traces.schema import Trace

DEFAULT_TRACE = "default"  # the label of the embedded default trace
OWNER = "sweep"


@dataclass(frozen=True, kw_only=True)
class CellTask:
    """One cell with the objects it runs on. ``trace`` is a :class:`unstall.traces.Trace` or
    the ObjectRef of one (put once, shared by every cell); ``settings`` are :func:`simulate`'s
    other keyword arguments (``max_jobs``, ``restore_s``, ...)."""

    cell: SweepCell
    trace: Any
    cluster: TopologyConfig
    policy: Policy
    congestion: Congestion
    settings: Mapping[str, Any] = field(default_factory=dict)


def sweep_traces(labels: Sequence[str], trace_format: str = "auto") -> dict[str, Trace]:
    """The grid's traces by label: ``default`` is the embedded trace, anything else a trace
    file in ``trace_format``."""
    return {
        label: resolve_trace(None)
        if label == DEFAULT_TRACE
        else resolve_trace(Path(label), trace_format)
        for label in labels
    }


def sweep_tasks(
    grid: SweepGrid,
    *,
    traces: Mapping[str, Any],
    policy_options: Mapping[str, Sequence[tuple[str, str]]],
    settings: Mapping[str, Any],
    job_profiles: Sequence[str | Path] = (),
) -> list[CellTask]:
    """One task per cell. ``traces`` maps each trace label to a Trace or an ObjectRef of one;
    ``policy_options`` each policy label to its ``(key, text)`` options; every cell gets a fresh
    policy object (policies keep state during a run)."""
    clusters = {label: resolve_cluster(label, owner=OWNER) for label in grid.clusters}
    congestions = {label: resolve_congestion(label, owner=OWNER) for label in grid.congestions}
    options = {label: tuple(policy_options.get(label, ())) for label in grid.policies}
    named = {label: labelled_policy(label)[1] for label in grid.policies}  # LABEL=POLICY
    for label in grid.policies:
        resolve_policy(named[label], options[label], owner=OWNER)  # a bad name or option stops
    profiles = read_job_profiles(job_profiles)
    return [
        CellTask(
            cell=cell,
            trace=traces[cell.trace],
            cluster=clusters[cell.cluster],
            # fresh: policies keep state
            policy=resolve_policy(named[cell.policy], options[cell.policy], owner=OWNER),
            congestion=congestions[cell.congestion],
            settings={**settings, "job_profiles": profiles},
        )
        for cell in grid.cells()
    ]
