"""Summarise a trace: size, span, GPU mix, duration quantiles, GPU-hours, tenants, statuses."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pandas as pd

from unstall.results import JsonResult

DURATION_QUANTILES: dict[str, float] = {"p50": 0.50, "p90": 0.90, "p99": 0.99, "max": 1.0}


@dataclass(frozen=True, kw_only=True)
class TraceSummary(JsonResult):
    """What ``unstall trace show`` prints: size, span, GPU mix, durations, load, tenants."""

    source: str
    format: str
    jobs: int
    span_s: float
    submit_offset_s: float
    total_gpu_hours: float
    multi_gpu_share: float
    gpu_mix: dict[int, float]
    gpu_counts: dict[int, int]
    duration_s: dict[str, float]
    top_vcs: dict[str, int]
    status: dict[str, int]
    models: dict[str, int]
    skipped: dict[str, int]
    notes: list[str]


class Summarised(Protocol):
    """What a summary reads of a trace (:class:`unstall.traces.schema.Trace` has it; the schema
    imports this module, not the other way round)."""

    @property
    def jobs(self) -> pd.DataFrame: ...
    @property
    def source(self) -> str: ...
    @property
    def format(self) -> str: ...
    @property
    def submit_offset_s(self) -> float: ...
    @property
    def skipped(self) -> Mapping[str, int]: ...
    @property
    def notes(self) -> Sequence[str]: ...


def summarise(trace: Summarised, *, top: int = 10) -> TraceSummary:
    """The :class:`TraceSummary` of ``trace``; ``top`` virtual clusters are listed by job count."""
    jobs = trace.jobs
    gpus = jobs["num_gpus"].to_numpy()
    duration = jobs["duration_s"].to_numpy()
    n = len(jobs)
    counts = _counts(pd.Series(gpus))
    mix = {int(k): v / n for k, v in counts.items()} if n else {}
    quantiles = (
        {name: float(np.quantile(duration, q)) for name, q in DURATION_QUANTILES.items()}
        if n
        else {}
    )
    if n:
        quantiles["mean"] = float(duration.mean())
    end = jobs["submit_s"].to_numpy()
    return TraceSummary(
        source=trace.source,
        format=trace.format,
        jobs=n,
        span_s=float(end[-1] - end[0]) if n else 0.0,
        submit_offset_s=trace.submit_offset_s,
        total_gpu_hours=float((gpus * duration).sum() / 3600.0),
        multi_gpu_share=float((gpus > 1).mean()) if n else 0.0,
        gpu_mix={int(k): float(v) for k, v in mix.items()},
        gpu_counts={int(k): int(v) for k, v in counts.items()},
        duration_s=quantiles,
        top_vcs=_top(jobs["vc"], top),
        status={str(k): int(v) for k, v in _counts(jobs["status"]).items()},
        models={str(k): int(v) for k, v in _counts(jobs["model"]).items()},
        skipped=dict(trace.skipped),
        notes=list(trace.notes),
    )


def _counts(values: pd.Series) -> dict[Any, int]:
    """Counts of the non-missing values, keyed in sorted order."""
    vc = values.dropna().value_counts()
    return {k: int(vc[k]) for k in sorted(vc.index)}


def _top(values: pd.Series, top: int) -> dict[str, int]:
    """The ``top`` most frequent non-missing values (ties by name) with their counts."""
    vc = values.dropna().value_counts()
    ranked = sorted(vc.items(), key=lambda kv: (-int(kv[1]), str(kv[0])))
    return {str(k): int(v) for k, v in ranked[:top]}
