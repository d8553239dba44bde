"""Ctrl-C in the middle of `unstall sim sweep` on a local Ray: the summary of the cells that
finished (their JSON files kept), exit 130 in one line, Ray shut down, no process of the run
left (Ray's own included).

A policy from a file holds its cells back until the two fast cells' JSON files are written,
then drops a marker and runs slowly: the interrupt lands while it runs, after the others."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import pytest

from interrupting import interrupt_when

WAITING_POLICY = """
import time
from pathlib import Path

from unstall.sched import make_policy


class Waits:
    name = "waits"
    needs_oracle = False

    def __init__(self):
        self.inner = make_policy("fifo")

    def reset(self):
        self.inner.reset()

    def decide(self, snapshot, rng):
        # Each finished cell's result and config, both written, and the driver done with them.
        while len(list(Path("{runs}").glob("*.config.json"))) < 2:
            time.sleep(0.05)
        time.sleep(1.0)
        Path("{marker}").touch()
        time.sleep(0.05)
        return self.inner.decide(snapshot, rng)
"""


@pytest.mark.slow  # a sweep on a Ray pool; sim's Ctrl-C tests stay in the default run
def test_ctrl_c_in_a_sweep_reports_the_finished_cells_and_leaves_no_process(
    tmp_path: Path,
) -> None:
    pytest.importorskip("ray")
    out, marker = tmp_path / "sweep", tmp_path / "under-way"
    policy = WAITING_POLICY.replace("{runs}", str(out / "runs")).replace("{marker}", str(marker))
    (tmp_path / "waits.py").write_text(policy)
    args = ["sim", "sweep", "--policies", "fifo,srtf,waits.py:Waits", "--congestion", "none"]
    args += ["--seeds", "0", "--max-jobs", "100", "--out", str(out)]
    # Ray's files in a folder of this run's own (short: socket paths must stay < 108 chars).
    ray_tmp = tempfile.mkdtemp(prefix="us-", dir="/tmp")
    try:
        res = interrupt_when(args, marker, cwd=tmp_path, env={"RAY_TMPDIR": ray_tmp})
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert res.returncode == 130, res.stdout + res.stderr
    assert "Traceback" not in res.stdout + res.stderr, res.stdout + res.stderr
    policies = [line.split()[3] for line in res.stdout.splitlines() if "default" in line]
    assert sorted(policies) == ["fifo", "srtf"], res.stdout
    assert re.search(
        r"interrupted: stopped with 2 of 3 runs done, 2 of them ok \(each one's JSON in "
        rf"{re.escape(str(out / 'runs'))}\); no summary written",
        res.stderr,
    ), res.stderr
    assert len(list((out / "runs").glob("*.config.json"))) == 2
    assert not (out / "summary.csv").exists()
    assert res.left == []
