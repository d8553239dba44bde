"""Chrome-trace export: complete events in microseconds from the iteration's start."""

from __future__ import annotations

import json
from pathlib import Path

from unstall.profile.trace import PhaseSpan, chrome_trace, write_chrome_trace


def test_trace_events_are_valid_complete_events(tmp_path: Path) -> None:
    spans = [
        PhaseSpan(name="data", thread=0, start_s=10.0, end_s=10.001),
        PhaseSpan(name="forward", thread=0, start_s=10.001, end_s=10.004),
        PhaseSpan(name="backward", thread=0, start_s=10.004, end_s=10.010),
        PhaseSpan(name="allreduce", thread=1, start_s=10.006, end_s=10.012),
    ]
    path = write_chrome_trace(tmp_path / "t.json", chrome_trace(spans, label="x"))
    trace = json.loads(path.read_text())
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert [e["name"] for e in complete] == ["data", "forward", "backward", "allreduce"]
    for event in complete:
        assert {"name", "ph", "ts", "dur", "pid", "tid"} <= set(event)
        assert event["dur"] >= 0
    assert complete[0]["ts"] == 0.0
    assert complete[1]["ts"] == 1000.0 and complete[1]["dur"] == 3000.0
    assert complete[3]["tid"] == 1 and complete[3]["ts"] == 6000.0
    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    assert {e["args"]["name"] for e in meta} >= {"x", "training loop", "all-reduce buckets"}
