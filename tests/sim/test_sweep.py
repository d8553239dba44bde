"""The sweep's pure parts: its grid of cells and the summary over seeds."""

from __future__ import annotations

import dataclasses
import inspect
import math
import random

import pytest

from unstall.errors import ConfigError
from unstall.net import small
from unstall.sched import ClusterSnapshot, Decision, make_policy
from unstall.sim import NO_CONGESTION, PolicyCrashError, simulate
from unstall.sim.sweep import CellOutcome, SweepGrid, SweepResult, summarise_sweep, sweep_rows
from unstall.traces import default_trace


def test_the_grid_has_every_combination_seeds_innermost() -> None:
    grid = SweepGrid(
        policies=("fifo", "my dir/p.py:Mine"),
        congestions=("none", "high"),
        seeds=(0, 1, 2),
        clusters=("small", "c.toml"),
    )
    cells = grid.cells()
    assert len(cells) == 2 * 2 * 3 * 2
    assert [c.seed for c in cells[:4]] == [0, 1, 2, 0]
    assert [c.index for c in cells] == list(range(len(cells)))
    keys = {c.key for c in cells}
    assert len(keys) == len(cells) and not any("/" in k or " " in k for k in keys)


@pytest.mark.parametrize(
    ("axes", "field"),
    [
        ({"policies": ()}, "policies"),
        ({"policies": ("fifo",), "seeds": (1, 1)}, "seeds"),
        ({"policies": ("fifo",), "seeds": (-1,)}, "seeds"),
        ({"policies": ("fifo", "fifo")}, "policies"),
        ({"policies": ("fifo", "fifo=dally-fixed")}, "policies"),  # one label twice
    ],
)
def test_bad_grids_name_the_axis(axes: dict[str, tuple[object, ...]], field: str) -> None:
    with pytest.raises(ConfigError, match=rf"SweepGrid\.{field}"):
        SweepGrid(**axes)  # type: ignore[arg-type]


def test_the_summary_averages_seeds_that_ran_and_counts_the_failed() -> None:
    grid = SweepGrid(policies=("fifo", "broken"), seeds=(0, 1, 2))
    result = simulate(default_trace(), small(), make_policy("fifo"), max_jobs=10).result
    outcomes = []
    for cell in grid.cells():
        if cell.policy == "broken":
            outcomes.append(CellOutcome(cell, None, "RuntimeError: no"))
        elif cell.seed == 2:
            outcomes.append(CellOutcome(cell, None, "RuntimeError: seed 2"))
        else:
            jct = 3600.0 * (1 + cell.seed)  # 1 h and 2 h
            outcomes.append(CellOutcome(cell, dataclasses.replace(result, avg_jct_s=jct)))
    rows = sweep_rows(outcomes[::-1])  # in grid order whatever order they ended in
    assert list(rows["seed"]) == [0, 1, 2, 0, 1, 2]
    summary = summarise_sweep(rows).set_index("policy")
    assert summary.loc["fifo", "seeds"] == 2 and summary.loc["fifo", "failed"] == 1
    assert summary.loc["fifo", "avg_jct_h_mean"] == pytest.approx(1.5)
    assert summary.loc["fifo", "avg_jct_h_std"] == pytest.approx(math.sqrt(0.5))
    assert summary.loc["broken", "seeds"] == 0 and summary.loc["broken", "failed"] == 3
    assert math.isnan(summary.loc["broken", "avg_jct_h_mean"])
    saved = SweepResult.of(grid, outcomes).to_dict()
    assert saved["cells"] == 6 and saved["failed"] == 4
    assert saved["runs"][2]["error"] == "RuntimeError: seed 2"


@dataclasses.dataclass
class _Crash:
    name: str = "crash"
    needs_oracle: bool = False

    def reset(self) -> None:
        pass

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        return [Decision()][int(1 / 0)]


def test_a_failed_cell_says_what_the_policy_raised_and_where_as_sim_run_does() -> None:
    """The cell's error is :class:`PolicyCrashError`'s text without the policy (the sweep's line
    names the cell): one text, built in one place, for sim run, compare and sweep."""
    pytest.importorskip("ray")
    from unstall.sim.sweep_ray import SweepCellError, _simulate_cell

    lines, first = inspect.getsourcelines(_Crash.decide)
    line = first + next(i for i, text in enumerate(lines) if "1 / 0" in text)
    with pytest.raises(PolicyCrashError) as direct:
        simulate(default_trace(), small(), _Crash(), max_jobs=3)
    with pytest.raises(SweepCellError) as cell:
        _simulate_cell(default_trace(), small(), _Crash(), NO_CONGESTION, 0, {"max_jobs": 3})
    raised = f"ZeroDivisionError: division by zero (test_sweep.py:{line}, in decide)"
    assert str(cell.value) == raised
    assert str(direct.value) == f"policy 'crash' failed: {cell.value}"


def test_a_labelled_entry_runs_its_policy_and_is_summarised_under_its_label() -> None:
    """``LABEL=POLICY`` names a second run of one policy (with other options): its rows and its
    summary say the label; the cell's file name keeps the whole entry."""
    grid = SweepGrid(policies=("dally-fixed", "nodelay=dally-fixed"))
    cells = grid.cells()
    assert [c.label for c in cells] == ["dally-fixed", "nodelay"]
    assert "nodelay-dally-fixed" in cells[1].key
    result = simulate(default_trace(), small(), make_policy("fifo"), max_jobs=10).result
    rows = sweep_rows([CellOutcome(c, result) for c in cells])
    assert list(rows["policy"]) == ["dally-fixed", "nodelay"]
    assert list(summarise_sweep(rows)["policy"]) == ["dally-fixed", "nodelay"]
