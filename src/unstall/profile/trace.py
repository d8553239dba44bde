"""Chrome-trace (Perfetto) export of a stall profile: pure, returns the JSON object.

One process per rank, with every timed iteration of every run and round the rank took part in
(rank 0 also times the one-worker runs: compute, cold, warm, cached). On each rank's thread 0 a
slice per run and round holds a slice per iteration, which holds the iteration's phases (data,
forward, backward, optimizer); the all-reduce buckets, which overlap backward, go on thread 1.
The data phase of the cold and warm runs is the input pipeline's wait (fetch and prep stalls);
the other runs read batches from memory. A last process, "stalls", lays out one median
iteration as its own slices, one after the other: compute, then each stall the differential
runs measured (fetch, prep, interconnect, network). Times are in microseconds from the first
span; all ranks of a host share one clock. Open the file in chrome://tracing or
https://ui.perfetto.dev.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unstall.results import JsonResult, write_text_atomically

LOOP_THREAD = 0
COMM_THREAD = 1
THREAD_NAMES = {LOOP_THREAD: "training loop", COMM_THREAD: "all-reduce buckets"}
STALL_LABELS = {
    "compute_s": "compute",
    "fetch_stall_s": "fetch stall",
    "prep_stall_s": "prep stall",
    "interconnect_stall_s": "interconnect stall",
    "network_stall_s": "network stall",
}


@dataclass(frozen=True, kw_only=True)
class PhaseSpan(JsonResult):
    """One timed phase of an iteration: name, thread, start and end in seconds (any origin);
    the rank that timed it, the run, the round (repeat) and the timed iteration within it."""

    name: str
    thread: int
    start_s: float
    end_s: float
    rank: int = 0
    run: str = ""
    round: int = 0
    iteration: int = 0


def _slice(name: str, start_s: float, end_s: float, pid: int, tid: int, **args: Any) -> dict:
    event: dict[str, Any] = {
        "name": name,
        "cat": "phase",
        "ph": "X",
        "ts": round(start_s * 1e6, 3),
        "dur": round(max(0.0, end_s - start_s) * 1e6, 3),
        "pid": pid,
        "tid": tid,
    }
    if args:
        event["args"] = args
    return event


def _names(pid: int, label: str, threads: Mapping[int, str]) -> list[dict[str, Any]]:
    events = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": label}}]
    events += [
        {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}
        for tid, name in threads.items()
    ]
    return events


def _enclosing(spans: Sequence[PhaseSpan], origin: float) -> list[dict[str, Any]]:
    """On each rank's loop thread, a slice around each run's round and one around each of its
    iterations (Perfetto nests the phases inside)."""
    rounds: dict[tuple[int, str, int], list[PhaseSpan]] = {}
    iterations: dict[tuple[int, str, int, int], list[PhaseSpan]] = {}
    for span in spans:
        rounds.setdefault((span.rank, span.run, span.round), []).append(span)
        key = (span.rank, span.run, span.round, span.iteration)
        iterations.setdefault(key, []).append(span)
    named = [(f"{run} round {r}", rank, m) for (rank, run, r), m in rounds.items()]
    named += [(f"{run} iteration {i}", rank, m) for (rank, run, _, i), m in iterations.items()]
    return [
        _slice(
            name,
            min(s.start_s for s in members) - origin,
            max(s.end_s for s in members) - origin,
            rank,
            LOOP_THREAD,
        )
        for name, rank, members in named
    ]


def chrome_trace(
    spans: Sequence[PhaseSpan],
    *,
    label: str = "",
    stalls: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The ``traceEvents`` object of ``spans`` (see the module docstring), times shifted to
    start at 0; ``label`` names the ranks' processes; ``stalls`` (seconds per iteration of
    compute and each stall, keys of :data:`STALL_LABELS`) adds the median iteration's track."""
    origin = min((s.start_s for s in spans), default=0.0)
    ranks = sorted({s.rank for s in spans}) or [0]
    events: list[dict[str, Any]] = []
    for rank in ranks:
        events += _names(rank, f"rank {rank} {label}".rstrip(), THREAD_NAMES)
    slices = _enclosing(spans, origin) if any(s.run for s in spans) else []
    slices += [
        _slice(span.name, span.start_s - origin, span.end_s - origin, span.rank, span.thread)
        for span in spans
    ]
    # Enclosing slices before the ones they hold, also where both start at once: viewers nest
    # complete events in the order they meet them.
    events += sorted(slices, key=lambda e: (e["pid"], e["tid"], e["ts"], -e["dur"]))
    if stalls:
        pid = max(ranks) + 1
        events += _names(pid, "stalls (one median iteration)", {LOOP_THREAD: "stalls"})
        at = 0.0
        for key, name in STALL_LABELS.items():
            seconds = stalls.get(key, 0.0)
            if seconds > 0:
                events.append(_slice(name, at, at + seconds, pid, LOOP_THREAD, ms=seconds * 1e3))
                at += seconds
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_chrome_trace(path: Path, trace: dict[str, Any]) -> Path:
    """Write ``trace`` (a :func:`chrome_trace` object) to ``path`` as JSON; returns the path."""
    write_text_atomically(path, json.dumps(trace) + "\n")
    return path
