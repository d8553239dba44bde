"""The differential stall arithmetic: pure functions over measured per-iteration times.

The differential method (DS-Analyzer, extended with two communication stalls) times the same
training loop under conditions that each add one source of waiting:

========== ============================================ ======================================
run        condition                                    difference it isolates
========== ============================================ ======================================
compute    one worker, synthetic batches in memory      ``compute_s = T_compute``
cached     one worker, pre-decoded tensors in memory    (baseline of the data runs)
warm       one worker, files in the page cache, decoded ``prep_stall = T_warm - T_cached``
cold       one worker, page cache dropped, decoded      ``fetch_stall = T_cold - T_warm``
local      N workers on one host, synthetic             ``interconnect = T_local - T_compute``
network    N workers over the (emulated) network link   ``network = T_network - T_local``
========== ============================================ ======================================

Each run is repeated; the stall uses the medians. A difference that noise makes negative is
clipped to zero (a stall is waiting, never negative) and the raw difference is kept beside it.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from unstall.config import check
from unstall.results import JsonResult

STALL_FIELDS = (
    "compute_s",
    "fetch_stall_s",
    "prep_stall_s",
    "interconnect_stall_s",
    "network_stall_s",
)

# Which run pair each stall is the difference of: stall = T[later] - T[earlier].
STALL_PAIRS: dict[str, tuple[str, str]] = {
    "fetch_stall_s": ("cold", "warm"),
    "prep_stall_s": ("warm", "cached"),
    "interconnect_stall_s": ("local", "compute"),
    "network_stall_s": ("network", "local"),
}


@dataclass(frozen=True, kw_only=True)
class RunSummary(JsonResult):
    """One run's per-iteration time over its repeats: median and spread (min, max)."""

    name: str
    samples_s: tuple[float, ...]
    median_s: float
    min_s: float
    max_s: float

    @property
    def spread_s(self) -> float:
        return self.max_s - self.min_s


def summarize(name: str, samples: Sequence[float]) -> RunSummary:
    """Median and spread of one run's repeat times (seconds per iteration)."""
    check(len(samples) > 0, "summarize", name, "needs at least one repeat")
    check(all(s >= 0 for s in samples), "summarize", name, f"negative time in {list(samples)}")
    values = tuple(float(s) for s in samples)
    return RunSummary(
        name=name,
        samples_s=values,
        median_s=statistics.median(values),
        min_s=min(values),
        max_s=max(values),
    )


@dataclass(frozen=True, kw_only=True)
class StallBreakdown(JsonResult):
    """Seconds per iteration of compute and each stall, their sum, and their fractions.

    ``raw`` holds the unclipped differences (negative when noise exceeds the stall).
    """

    compute_s: float
    fetch_stall_s: float
    prep_stall_s: float
    interconnect_stall_s: float
    network_stall_s: float
    total_s: float
    fractions: dict[str, float]
    raw: dict[str, float]


def stall_breakdown(medians: Mapping[str, float]) -> StallBreakdown:
    """Stalls from the median per-iteration time of each run present in ``medians``.

    ``medians`` must hold ``compute``; a stall whose two runs are not both present is 0 (not
    measured). Keys: compute, cached, warm, cold, local, network (see the module docstring).
    """
    check("compute" in medians, "stall_breakdown", "compute", "the compute run is required")
    check(medians["compute"] > 0, "stall_breakdown", "compute", "must be > 0")
    raw: dict[str, float] = {}
    values: dict[str, float] = {"compute_s": float(medians["compute"])}
    for stall, (later, earlier) in STALL_PAIRS.items():
        if later in medians and earlier in medians:
            raw[stall] = float(medians[later]) - float(medians[earlier])
        values[stall] = max(0.0, raw.get(stall, 0.0))
    total = sum(values.values())
    fractions = {name: values[name] / total for name in STALL_FIELDS}
    return StallBreakdown(**values, total_s=total, fractions=fractions, raw=raw)


def text_bar(breakdown: StallBreakdown, width: int = 60) -> str:
    """A one-line stacked bar of the fractions, one letter per part (C F P I N)."""
    letters = {"compute_s": "C", "fetch_stall_s": "F", "prep_stall_s": "P"}
    letters |= {"interconnect_stall_s": "I", "network_stall_s": "N"}
    bar = "".join(letters[name] * round(breakdown.fractions[name] * width) for name in letters)
    legend = "  C compute  F fetch  P prep  I interconnect  N network"
    return f"[{bar[:width].ljust(width)}]{legend}"
