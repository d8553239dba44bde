"""`unstall sim run` and `sim compare` as a user runs them: the tutorial policy of docs/policy.md
(examples/my_policy.py, a file the project never imports) by path, with typed options, and
`sim compare --json` with per-policy options."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from unstall.cli.app import app
from unstall.cli.resolvers.sim import split_policy_options
from unstall.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
MINE = "examples/my_policy.py:SmallestFirst"


@pytest.fixture
def at_root(monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(ROOT)  # the tutorial's paths are relative to the repository's root
    return ROOT


def test_sim_run_runs_the_tutorial_policy_with_an_option(at_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    args = ["sim", "run", "--policy", MINE, "--max-jobs", "40", "--json", str(out), "-q"]
    res = CliRunner().invoke(app, [*args, "--policy-option", "patience_s=60"])
    assert res.exit_code == 0, res.output
    assert "smallest-first" in res.output
    assert json.loads(out.read_text())["jobs_finished"] == 40
    config = json.loads((tmp_path / "run.config.json").read_text())["config"]
    assert config["sim"]["policy_options"] == [["patience_s", "60"]]
    bad = CliRunner().invoke(app, [*args, "--policy-option", "patience_s=soon"])
    assert bad.exit_code == 1
    assert "SmallestFirst.patience_s: 'soon' is not a float" in bad.output


def test_sim_compare_json_holds_every_policy_with_its_own_options(
    at_root: Path, tmp_path: Path
) -> None:
    out = tmp_path / "cmp.json"
    args = ["sim", "compare", "--policies", f"fifo,dally,{MINE}", "--max-jobs", "40"]
    args += ["--out", str(tmp_path / "cmp"), "--json", str(out), "-q"]
    options = [f"{MINE}.patience_s=1e9", "dally.order=las", "dally.preemption=off"]
    res = CliRunner().invoke(app, [*args, *[f"--policy-option={o}" for o in options]])
    assert res.exit_code == 0, res.output
    results = json.loads(out.read_text())
    assert [r["policy"] for r in results] == ["fifo", "dally", "smallest-first"]
    assert all(r["jobs_finished"] == 40 for r in results)
    runs = json.loads((tmp_path / "cmp.config.json").read_text())["config"]["runs"]
    assert [r["policy_options"] for r in runs] == [
        [],
        [["order", "las"], ["preemption", "off"]],
        [["patience_s", "1e9"]],
    ]
    bad = CliRunner().invoke(app, [*args, "--policy-option", "tiresias.x=1"])
    assert bad.exit_code == 1
    assert "expected POLICY.KEY=VALUE with POLICY one of" in bad.output


def test_policy_options_split_by_the_longest_policy_named() -> None:
    names = ["a", "a.py:B", "dally"]
    split = split_policy_options((("a.py:B.x", "1"), ("a.y", "2"), ("dally.order", "las")), names)
    assert split == {"a": (("y", "2"),), "a.py:B": (("x", "1"),), "dally": (("order", "las"),)}
    with pytest.raises(ConfigError, match=r"POLICY\.KEY=VALUE"):
        split_policy_options((("dally", "1"),), names)


def test_sim_run_prints_the_cluster_and_names_jobs_that_can_never_fit(tmp_path: Path) -> None:
    cluster = tmp_path / "tiny.toml"
    cluster.write_text("nodes_per_rack = 2\ngpus_per_node = 4\n")
    jobs = tmp_path / "jobs.csv"
    args = ["sim", "run", "--policy", "fifo", "--cluster", str(cluster), "--max-jobs", "120"]
    res = CliRunner().invoke(app, [*args, "--jobs-out", str(jobs), "-q"])
    assert res.exit_code == 0, res.output
    assert "cluster tiny: 8 GPUs" in res.output and "11% of line rate" in res.output
    import pandas as pd

    table = pd.read_csv(jobs)
    rejected = table[table["outcome"] == "rejected"]
    assert len(table) == 120 and len(rejected) > 0 and (rejected["num_gpus"] > 8).all()
    assert f"{len(rejected)} jobs need more than the cluster's 8 GPUs" in res.output
    assert all(job_id in res.output for job_id in rejected["job_id"])


def test_duration_gpu_sets_the_work_and_a_wrong_one_is_named(tmp_path: Path) -> None:
    cluster = tmp_path / "k80s.toml"
    cluster.write_text('racks = 2\nnodes_per_rack = 2\ngpus_per_node = 4\ndevice = "k80"\n')
    jct = {}
    for gpu in ("k80", "v100"):
        out = tmp_path / f"{gpu}.json"
        args = ["sim", "run", "--policy", "fifo", "--cluster", str(cluster), "--max-jobs", "60"]
        res = CliRunner().invoke(app, [*args, "--duration-gpu", gpu, "--json", str(out), "-q"])
        assert res.exit_code == 0, res.output
        jct[gpu] = json.loads(out.read_text())["avg_jct_s"]
    # Work measured on V100s takes the slower K80s longer than work measured on K80s.
    assert jct["v100"] > 1.5 * jct["k80"]
    bad = CliRunner().invoke(app, [*args, "--duration-gpu", "z80"])
    assert bad.exit_code == 1 and "simulate.duration_gpu: unknown GPU type 'z80'" in bad.output


DEGENERATE = {
    "header-only": ("job_id,submit_s,num_gpus,duration_s\n", 0, "the trace holds no jobs"),
    "all-too-big": (
        "job_id,submit_s,num_gpus,duration_s\n1,0,4000,500\n2,5,5000,40\n",
        0,
        "no job fits the cluster",
    ),
    "one-job": ("job_id,submit_s,num_gpus,duration_s\n1,0,4,500\n", 1, None),
}


@pytest.mark.parametrize("case", sorted(DEGENERATE))
def test_degenerate_traces_give_a_warning_or_a_well_formed_result_in_run_and_compare(
    tmp_path: Path, case: str
) -> None:
    text, finished, warning = DEGENERATE[case]
    trace = tmp_path / "t.csv"
    trace.write_text(text)
    out = tmp_path / "run.json"
    run_args = ["sim", "run", "--policy", "dally", "--trace", str(trace), "--json", str(out)]
    run = CliRunner().invoke(app, [*run_args, "--jobs-out", str(tmp_path / "jobs.csv"), "-q"])
    compare_args = ["sim", "compare", "--policies", "fifo,dally", "--trace", str(trace)]
    compare = CliRunner().invoke(app, [*compare_args, "--out", str(tmp_path / "cmp"), "-q"])
    for res in (run, compare):
        assert res.exit_code == 0, res.output
        assert "Traceback" not in res.output
        assert (warning is None) == ("warning:" not in res.output), res.output
        if warning is not None:
            assert warning in res.output
    assert json.loads(out.read_text())["jobs_finished"] == finished
    summary = json.loads((tmp_path / "cmp" / "summary.json").read_text())
    assert summary
    assert (tmp_path / "cmp" / "report.html").is_file()
