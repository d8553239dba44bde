"""One unit a column across the simulator's and the live tables, named in the header; wall and
trace times labelled as such; no title that wraps (issue 50 item 4)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from unstall.cli import common
from unstall.cli.live import print_live, summary_table
from unstall.cli.sim_run import COLUMNS, results_table
from unstall.live.run import LiveFacts
from unstall.sim import simulate
from unstall.traces import default_trace


def _facts() -> LiveFacts:
    return LiveFacts(
        compute="emulated",
        speedup=20.0,
        address=None,
        nodes=[],
        executor_start_wall_s=1.5,
        startup_s_median=2.24,
        restore_s_median=math.nan,
        checkpoint_s_median=math.nan,
        decide_wall_s_median=0.0002,
        decide_wall_s_max=0.001,
        apply_wall_s_median=0.0,
        process_failures=0,
        emulation_behind_frac=0.0,
        nodes_lost=[],
        run_wall_s=10.0,
        interrupted=False,
    )


@pytest.fixture(scope="module")
def sim() -> object:
    return simulate(default_trace(), "tiny", "fifo", max_jobs=12)


def _cells(table: object) -> list[list[str]]:
    columns = table.columns  # type: ignore[attr-defined]
    return [list(col._cells) for col in columns]


def test_the_simulators_columns_name_their_units(sim: object) -> None:
    r = sim.result  # type: ignore[attr-defined]
    assert COLUMNS[2:8] == [
        "makespan h",
        "avg JCT h",
        "p99 JCT h",
        "avg queue h",
        "comm ovh %",
        "GPU util %",
    ]
    assert COLUMNS[-1] == "sim wall s"
    cells = _cells(results_table("t", [r]))
    assert float(cells[2][0]) == pytest.approx(r.makespan_s / 3600, rel=1e-3)
    assert float(cells[6][0]) == pytest.approx(100 * r.comm_overhead_frac, rel=1e-3)
    assert float(cells[7][0]) == pytest.approx(100 * r.gpu_util, rel=1e-3)


def test_the_live_table_has_one_unit_a_row_and_the_overhead_as_the_simulators(sim: object) -> None:
    run = SimpleNamespace(result=sim.result, prediction=sim, facts=_facts())  # type: ignore[attr-defined]
    labels, live, simulated, _gap = _cells(summary_table(run))  # type: ignore[arg-type]
    r = sim.result  # type: ignore[attr-defined]
    # Times all in one unit, the one the makespan reads in (43 minutes here), named in the label.
    assert r.makespan_s >= 60 and r.makespan_s < 3600
    times = [i for i, label in enumerate(labels) if label.endswith("(min)")]
    assert [labels[i] for i in times] == [
        "makespan (min)",
        "average JCT (min)",
        "median JCT (min)",
        "p99 JCT (min)",
        "average queueing (min)",
    ]
    assert float(live[times[0]]) == pytest.approx(r.makespan_s / 60, rel=1e-3)
    share = labels.index("comm overhead (% of run time)")
    assert float(simulated[share]) == pytest.approx(100 * r.comm_overhead_frac, rel=1e-3, abs=1e-9)


def test_the_live_summary_labels_wall_and_trace_time_and_wraps_no_title(sim: object) -> None:
    run = SimpleNamespace(
        result=sim.result,  # type: ignore[attr-defined]
        prediction=sim,
        facts=_facts(),
        telemetry=sim.telemetry,  # type: ignore[attr-defined]
        jobs=sim.jobs,  # type: ignore[attr-defined]
    )
    with common.console.capture() as captured:
        print_live(run)  # type: ignore[arg-type]
    lines = captured.get().splitlines()
    assert lines[0] == (
        "fifo on tiny (16 GPUs), 12 jobs; times are trace time (wall time x speedup 20)"
    )
    text = " ".join(captured.get().split())
    assert "measured in trace time: job start-up 2.24 s, restore -, checkpoint - (medians)" in text
    assert "in wall time: executors started in 1.5 s, decisions 0.20 ms median" in text
