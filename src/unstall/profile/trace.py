"""Chrome-trace (Perfetto) export of one profiled iteration: pure, returns the JSON object.

Each phase is a complete event (``"ph": "X"``) with ``ts`` and ``dur`` in microseconds from the
iteration's start; the training loop's phases go on thread 0 of the worker's process, the
all-reduce buckets (which overlap backward) on thread 1. Open the file in chrome://tracing or
https://ui.perfetto.dev.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unstall.results import JsonResult

LOOP_THREAD = 0
COMM_THREAD = 1
THREAD_NAMES = {LOOP_THREAD: "training loop", COMM_THREAD: "all-reduce buckets"}


@dataclass(frozen=True, kw_only=True)
class PhaseSpan(JsonResult):
    """One timed phase of an iteration: name, thread, start and end in seconds (any origin)."""

    name: str
    thread: int
    start_s: float
    end_s: float


def chrome_trace(
    spans: Sequence[PhaseSpan], *, process: int = 0, label: str = ""
) -> dict[str, Any]:
    """The ``traceEvents`` object of ``spans``, times shifted to start at 0."""
    origin = min((s.start_s for s in spans), default=0.0)
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": process, "tid": 0, "args": {"name": label}}
    ]
    events += [
        {"name": "thread_name", "ph": "M", "pid": process, "tid": tid, "args": {"name": name}}
        for tid, name in THREAD_NAMES.items()
    ]
    for span in spans:
        events.append(
            {
                "name": span.name,
                "cat": "phase",
                "ph": "X",
                "ts": round((span.start_s - origin) * 1e6, 3),
                "dur": round(max(0.0, span.end_s - span.start_s) * 1e6, 3),
                "pid": process,
                "tid": span.thread,
            }
        )
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_chrome_trace(path: Path, trace: dict[str, Any]) -> Path:
    """Write ``trace`` (a :func:`chrome_trace` object) to ``path`` as JSON; returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(trace, indent=1) + "\n", encoding="utf-8")
    return path
