"""`unstall sim sweep` on the suite's two-node Ray test cluster (``ray_test_cluster``): 4
policies (three built-in, one from a user's file that always fails) x 3 congestion levels x 3
seeds. The failing policy's cells are reported and the other 27 runs finish, each with its JSON,
gathered into one summary. The sweep runs as a user runs it, in its own process with
``--address``, so this test's process never joins the cluster (other tests share its Ray)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import unstall

ROOT = Path(__file__).resolve().parents[2]
BROKEN = """
import dataclasses


@dataclasses.dataclass
class Broken:
    name: str = "broken"
    needs_oracle: bool = False

    def reset(self):
        pass

    def decide(self, snapshot, rng):
        raise RuntimeError("this policy is broken on purpose")
"""


@pytest.fixture
def two_nodes(ray_test_cluster: Any) -> str:
    """The address of the suite's two-node test cluster (tests/ray_cluster.py)."""
    address: str = ray_test_cluster.address
    return address


def test_a_sweep_runs_on_two_nodes_and_reports_its_failed_cells(
    two_nodes: str, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text(BROKEN)
    out = tmp_path / "sweep"
    policies = f"fifo,dally,{ROOT / 'examples' / 'my_policy.py'}:SmallestFirst,{broken}:Broken"
    args = ["sim", "sweep", "--policies", policies, "--congestion", "none,medium,high"]
    args += ["--seeds", "0-2", "--max-jobs", "25", "--out", str(out), "--address", two_nodes]
    args += ["--json", str(tmp_path / "sweep.json"), "-q"]
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(unstall.__file__).resolve().parents[1]),
        # A driver that cannot reach the cluster gives up in seconds, not Ray's minute.
        "RAY_gcs_rpc_server_reconnect_timeout_s": "10",
    }
    done = subprocess.run(
        [sys.executable, "-m", "unstall", *args],
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
        cwd=tmp_path,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 1, output  # some cells failed
    # Each failed cell is one line naming the error and where the user's code raised it.
    assert output.count("this policy is broken on purpose (broken.py:14, in decide)") == 9, output
    assert "27 of 36 runs done" in output
    runs = sorted((out / "runs").glob("*[0-9].json"))
    assert len(runs) == 27
    first = json.loads(runs[0].read_text())
    assert first["policy"] == "fifo" and first["jobs_finished"] == 25
    summary = pd.read_csv(out / "summary.csv")
    assert len(summary) == 12 and (out / "sweep.png").stat().st_size > 0
    ran = summary[summary["policy"] != f"{broken}:Broken"]
    assert (ran["seeds"] == 3).all() and (ran["failed"] == 0).all()
    assert (summary[summary["policy"] == f"{broken}:Broken"]["failed"] == 3).all()
    # Congestion slows the jobs down: the spread over seeds is there, and the levels differ.
    fifo = ran[ran["policy"] == "fifo"].set_index("congestion")
    assert fifo.loc["high", "avg_jct_h_mean"] > fifo.loc["none", "avg_jct_h_mean"]
    assert fifo.loc["high", "avg_jct_h_std"] > 0
    saved = json.loads((tmp_path / "sweep.json").read_text())
    assert saved["cells"] == 36 and saved["failed"] == 9 and len(saved["summary"]) == 12


IMPORTS_ITS_OWN = """
import dataclasses

from ordering import fewest_gpus_first
from unstall.sched import Decision, FreeGpus, Start


@dataclasses.dataclass
class Mine:
    name: str = "mine"
    needs_oracle: bool = False

    def reset(self):
        pass

    def decide(self, snapshot, rng):
        free, starts = FreeGpus(snapshot), []
        for job in fewest_gpus_first(snapshot.queued):
            placement = free.best(job.num_gpus)
            if placement is not None:
                free.take(placement)
                starts.append(Start(job.job_id, placement))
        return Decision(starts=tuple(starts))
"""


# Without --working-dir (the failure that says what to pass) only in the slow run: the default
# suite runs the sweep that ships the policy's folder.
@pytest.mark.parametrize("without_first", [pytest.param(True, marks=pytest.mark.slow), False])
def test_a_policy_that_imports_its_own_module_runs_with_its_working_dir(
    two_nodes: str, tmp_path: Path, without_first: bool
) -> None:
    """Without --working-dir the cells cannot import the policy file's sibling module on the
    cluster's workers, and the failure says what to pass; with it, they run."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "ordering.py").write_text(
        "def fewest_gpus_first(jobs):\n    return sorted(jobs, key=lambda j: j.num_gpus)\n"
    )
    (code / "mine.py").write_text(IMPORTS_ITS_OWN)
    args = ["sim", "sweep", "--policies", f"{code / 'mine.py'}:Mine", "--congestion", "none"]
    args += ["--seeds", "0", "--max-jobs", "10", "--out", str(tmp_path / "s"), "-q"]
    args += ["--address", two_nodes]
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(unstall.__file__).resolve().parents[1]),
        "RAY_gcs_rpc_server_reconnect_timeout_s": "10",
    }

    def sweep(*more: str) -> tuple[int, str]:
        done = subprocess.run(
            [sys.executable, "-m", "unstall", *args, *more],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            cwd=tmp_path,
        )
        return done.returncode, done.stdout + done.stderr

    if without_first:
        code_rc, output = sweep()
        assert code_rc == 1, output
        assert "No module named 'ordering'" in output, output
        assert "--working-dir FOLDER" in output, output
    code_rc, output = sweep("--working-dir", str(code))
    assert code_rc == 0, output
    assert "1 of 1 runs done" in output
    run = json.loads(next((tmp_path / "s" / "runs").glob("*[0-9].json")).read_text())
    assert run["jobs_finished"] == 10


def test_a_sweep_over_degenerate_traces_gives_well_formed_results_and_warns(
    ray_session: object, tmp_path: Path
) -> None:
    """A trace without jobs, one whose jobs all exceed the cluster, one with a job too big: the
    runs finish with zeros where nothing ran, each trace warned of once on stderr."""
    from typer.testing import CliRunner

    from unstall.cli.app import app

    header = "job_id,submit_s,num_gpus,duration_s\n"
    traces = {
        "empty.csv": header,
        "too-big.csv": header + "1,0,4000,500\n2,5,5000,40\n",
        "one-too-big.csv": header + "1,0,4,500\n2,5,5000,40\n",
    }
    for name, text in traces.items():
        (tmp_path / name).write_text(text)
    out = tmp_path / "sweep"
    args = ["sim", "sweep", "--policies", "fifo,dally", "--congestion", "none", "--seeds", "0,1"]
    args += ["--traces", ",".join(str(tmp_path / name) for name in traces), "--out", str(out)]
    res = CliRunner().invoke(app, [*args, "-q"])
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output
    warnings = [line for line in res.output.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: trace empty.csv on cluster small: the trace holds no jobs: nothing was "
        "simulated and its figures are 0",
        "warning: trace too-big.csv on cluster small: no job fits the cluster: nothing was "
        "simulated and its figures are 0",
        "warning: trace one-too-big.csv on cluster small: 1 of 2 jobs need more than the "
        "cluster's 32 GPUs and were left out",
    ], res.output
    rows = pd.read_csv(out / "runs.csv")
    assert len(rows) == 12 and rows["ok"].all()
    finished = rows.groupby(rows["trace"].map(lambda t: Path(t).name))["jobs_finished"].max()
    assert finished.to_dict() == {"empty.csv": 0, "too-big.csv": 0, "one-too-big.csv": 1}
    summary = pd.read_csv(out / "summary.csv")
    assert len(summary) == 6 and (summary["seeds"] == 2).all()
    assert "12 of 12 runs done" in res.output


def test_a_seed_range_written_backwards_is_named_before_ray_starts(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from unstall.cli.app import app

    args = ["sim", "sweep", "--policies", "fifo", "--out", str(tmp_path / "s"), "-q"]
    res = CliRunner().invoke(app, [*args, "--seeds", "3-1"])
    assert res.exit_code == 2, res.output
    assert "--seeds.3-1: the range's end 1 is below its start 3: write 1-3" in res.output
    assert "non-empty tuple" not in res.output


def test_the_working_dir_reaches_the_ray_the_sweep_connects_to(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    import unstall.ray_connect as ray_connect
    from unstall.cli.app import app
    from unstall.errors import UnstallError

    calls: list[tuple[object, object]] = []

    def connect(address: object, **options: object) -> bool:  # stands in for Ray: nothing starts
        calls.append((address, options.get("runtime_env")))
        raise UnstallError("connected: stop here")

    monkeypatch.setattr(ray_connect, "connect_ray", connect)
    folder = tmp_path / "code"
    folder.mkdir()
    args = ["sim", "sweep", "--policies", "fifo", "--congestion", "none", "--seeds", "0"]
    args += ["--out", str(tmp_path / "s"), "--address", "127.0.0.1:6379", "-q"]
    res = CliRunner().invoke(app, [*args, "--working-dir", str(folder)])
    assert res.exit_code == 1 and "connected: stop here" in res.output, res.output
    assert calls == [("127.0.0.1:6379", {"working_dir": str(folder.resolve())})]
    calls.clear()  # without the option, no runtime environment
    res = CliRunner().invoke(app, args)
    assert calls == [("127.0.0.1:6379", None)], res.output


def test_a_working_dir_that_is_no_folder_is_refused_before_ray(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    import unstall.ray_connect as ray_connect
    from unstall.cli.app import app

    def connect(*args: object, **kwargs: object) -> bool:
        raise AssertionError("Ray was used before the folder was checked")

    monkeypatch.setattr(ray_connect, "connect_ray", connect)
    args = ["sim", "sweep", "--policies", "fifo", "--out", str(tmp_path / "s"), "-q"]
    res = CliRunner().invoke(app, [*args, "--working-dir", str(tmp_path / "nowhere")])
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert lines == [
        f"error: sweep.working_dir: {tmp_path / 'nowhere'} is not a folder (nothing is there) "
        "(option --working-dir)"
    ], res.output
    assert not (tmp_path / "s").exists()


def test_a_sweep_records_the_cluster_it_joined_from_ray_address(
    ray_session: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from unstall.cli.app import app

    gcs = ray_session.get_runtime_context().gcs_address  # the session's Ray stands for one
    monkeypatch.setenv("RAY_ADDRESS", gcs)
    out = tmp_path / "sweep.json"
    args = ["sim", "sweep", "--policies", "fifo", "--congestion", "none", "--seeds", "0"]
    args += ["--max-jobs", "20", "--out", str(tmp_path / "s"), "--json", str(out), "-q"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    config = json.loads(out.with_name("sweep.config.json").read_text())
    assert config["config"]["address"] == gcs  # not null: the run did not start its own Ray
