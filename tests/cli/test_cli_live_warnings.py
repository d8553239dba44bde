"""`unstall live run`'s warnings about the emulating machine: a start-up that makes up much of
the live times is said, with what to do; none for a run where it does not."""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

from unstall.cli import common
from unstall.cli.live import STARTUP_WARN_FRAC, print_live
from unstall.live.run import LiveFacts
from unstall.sim import simulate
from unstall.traces import default_trace


def _facts(startup_s: float, speedup: float) -> LiveFacts:
    return LiveFacts(
        compute="emulated",
        speedup=speedup,
        address=None,
        nodes=[],
        executor_start_wall_s=1.0,
        startup_s_median=startup_s,
        restore_s_median=math.nan,
        checkpoint_s_median=math.nan,
        decide_wall_s_median=0.0,
        decide_wall_s_max=0.0,
        apply_wall_s_median=0.0,
        process_failures=0,
        emulation_behind_frac=0.0,
        nodes_lost=[],
        run_wall_s=10.0,
        interrupted=False,
    )


def _warnings(startup_s: float, speedup: float = 2000.0) -> str:
    sim = simulate(default_trace(), "small", "fifo", max_jobs=20)
    result = replace(sim.result, p50_jct_s=300.0)
    run = SimpleNamespace(
        result=result, prediction=None, facts=_facts(startup_s, speedup), telemetry=sim.telemetry
    )
    with common.err_console.capture() as captured, common.console.capture():
        print_live(run)  # type: ignore[arg-type]
    return " ".join(captured.get().split())


def test_a_start_up_that_makes_up_the_live_times_is_warned_of() -> None:
    text = _warnings(startup_s=130.0)
    assert "warning: a job's start-up took 2.17 min of trace time (median), 43% of the" in text
    assert "at --speedup 2000 each wall second of start-up is 2000 trace seconds" in text
    assert "use a lower --speedup" in text


def test_no_warning_where_start_up_is_a_small_share_or_unmeasured() -> None:
    assert _warnings(startup_s=STARTUP_WARN_FRAC * 300.0 - 1.0, speedup=30.0) == ""
    assert _warnings(startup_s=math.nan) == ""
