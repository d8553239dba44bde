from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from unstall.cli.app import app
from unstall.errors import ConfigError
from unstall.sim.run import SimConfig, run_simulation
from unstall.traces import Trace, default_trace

REQUIRED = {
    "policy",
    "jobs",
    "jobs_finished",
    "makespan_s",
    "avg_jct_s",
    "p50_jct_s",
    "p95_jct_s",
    "p99_jct_s",
    "avg_queue_s",
    "comm_overhead_s",
    "gpu_util",
    "preemptions",
    "migrations",
    "sim_wall_s",
}


def test_embedded_trace_finishes_under_every_baseline_and_is_reproducible() -> None:
    trace = default_trace()
    first = run_simulation(trace, SimConfig(policy="tiresias", congestion="medium", seed=3))
    again = run_simulation(trace, SimConfig(policy="tiresias", congestion="medium", seed=3))
    assert first.result.jobs_finished == len(trace)
    assert set(first.result.to_dict()) >= REQUIRED
    # Everything but the wall-clock figures is deterministic.
    a = {k: v for k, v in first.result.to_dict().items() if "wall" not in k and "per_s" not in k}
    b = {k: v for k, v in again.result.to_dict().items() if "wall" not in k and "per_s" not in k}
    assert a == b


def test_congestion_never_helps_and_consolidation_beats_first_fit_on_overhead() -> None:
    trace = default_trace()
    calm = run_simulation(trace, SimConfig(policy="fifo", congestion="none")).result
    busy = run_simulation(trace, SimConfig(policy="fifo", congestion="high")).result
    assert busy.comm_overhead_s > calm.comm_overhead_s
    assert busy.avg_jct_s > calm.avg_jct_s
    ff = run_simulation(trace, SimConfig(policy="first-fit", congestion="high")).result
    cons = run_simulation(trace, SimConfig(policy="consolidate", congestion="high")).result
    assert cons.comm_overhead_frac < ff.comm_overhead_frac


def test_jobs_larger_than_the_cluster_are_counted_not_simulated() -> None:
    frame = pd.DataFrame(
        {
            "job_id": ["a", "b"],
            "submit_s": [0.0, 1.0],
            "num_gpus": [1, 64],
            "duration_s": [10.0, 5.0],
        }
    )
    run = run_simulation(Trace.from_frame(frame), SimConfig(policy="fifo", cluster="small"))
    assert run.result.jobs == 2
    assert run.result.jobs_finished == 1
    assert run.result.jobs_rejected == 1


def test_config_errors_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"SimConfig\.policy"):
        SimConfig(policy="nope")
    with pytest.raises(ConfigError, match=r"SimConfig\.cluster"):
        SimConfig(cluster="huge")
    with pytest.raises(ConfigError, match=r"SimConfig\.congestion"):
        SimConfig(congestion="extreme")
    with pytest.raises(ConfigError, match=r"SimConfig\.restore_s"):
        SimConfig(restore_s=-1)


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
    bad = runner.invoke(app, ["sim", "run", "--policy", "nope"])
    assert bad.exit_code == 1
    assert "SimConfig.policy" in bad.output


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
    assert bad.exit_code == 1
    assert "DallyConfig.delay" in bad.output
    malformed = runner.invoke(app, [*args, "--policy-option", "order"])
    assert malformed.exit_code == 1
    assert "KEY=VALUE" in malformed.output


def _profile(tmp_path: Path, name: str, gradient_bytes: int) -> Path:
    from unstall.workload.profiles import JobProfile

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


def _my_net_trace(jobs: int) -> Trace:
    frame = default_trace().jobs.head(jobs).copy()
    frame["model"] = "my-net"
    return Trace.from_frame(frame)


def test_job_profiles_give_their_model_the_measured_figures(tmp_path: Path) -> None:
    trace = _my_net_trace(80)
    base = {"policy": "first-fit", "cluster": "small", "congestion": "high"}
    light = _profile(tmp_path, "light", 1_000_000)
    heavy = _profile(tmp_path, "heavy", 400_000_000)
    runs = {
        p.stem: run_simulation(trace, SimConfig(**base, job_profiles=(str(p),))).result  # type: ignore[arg-type]
        for p in (light, heavy)
    }
    # The same placements cost far more time on the network with 400x the gradient bytes.
    assert runs["heavy"].comm_overhead_s > 10 * runs["light"].comm_overhead_s > 0
    with pytest.raises(ConfigError, match="unknown model 'my-net'"):
        run_simulation(trace, SimConfig(**base))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="a second profile of model 'my-net'"):
        run_simulation(trace, SimConfig(**base, job_profiles=(str(light), str(heavy))))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="no such file"):
        SimConfig(job_profiles=(str(tmp_path / "missing.json"),))


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
    assert bad.exit_code == 1
    assert "NAME=SHARE" in bad.output
