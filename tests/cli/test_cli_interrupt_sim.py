"""Ctrl-C in the middle of `unstall sim run` and `sim compare`: exit 130 in one line that says how
far the run got (simulated time, jobs finished of all), the table of the policies that finished,
nothing written, no traceback, no process left.

The simulation is slowed down by a policy from a file (fifo's decisions, a pause each round
after the first rounds) that drops a marker file once it is under way: the interrupt then lands
inside a simulation, at a moment where some jobs have finished."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from interrupting import interrupt_when

SLOW_POLICY = """
import time
from pathlib import Path

from unstall.sched import make_policy


class Slow:
    name = "slow"
    needs_oracle = False

    def __init__(self):
        self.inner = make_policy("fifo")
        self.rounds = 0

    def reset(self):
        self.inner.reset()
        self.rounds = 0

    def decide(self, snapshot, rng):
        self.rounds += 1
        if self.rounds == 60:
            Path("{marker}").touch()
        if self.rounds >= 60:
            time.sleep(0.05)
        return self.inner.decide(snapshot, rng)
"""


def _slow_policy(tmp_path: Path) -> tuple[str, Path]:
    marker = tmp_path / "under-way"
    (tmp_path / "slow.py").write_text(SLOW_POLICY.replace("{marker}", str(marker)))
    return "slow.py:Slow", marker


def _no_traceback(text: str) -> None:
    assert "Traceback" not in text, text


def test_ctrl_c_in_sim_run_says_how_far_the_simulation_got(tmp_path: Path) -> None:
    policy, marker = _slow_policy(tmp_path)
    json_out = tmp_path / "run.json"
    args = ["sim", "run", "--policy", policy, "--max-jobs", "200", "--json", str(json_out)]
    res = interrupt_when(args, marker, cwd=tmp_path)
    assert res.returncode == 130, res.stdout + res.stderr
    _no_traceback(res.stdout + res.stderr)
    found = re.search(
        r"interrupted: stopped at simulated time ([\d.e+]+) h, (\d+) of 200 jobs finished; "
        r"nothing written",
        res.stderr,
    )
    assert found, res.stderr
    assert float(found[1]) > 0 and 0 < int(found[2]) < 200, res.stderr
    assert not json_out.exists()
    assert res.left == []


STUCK_POLICY = """
import time
from pathlib import Path


class Stuck:
    name = "stuck"
    needs_oracle = False

    def reset(self):
        pass

    def decide(self, snapshot, rng):
        started = time.monotonic()
        while True:  # a bug of the user's: it never returns
            if time.monotonic() - started > 1.5:  # a user waits a while before Ctrl-C
                Path("{marker}").touch()
"""


def test_ctrl_c_in_a_policy_that_never_returns_names_its_decide(tmp_path: Path) -> None:
    marker = tmp_path / "stuck"
    (tmp_path / "stuck.py").write_text(STUCK_POLICY.replace("{marker}", str(marker)))
    res = interrupt_when(["sim", "run", "--policy", "stuck.py:Stuck"], marker, cwd=tmp_path)
    assert res.returncode == 130, res.stdout + res.stderr
    _no_traceback(res.stdout + res.stderr)
    assert re.search(
        r"interrupted: stopped at simulated time 0 h, 0 of \d+ jobs finished, in policy "
        r"stuck's decide\(\) for [\d.]+ s; nothing written",
        res.stderr,
    ), res.stderr


@pytest.mark.slow  # sim run's Ctrl-C (above) takes the same path
def test_ctrl_c_in_sim_compare_prints_the_policies_that_finished(tmp_path: Path) -> None:
    policy, marker = _slow_policy(tmp_path)
    out = tmp_path / "cmp"
    args = ["sim", "compare", "--policies", f"fifo,srtf,{policy}", "--max-jobs", "200"]
    res = interrupt_when([*args, "--out", str(out)], marker, cwd=tmp_path)
    assert res.returncode == 130, res.stdout + res.stderr
    _no_traceback(res.stdout + res.stderr)
    assert "the 2 of 3 policies that finished" in res.stdout, res.stdout
    rows = [line.split() for line in res.stdout.splitlines()]
    assert [row[:2] for row in rows if row[:1] in (["fifo"], ["srtf"])] == [
        ["fifo", "200"],
        ["srtf", "200"],
    ], res.stdout
    assert re.search(
        r"interrupted: stopped slow\.py:Slow at simulated time [\d.e+]+ h, \d+ of 200 jobs "
        r"finished; 2 of 3 policies finished; nothing written",
        res.stderr,
    ), res.stderr
    assert not out.exists()
    assert res.left == []
