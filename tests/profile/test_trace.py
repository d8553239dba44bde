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
    assert {e["args"]["name"] for e in meta} >= {"rank 0 x", "training loop", "all-reduce buckets"}


def test_every_rank_run_and_iteration_gets_slices_and_the_stalls_a_track() -> None:
    spans = [
        PhaseSpan(
            name=phase,
            thread=0,
            start_s=t + (5.0 if run == "local" else 0.0),  # the local run after compute
            end_s=t + (5.0 if run == "local" else 0.0) + 0.001,
            rank=rank,
            run=run,
            round=0,
            iteration=i,
        )
        for rank, run in ((0, "compute"), (0, "local"), (1, "local"))
        for i, t in enumerate((1.0, 1.01))
        for phase in ("forward",)
    ]
    stalls = {"compute_s": 0.1, "fetch_stall_s": 0.0, "interconnect_stall_s": 0.05}
    events = chrome_trace(spans, label="m", stalls=stalls)["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    by_pid = {pid: [e["name"] for e in complete if e["pid"] == pid] for pid in (0, 1, 2)}
    assert by_pid[1].count("local iteration 0") == 1 and "local round 0" in by_pid[1]
    assert {"compute round 0", "local round 0", "compute iteration 1"} <= set(by_pid[0])
    assert by_pid[2] == ["compute", "interconnect stall"]  # a zero stall has no slice
    first = by_pid[0][:3]  # all three start at once: the enclosing ones come first
    assert first == ["compute round 0", "compute iteration 0", "forward"]
    stall = [e for e in complete if e["pid"] == 2]
    assert (stall[1]["ts"], stall[1]["dur"]) == (1e5, 5e4)  # laid out after compute
    names = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {"rank 0 m", "rank 1 m", "stalls (one median iteration)"}
