"""A grid of simulated runs (policies x congestion levels x seeds x clusters x traces) and its
summary: the mean and spread over seeds of each combination's figures.

Pure parts only: :class:`SweepGrid` lists the cells, :class:`CellOutcome` holds what one cell
gave (a :class:`SimResult`, or the error that stopped it), :func:`sweep_rows` and
:func:`summarise_sweep` turn outcomes into tables. Running the cells is elsewhere (on Ray:
:mod:`unstall.sim.sweep_ray`); every label here is text as the user wrote it, resolved into
objects by whoever runs the cells.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from unstall.config import check
from unstall.results import JsonResult
from unstall.sched.resolve import labelled_policy
from unstall.sim.metrics import SimResult

HOUR = 3600.0
# Figures summarised over seeds: (column, SimResult field, divisor).
FIGURES: tuple[tuple[str, str, float], ...] = (
    ("avg_jct_h", "avg_jct_s", HOUR),
    ("p99_jct_h", "p99_jct_s", HOUR),
    ("makespan_h", "makespan_s", HOUR),
    ("queue_h", "avg_queue_s", HOUR),
    ("comm_overhead_frac", "comm_overhead_frac", 1.0),
    ("gpu_util", "gpu_util", 1.0),
)
GROUP = ["trace", "cluster", "congestion", "policy"]


@dataclass(frozen=True, kw_only=True)
class SweepCell:
    """One run of the grid, by the labels of its axes."""

    index: int
    trace: str
    cluster: str
    congestion: str
    policy: str
    seed: int

    @property
    def label(self) -> str:
        """The policy's label: ``LABEL`` of a ``LABEL=POLICY`` entry, else the entry itself."""
        return labelled_policy(self.policy)[0]

    @property
    def key(self) -> str:
        """A file name for the cell's JSON: its index and labels, path characters replaced."""
        label = f"{self.trace}_{self.cluster}_{self.congestion}_{self.policy}_seed{self.seed}"
        return f"{self.index:04d}_{re.sub(r'[^A-Za-z0-9_.-]+', '-', label)}"


@dataclass(frozen=True, kw_only=True)
class SweepGrid:
    """The axes of a sweep; every combination is one cell."""

    policies: tuple[str, ...]
    congestions: tuple[str, ...] = ("none",)
    seeds: tuple[int, ...] = (0,)
    clusters: tuple[str, ...] = ("small",)
    traces: tuple[str, ...] = ("default",)

    def __post_init__(self) -> None:
        for name in ("policies", "congestions", "seeds", "clusters", "traces"):
            values = getattr(self, name)
            check(
                isinstance(values, tuple) and len(values) > 0,
                self,
                name,
                "must be a non-empty tuple",
            )
            check(len(set(values)) == len(values), self, name, f"repeats a value: {list(values)}")
        labels = [labelled_policy(entry)[0] for entry in self.policies]
        check(len(set(labels)) == len(labels), self, "policies", f"repeats a label: {labels}")
        check(all(isinstance(s, int) and s >= 0 for s in self.seeds), self, "seeds", "must be >= 0")

    def cells(self) -> tuple[SweepCell, ...]:
        """Every cell, seeds innermost (a combination's seeds are neighbours)."""
        axes = itertools.product(
            self.traces, self.clusters, self.congestions, self.policies, self.seeds
        )
        return tuple(
            SweepCell(index=i, trace=t, cluster=c, congestion=g, policy=p, seed=s)
            for i, (t, c, g, p, s) in enumerate(axes)
        )


@dataclass(frozen=True)
class CellOutcome:
    """What one cell gave: its result, or the one-line error that stopped it."""

    cell: SweepCell
    result: SimResult | None
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.result is not None


def sweep_rows(outcomes: list[CellOutcome]) -> pd.DataFrame:
    """One row per cell, in grid order: its labels, ``ok``, ``error`` and its figures (NaN for
    a failed cell)."""
    rows = []
    for outcome in sorted(outcomes, key=lambda o: o.cell.index):
        c, r = outcome.cell, outcome.result
        row: dict[str, object] = {
            "trace": c.trace,
            "cluster": c.cluster,
            "congestion": c.congestion,
            "policy": c.label,
            "seed": c.seed,
            "ok": outcome.ok,
            "error": outcome.error,
            "jobs_finished": r.jobs_finished if r is not None else np.nan,
        }
        for column, name, divisor in FIGURES:
            row[column] = getattr(r, name) / divisor if r is not None else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def summarise_sweep(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (trace, cluster, congestion, policy), in grid order: the seeds that ran and failed,
    and each figure's mean and standard deviation over the seeds that ran (``_mean``, ``_std``;
    the sample deviation, 0 for a single seed, NaN when none ran)."""
    out = []
    for labels, group in rows.groupby(GROUP, sort=False):
        ran = group[group["ok"]]
        entry: dict[str, object] = dict(zip(GROUP, labels, strict=True))
        entry["seeds"] = len(ran)
        entry["failed"] = len(group) - len(ran)
        for column, _, _ in FIGURES:
            values = ran[column].to_numpy(dtype=float)
            entry[f"{column}_mean"] = float(values.mean()) if len(values) else np.nan
            spread = float(values.std(ddof=1)) if len(values) > 1 else 0.0
            entry[f"{column}_std"] = spread if len(values) else np.nan
        out.append(entry)
    return pd.DataFrame(out)


@dataclass(frozen=True, kw_only=True)
class SweepResult(JsonResult):
    """A finished sweep: its grid, one record per cell (:func:`sweep_rows`) and per combination
    (:func:`summarise_sweep`); ``failed`` cells are among the runs with their error."""

    grid: SweepGrid
    cells: int
    failed: int
    runs: list[dict[str, object]]
    summary: list[dict[str, object]]

    @classmethod
    def of(cls, grid: SweepGrid, outcomes: list[CellOutcome]) -> SweepResult:
        rows = sweep_rows(outcomes)
        return cls(
            grid=grid,
            cells=len(outcomes),
            failed=sum(not o.ok for o in outcomes),
            runs=[{str(k): v for k, v in r.items()} for r in rows.to_dict("records")],
            summary=[
                {str(k): v for k, v in r.items()} for r in summarise_sweep(rows).to_dict("records")
            ],
        )
