"""`unstall sim run` and `sim compare` as a user runs them: the tutorial policy of docs/policy.md
(examples/my_policy.py, a file the project never imports) by path, with typed options, and
`sim compare --json` with per-policy options."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from unstall.cli.app import app
from unstall.cli.sim_text import split_policy_options
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
    assert bad.exit_code == 2
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
    assert bad.exit_code == 2
    assert "expected POLICY.KEY=VALUE with POLICY one of" in bad.output


def test_sim_compare_runs_one_policy_twice_under_labels(tmp_path: Path) -> None:
    """``LABEL=POLICY`` in --policies: a second run of one policy, its options keyed by the
    label, its row, per-job file and saved request named by it."""
    out = tmp_path / "cmp.json"
    args = ["sim", "compare", "--policies", "dally-fixed,las=dally-fixed", "--max-jobs", "60"]
    args += ["--out", str(tmp_path / "cmp"), "--json", str(out), "-q"]
    res = CliRunner().invoke(app, [*args, "--policy-option", "las.order=las"])
    assert res.exit_code == 0, res.output
    assert [r["policy"] for r in json.loads(out.read_text())] == ["dally-fixed", "las"]
    runs = json.loads((tmp_path / "cmp.config.json").read_text())["config"]["runs"]
    assert [(r["policy"], r["label"], r["policy_options"]) for r in runs] == [
        ("dally-fixed", None, []),
        ("dally-fixed", "las", [["order", "las"]]),
    ]
    assert (tmp_path / "cmp" / "jobs_las.parquet").exists()
    twice = CliRunner().invoke(app, ["sim", "compare", "--policies", "fifo,fifo=dally-fixed"])
    assert twice.exit_code != 0
    assert "'fifo' is named twice (LABEL=POLICY names a second run" in twice.output


def test_policy_options_split_by_the_longest_policy_named() -> None:
    names = ["a", "a.py:B", "dally"]
    split = split_policy_options((("a.py:B.x", "1"), ("a.y", "2"), ("dally.order", "las")), names)
    assert split == {"a": (("y", "2"),), "a.py:B": (("x", "1"),), "dally": (("order", "las"),)}
    with pytest.raises(ConfigError, match=r"POLICY\.KEY=VALUE"):
        split_policy_options((("dally", "1"),), names)
    # A LABEL=POLICY entry's options are named by its label, and keyed by the entry.
    labelled = split_policy_options((("x.order", "las"),), ["dally", "x=dally"])
    assert labelled == {"dally": (), "x=dally": (("order", "las"),)}


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


def test_one_job_too_big_for_the_cluster_is_named_in_the_singular(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,num_gpus,duration_s\na,0,1,60\nhuge,0,64,60\n")
    args = ["sim", "run", "--policy", "fifo", "--trace", str(trace), "-q"]
    res = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "1 job needs more than the cluster's 32 GPUs and was rejected" in res.output


def test_a_cluster_of_one_rack_and_one_node_is_described_in_the_singular(tmp_path: Path) -> None:
    cluster = tmp_path / "one.toml"
    cluster.write_text("racks = 1\nnodes_per_rack = 1\ngpus_per_node = 4\n")
    args = ["sim", "run", "--policy", "fifo", "--cluster", str(cluster), "--max-jobs", "5", "-q"]
    res = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "1 rack x 1 node x 4 v100" in res.output


@pytest.mark.parametrize("command", ["run", "compare"])
def test_a_trace_format_without_a_trace_file_is_refused(command: str) -> None:
    # It was ignored: the embedded trace ran, and the user believed their format was used.
    args = ["sim", command, "--policies" if command == "compare" else "--policy", "fifo"]
    res = CliRunner().invoke(app, [*args, "--trace-format", "philly-csv", "-q"])
    assert res.exit_code == 2
    assert "'philly-csv' is the format of a trace file, and no trace was given" in res.output
    assert "(option --trace-format)" in res.output


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
    assert bad.exit_code == 2 and "simulate.duration_gpu: unknown GPU type 'z80'" in bad.output


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


BAD_POLICIES = """
import dataclasses

from unstall.sched import Decision


@dataclasses.dataclass
class Crash:
    name: str = "crash"
    needs_oracle: bool = False

    def reset(self):
        pass

    def decide(self, snapshot, rng):
        return 1 / 0


@dataclasses.dataclass
class Idle:
    name: str = "idle"
    needs_oracle: bool = False

    def reset(self):
        pass

    def decide(self, snapshot, rng):
        return Decision()
