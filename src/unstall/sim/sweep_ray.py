"""The cells of a sweep as Ray tasks: one :func:`unstall.sim.simulate` call each.
:func:`run_sweep` connects to Ray (a cluster at an address, or a local Ray it starts and stops:
:func:`unstall.ray_connect.connect_ray`), puts each trace once, runs the cells and reports each
as it ends; :func:`run_cells` runs them on whatever Ray the caller connected to.

Everything a cell needs travels as objects: the trace once through the object store, the
cluster, congestion and a policy object per cell (a policy class from a user's file travels by
value, so nodes need not have the file). A cell that raises, or whose worker dies, becomes a
:class:`CellOutcome` with the error; the other cells still run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ray
from ray.exceptions import RayError, RayTaskError

from unstall import ray_connect
from unstall.errors import UnstallError
from unstall.loop.failures import PolicyCrashError, describe_failure
from unstall.net.topology import TopologyConfig
from unstall.ray_connect import first_line
from unstall.sched.base import Policy
from unstall.sim.congestion import Congestion
from unstall.sim.metrics import SimResult
from unstall.sim.run import simulate
from unstall.sim.sweep import CellOutcome
from unstall.sim.sweep_tasks import CellTask

__all__ = ["CellTask", "SweepCellError", "run_cells", "run_sweep"]


class SweepCellError(UnstallError):
    """A cell's run raised; the message says what, and the file, line and function where."""


def _simulate_cell(
    trace: Any,
    cluster: TopologyConfig,
    policy: Policy,
    congestion: Congestion,
    seed: int,
    settings: dict[str, Any],
) -> SimResult:
    try:
        return simulate(trace, cluster, policy, congestion=congestion, seed=seed, **settings).result
    except PolicyCrashError as exc:
        # The cell's line names the policy already: what it raised, and where, is the rest.
        raise SweepCellError(exc.error) from None
    except Exception as exc:
        # Anything else (a rule the decision broke, a fault of the engine): the same words.
        raise SweepCellError(describe_failure(exc)) from None


def run_cells(
    tasks: Sequence[CellTask], on_done: Callable[[CellOutcome], None] | None = None
) -> list[CellOutcome]:
    """Run every task as a Ray task (one CPU each), calling ``on_done`` as each one ends (in
    the order they end); returns the outcomes in that order."""
    remote = ray.remote(num_cpus=1, max_retries=0)(_simulate_cell)
    pending = {
        remote.remote(t.trace, t.cluster, t.policy, t.congestion, t.cell.seed, dict(t.settings)): (
            t.cell
        )
        for t in tasks
    }
    outcomes: list[CellOutcome] = []
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        for ref in done:
            cell = pending.pop(ref)
            try:
                result = ray.get(ref)
                if cell.label != cell.policy:  # LABEL=POLICY: the run carries the label
                    result = dataclasses.replace(result, policy=cell.label)
                outcome = CellOutcome(cell, result)
            except RayError as exc:  # the task raised, or its worker died
                cause = exc.cause if isinstance(exc, RayTaskError) else None
                error = str(cause) if isinstance(cause, SweepCellError) else first_line(exc)
                outcome = CellOutcome(cell, None, error)
            outcomes.append(outcome)
            if on_done is not None:
                on_done(outcome)
    return outcomes


def run_sweep(
    tasks: Sequence[CellTask],
    *,
    address: str | None = None,
    runtime_env: Mapping[str, Any] | None = None,
    on_done: Callable[[CellOutcome], None] | None = None,
) -> list[CellOutcome]:
    """Connect to Ray (``address`` or ``RAY_ADDRESS``, with ``runtime_env``; else a local Ray,
    stopped at the end with its tasks and processes), put each distinct trace into the object
    store once, and run every task (:func:`run_cells`). A Ctrl-C stops the sweep: the Ray
    started here stops too, and KeyboardInterrupt is raised."""
    started = ray_connect.connect_ray(address, runtime_env=runtime_env)
    try:
        refs: dict[int, Any] = {}
        for task in tasks:  # once per trace object, not per cell
            if id(task.trace) not in refs:
                refs[id(task.trace)] = ray.put(task.trace)
        shared = [dataclasses.replace(t, trace=refs[id(t.trace)]) for t in tasks]
        return run_cells(shared, on_done)
    finally:
        if started:
            ray.shutdown()  # its tasks, workers and processes with it
