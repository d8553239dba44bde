from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from unstall.cli.app import app
from unstall.errors import ConfigError
from unstall.net import small
from unstall.sched import make_policy
from unstall.sim import SimResult, congestion_level, simulate
from unstall.traces import Trace, default_trace
from unstall.workload import JobProfile

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
    medium = congestion_level("medium")
    first = simulate(trace, small(), make_policy("tiresias"), congestion=medium, seed=3)
    again = simulate(trace, small(), make_policy("tiresias"), congestion=medium, seed=3)
    assert first.result.jobs_finished == len(trace)
    assert set(first.result.to_dict()) >= REQUIRED
    # Everything but the wall-clock figures is deterministic.
    a = {k: v for k, v in first.result.to_dict().items() if "wall" not in k and "per_s" not in k}
    b = {k: v for k, v in again.result.to_dict().items() if "wall" not in k and "per_s" not in k}
    assert a == b


def test_congestion_never_helps_and_consolidation_beats_first_fit_on_overhead() -> None:
    trace = default_trace()
    high = congestion_level("high")
    calm = simulate(trace, small(), make_policy("fifo")).result
    busy = simulate(trace, small(), make_policy("fifo"), congestion=high).result
    assert calm.congestion == "none" and busy.congestion == "high"
    assert busy.comm_overhead_s > calm.comm_overhead_s
    assert busy.avg_jct_s > calm.avg_jct_s
    ff = simulate(trace, small(), make_policy("first-fit"), congestion=high).result
    cons = simulate(trace, small(), make_policy("consolidate"), congestion=high).result
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
    run = simulate(Trace.from_frame(frame), small(), make_policy("fifo"))
    assert run.result.jobs == 2
    assert run.result.jobs_finished == 1
    assert run.result.jobs_rejected == 1


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"restore_s": -1.0}, r"simulate\.restore_s"),
        ({"seed": -1}, r"simulate\.seed"),
        ({"tick_s": 0.0}, r"simulate\.tick_s"),
        ({"max_jobs": 0}, r"simulate\.max_jobs"),
        ({"model_mix": {"resnet18": -1.0}}, r"simulate\.model_mix"),
        ({"model_mix": {}}, r"simulate\.model_mix"),
    ],
)
def test_bad_settings_name_the_argument(settings: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        simulate(default_trace(), small(), make_policy("fifo"), **settings)  # type: ignore[arg-type]


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
    assert "unknown policy 'nope'" in bad.output
    for option, value, named in (
        ("--cluster", "huge", "SimRequest.cluster"),
        ("--congestion", "extreme", "SimRequest.congestion"),
    ):
        bad = runner.invoke(app, ["sim", "run", "--policy", "fifo", option, value])
        assert bad.exit_code == 1
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
    assert bad.exit_code == 1
    assert "DallyConfig.delay" in bad.output
    malformed = runner.invoke(app, [*args, "--policy-option", "order"])
    assert malformed.exit_code == 1
    assert "KEY=VALUE" in malformed.output


def _my_net(gradient_bytes: int) -> JobProfile:
    return JobProfile(
        model="my-net",
        device="v100",
        compute_s=0.05,
        local_batch=32,
        gradient_bytes=gradient_bytes,
        gradient_tensors=40,
        layers=20,
    )


def _profile(tmp_path: Path, name: str, gradient_bytes: int) -> Path:
    return _my_net(gradient_bytes).save(tmp_path / f"{name}.json")


def _my_net_trace(jobs: int) -> Trace:
    frame = default_trace().jobs.head(jobs).copy()
    frame["model"] = "my-net"
    return Trace.from_frame(frame)


def test_job_profiles_give_their_model_the_measured_figures() -> None:
    trace = _my_net_trace(80)
    high = congestion_level("high")
    light, heavy = _my_net(1_000_000), _my_net(400_000_000)

    def run(*profiles: JobProfile) -> SimResult:
        policy = make_policy("first-fit")
        return simulate(trace, small(), policy, congestion=high, job_profiles=profiles).result

    runs = {"light": run(light), "heavy": run(heavy)}
    # The same placements cost far more time on the network with 400x the gradient bytes.
    assert runs["heavy"].comm_overhead_s > 10 * runs["light"].comm_overhead_s > 0
    with pytest.raises(ConfigError, match="unknown model 'my-net'"):
        run()
    with pytest.raises(
        ConfigError, match=r"simulate\.job_profiles: a second profile of model 'my-net'"
    ):
        run(light, heavy)


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
    missing = CliRunner().invoke(app, [*args, "--job-profile", str(tmp_path / "missing.json")])
    assert missing.exit_code == 1
    assert "missing.json: no such file" in missing.output


def test_a_trace_without_jobs_gives_an_empty_result_not_a_crash() -> None:
    from unstall.traces.schema import REQUIRED_COLUMNS, Trace

    empty = Trace.from_frame(pd.DataFrame({c: [] for c in REQUIRED_COLUMNS}))
    run = simulate(empty, small(), make_policy("dally"))
    assert run.result.jobs == 0 and run.result.jobs_finished == 0
    assert run.jobs.empty and run.result.makespan_s == 0.0