"""


@pytest.fixture
def bad_policies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "badpol.py").write_text(BAD_POLICIES)
    monkeypatch.chdir(tmp_path)  # the policies named as a user names them: badpol.py:Crash
    return tmp_path


def test_a_policy_that_raises_ends_run_and_compare_with_one_line_naming_it_and_its_line(
    bad_policies: Path,
) -> None:
    line = BAD_POLICIES.splitlines().index("        return 1 / 0") + 1
    expected = (
        "error: policy 'badpol.py:Crash' failed: ZeroDivisionError: division by zero "
        f"(badpol.py:{line}, in decide)"
    )
    run = CliRunner().invoke(app, ["sim", "run", "--policy", "badpol.py:Crash", "--max-jobs", "10"])
    args = ["sim", "compare", "--policies", "fifo,badpol.py:Crash", "--max-jobs", "10", "-q"]
    compare = CliRunner().invoke(app, [*args, "--out", str(bad_policies / "cmp")])
    for res in (run, compare):
        assert res.exit_code == 1, res.output
        assert "Traceback" not in res.output
        assert res.output.rstrip().splitlines()[-1] == expected, res.output


def test_a_policy_that_starts_nothing_is_warned_of_with_the_jobs_left_unfinished(
    bad_policies: Path,
) -> None:
    run_args = ["sim", "run", "--policy", "badpol.py:Idle", "--max-jobs", "10", "-q"]
    run = CliRunner().invoke(app, run_args)
    args = ["sim", "compare", "--policies", "fifo,badpol.py:Idle", "--max-jobs", "10", "-q"]
    compare = CliRunner().invoke(app, [*args, "--out", str(bad_policies / "cmp")])
    for res in (run, compare):
        assert res.exit_code == 0, res.output
        assert "warning: badpol.py:Idle left 10 of 10 jobs unfinished" in res.output
        assert res.output.count("warning:") == 1, res.output  # fifo finished every job


def test_jobs_out_with_an_unknown_suffix_is_refused_before_the_run(tmp_path: Path) -> None:
    args = ["sim", "run", "--policy", "fifo", "--max-jobs", "5", "-q"]
    bad = CliRunner().invoke(app, [*args, "--jobs-out", str(tmp_path / "jobs.xlsx")])
    assert bad.exit_code == 1, bad.output
    assert "cannot tell the file type from its suffix '.xlsx'" in bad.output
    assert "events in" not in bad.output and not (tmp_path / "jobs.xlsx").exists()
    for name in ("jobs.csv", "jobs.parquet"):
        ok = CliRunner().invoke(app, [*args, "--jobs-out", str(tmp_path / name)])
        assert ok.exit_code == 0, ok.output
    import pandas as pd

    assert len(pd.read_parquet(tmp_path / "jobs.parquet")) == 5  # Parquet, not CSV inside


def test_the_run_table_names_the_congestion_as_the_comparison_does(tmp_path: Path) -> None:
    args = ["--max-jobs", "5", "--congestion", "medium", "-q"]
    run = CliRunner().invoke(app, ["sim", "run", "--policy", "fifo", *args])
    compare = CliRunner().invoke(
        app, ["sim", "compare", "--policies", "fifo", "--out", str(tmp_path / "c"), *args]
    )
    for res in (run, compare):
        assert res.exit_code == 0, res.output
        assert "default_trace.csv on small (32 GPUs), congestion medium" in res.output


NAMED_MINE = """
import dataclasses

from unstall.sched import Decision, FreeGpus, Start


@dataclasses.dataclass
class Mine:
    name: str = "{name}"
    needs_oracle: bool = False
    spread: bool = {spread}

    def reset(self):
        pass

    def decide(self, snapshot, rng):
        free, starts = FreeGpus(snapshot), []
        for job in snapshot.queued:
            placement = (free.first_fit if self.spread else free.best)(job.num_gpus)
            if placement is not None:
                free.take(placement)
                starts.append(Start(job.job_id, placement))
        return Decision(starts=tuple(starts))
"""


def test_compare_keeps_every_run_of_policies_that_share_a_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two versions of one's policy, both named "mine", and one whose name holds a slash: each
    has its own table row, summary entry and per-job file inside --out."""
    import pandas as pd

    monkeypatch.chdir(tmp_path)
    Path("v1.py").write_text(NAMED_MINE.format(name="mine", spread=False))
    Path("v2.py").write_text(NAMED_MINE.format(name="mine", spread=True))
    Path("v3.py").write_text(NAMED_MINE.format(name="team/mine", spread=True))
    out = tmp_path / "cmp"
    args = ["sim", "compare", "--policies", "fifo,v1.py:Mine,v2.py:Mine,v3.py:Mine"]
    res = CliRunner().invoke(app, [*args, "--max-jobs", "30", "--out", str(out), "-q"])
    assert res.exit_code == 0, res.output
    results = json.loads((out / "summary.json").read_text())
    assert [r["policy"] for r in results] == ["fifo", "v1.py:Mine", "v2.py:Mine", "team/mine"]
    files = sorted(p.name for p in out.glob("jobs_*"))
    assert files == [
        "jobs_fifo.parquet",
        "jobs_team-mine.parquet",
        "jobs_v1.py-Mine.parquet",
        "jobs_v2.py-Mine.parquet",
    ]
    v1, v2 = (pd.read_parquet(out / f"jobs_{v}.py-Mine.parquet") for v in ("v1", "v2"))
    assert len(v1) == len(v2) == 30
    # Not one run twice: the first-fit version spreads jobs, the other does not.
    assert v2["comm_overhead_s"].sum() > v1["comm_overhead_s"].sum() == 0
    twice = CliRunner().invoke(app, ["sim", "compare", "--policies", "fifo,fifo", "-q"])
    assert twice.exit_code == 1
    assert twice.output.strip() == (
        "error: --policies fifo,fifo: 'fifo' is named twice (LABEL=POLICY names a second run of "
        "one policy, e.g. nodelay=dally-fixed)"
    )


def test_the_policy_listing_gives_every_name_whole_and_wraps_the_descriptions() -> None:
    """A long description wraps in its own column; it never cuts the names beside it short (the
    console is 160 columns wide when not a terminal)."""
    from unstall.sched import POLICIES

    res = CliRunner().invoke(app, ["sim", "policies"])
    assert res.exit_code == 0, res.output
    names = [line.split()[0] for line in res.output.splitlines()[3:] if line[:1].strip()]
    assert names == list(POLICIES)
    assert "…" not in res.output
