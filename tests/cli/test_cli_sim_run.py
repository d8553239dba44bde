"""`unstall sim run` and `sim compare` from the shell: results and configs written, policy
options reaching the policy, bad names and options named, job profiles and model mixes."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from policy_files import write_user_policies
from unstall.cli.app import app
from unstall.traces import default_trace
from unstall.workload import JobProfile


def _profile(tmp_path: Path, name: str, gradient_bytes: int) -> Path:
    profile = JobProfile(
        model="my-net",
        device="v100",
        compute_s=0.05,
        local_batch=32,
        gradient_bytes=gradient_bytes,
        gradient_tensors=40,
        layers=20,
    )
    return profile.save(tmp_path / f"{name}.json")


def test_cli_run_and_compare_write_results(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "run.json"
    res = runner.invoke(
        app, ["sim", "run", "--policy", "gandiva", "--max-jobs", "60", "--json", str(out)]
    )
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["policy"] == "gandiva" and data["jobs_finished"] == 60
    config = json.loads((tmp_path / "run.config.json").read_text())
    assert config["config"]["sim"]["max_jobs"] == 60
    folder = tmp_path / "cmp"
    res = runner.invoke(
        app,
        [
            "sim",
            "compare",
            "--policies",
            "fifo,consolidate",
            "--max-jobs",
            "40",
            "--out",
            str(folder),
        ],
    )
    assert res.exit_code == 0, res.output
    summary = json.loads((folder / "summary.json").read_text())
    assert [r["policy"] for r in summary] == ["fifo", "consolidate"]
    for name in ("jct_cdf.png", "queue_over_time.png", "gpu_util_over_time.png", "report.html"):
        assert (folder / name).stat().st_size > 0
    assert "consolidate" in (folder / "report.html").read_text()
    written = len(list(folder.iterdir()))  # the folder is named, with how many files it holds
    assert f"wrote {written} files to {folder}/: summary.json" in " ".join(res.output.split())
    bad = runner.invoke(app, ["sim", "run", "--policy", "nope"])
    assert bad.exit_code == 2
    assert "unknown policy 'nope'" in bad.output
    for option, value, named in (
        ("--cluster", "huge", "SimRequest.cluster"),
        ("--congestion", "extreme", "SimRequest.congestion"),
    ):
        bad = runner.invoke(app, ["sim", "run", "--policy", "fifo", option, value])
        assert bad.exit_code == 2
        assert named in bad.output


def test_cli_policy_options_reach_the_policy_and_bad_ones_are_named(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "dally.json"
    args = ["sim", "run", "--policy", "dally", "--max-jobs", "40", "--json", str(out)]
    options = ["--policy-option", "order=las", "--policy-option", "delay=off"]
    res = runner.invoke(app, [*args, *options])
    assert res.exit_code == 0, res.output
    config = json.loads((tmp_path / "dally.config.json").read_text())
    assert config["config"]["sim"]["policy_options"] == [["order", "las"], ["delay", "off"]]
    assert json.loads(out.read_text())["jobs_finished"] == 40
    bad = runner.invoke(app, [*args, "--policy-option", "delay=sometimes"])
    assert bad.exit_code == 2
    assert "dally.delay" in bad.output
    malformed = runner.invoke(app, [*args, "--policy-option", "order"])
    assert malformed.exit_code == 2
    assert "KEY=VALUE" in malformed.output


def test_an_unknown_model_in_a_trace_is_named_with_its_file_and_job_before_the_run(
    tmp_path: Path,
) -> None:
    path = tmp_path / "mine.csv"
    frame = default_trace().jobs.head(50).copy()
    frame.loc[40, "model"] = "lstm"  # lstm_lm in the zoo
    frame.to_csv(path, index=False)
    res = CliRunner().invoke(app, ["sim", "run", "--policy", "fifo", "--trace", str(path), "-q"])
    assert res.exit_code == 1, res.output
    error = res.output.strip().splitlines()[-1]
    assert error.startswith(
        f"error: {path}, field 'model': job {frame.loc[40, 'job_id']!r} names an unknown model "
        "'lstm' (did you mean 'lstm_lm'?); known: ["
    ), error
    assert "'lstm_lm'" in error
    # Jobs past --max-jobs are not simulated: their models are not looked up.
    ok = CliRunner().invoke(
        app, ["sim", "run", "--policy", "fifo", "--trace", str(path), "--max-jobs", "40", "-q"]
    )
    assert ok.exit_code == 0, ok.output


def test_cli_job_profile_and_model_mix_for_a_trace_without_models(tmp_path: Path) -> None:
    frame = default_trace().jobs.head(30).drop(columns=["model"])
    path = tmp_path / "no_models.csv"
    frame.to_csv(path, index=False)
    profile = _profile(tmp_path, "p", 50_000_000)
    out = tmp_path / "r.json"
    args = ["sim", "run", "--policy", "fifo", "--trace", str(path), "--json", str(out)]
    res = CliRunner().invoke(
        app, [*args, "--job-profile", str(profile), "--model-mix", "my-net=3,resnet18=1"]
    )
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["jobs_finished"] == 30
    config = json.loads((tmp_path / "r.config.json").read_text())["config"]["sim"]
    assert config["model_mix"] == [["my-net", 3.0], ["resnet18", 1.0]]
    assert config["job_profiles"] == [str(profile)]
    bad = CliRunner().invoke(app, [*args, "--model-mix", "my-net"])
    assert bad.exit_code == 2
    assert "NAME=SHARE" in bad.output
    missing = CliRunner().invoke(app, [*args, "--job-profile", str(tmp_path / "missing.json")])
    assert missing.exit_code == 1
    assert "missing.json: no such file" in missing.output


def test_a_model_mix_and_a_profile_that_no_job_uses_are_named(tmp_path: Path) -> None:
    # The embedded trace names every job's model: the mix draws none, and no job runs
    # my-net; both went unused without a word.
    profile = _profile(tmp_path, "p", 50_000_000)
    args = ["sim", "run", "--policy", "fifo", "--max-jobs", "20", "-q"]
    res = CliRunner().invoke(
        app,
        [*args, "--job-profile", str(profile), "--model-mix", "my-net=1,resnet50=1"],
        env={"COLUMNS": "300"},
    )
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "warning: --model-mix is unused: every job of this trace names its model" in text
    assert f"warning: --job-profile {profile} is unused: no simulated job runs its model" in text
    # on a trace without models both act, and nothing is said
    frame = default_trace().jobs.head(20).drop(columns=["model"])
    path = tmp_path / "no_models.csv"
    frame.to_csv(path, index=False)
    used = CliRunner().invoke(
        app,
        [*args, "--trace", str(path), "--job-profile", str(profile), "--model-mix", "my-net=1"],
        env={"COLUMNS": "300"},
    )
    assert used.exit_code == 0, used.output
    assert "unused" not in used.output


def test_sim_run_takes_a_policy_class_from_a_file(tmp_path: Path) -> None:
    path = write_user_policies(tmp_path)
    out = tmp_path / "run.json"
    args = ["sim", "run", "--policy", f"{path}:Greedy", "--max-jobs", "20", "--json", str(out)]
    res = CliRunner().invoke(app, [*args, "--policy-option", "largest_first=yes"])
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["policy"] == "greedy"
    bad = CliRunner().invoke(app, [*args, "--policy-option", "largest_first=sometimes"])
    assert bad.exit_code == 2
    assert "Greedy.largest_first: 'sometimes' is not a bool" in bad.output


def test_a_tuned_run_says_what_its_tuner_chose(tmp_path: Path) -> None:
    """`sim run --policy dally` prints the tuner's course in a line (tunings, switches); a
    policy without a tuner (``dally-fixed``) prints none."""
    runner = CliRunner()
    res = runner.invoke(
        app,
        ["sim", "run", "--policy", "dally", "--json", str(tmp_path / "t.json")],
    )
    assert res.exit_code == 0, res.output
    # It starts from gittins-service; a run that switches says "started gittins-service,
    # switched to ..." (tests/sim/test_lookahead.py).
    assert re.search(r"dally's tuner: \d+ tunings?, (started|kept) gittins-service", res.output)
    plain = runner.invoke(
        app, ["sim", "run", "--policy", "dally-fixed", "--json", str(tmp_path / "p.json")]
    )
    assert plain.exit_code == 0, plain.output
    assert "tuner:" not in plain.output
