from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from unstall.cli.app import app
from unstall.errors import ConfigError
from unstall.net import small
from unstall.sched import ClusterSnapshot, Decision, Fifo, make_policy
from unstall.sim import CongestionSchedule, SimResult, congestion_level, simulate
from unstall.traces import Trace, default_trace
from unstall.traces.schema import TraceError
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
        # Values of the wrong kind: bare TypeErrors from a comparison or from pandas, or (a
        # fractional seed) a run; each is named with what the argument takes.
        ({"seed": 1.5}, r"simulate\.seed: must be a whole number, got 1\.5"),
        ({"max_jobs": "5"}, r"simulate\.max_jobs: must be a whole number, got '5'"),
        ({"max_jobs": 5.5}, r"simulate\.max_jobs: must be a whole number, got 5\.5"),
        ({"restore_s": "60"}, r"simulate\.restore_s: must be a number of seconds, got '60'"),
        ({"tick_s": "5"}, r"simulate\.tick_s: must be a number of seconds, got '5'"),
        ({"model_mix": "resnet50"}, r"simulate\.model_mix: must map model names to shares"),
        ({"job_profiles": "p.json"}, r"simulate\.job_profiles: must be a sequence of JobProfile"),
        ({"job_profiles": ["p.json"]}, r"simulate\.job_profiles: must hold JobProfile objects"),
        ({"duration_gpu": 5}, r"simulate\.duration_gpu: unknown GPU type 5"),
        ({"on_finish": 5}, r"simulate\.on_finish: must be a function"),
    ],
)
def test_bad_settings_name_the_argument(settings: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        simulate(default_trace(), small(), make_policy("fifo"), **settings)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {"cluster": "small"},
            "simulate.cluster: must be a cluster topology "
            '(e.g. unstall.net.topology_preset("small")',
        ),
        ({"cluster": "small"}, 'got str: use topology_preset("small")'),
        ({"cluster": "racks.toml"}, "got str: load_topology(path) reads a file"),
        ({"cluster": {"preset": "small"}}, "got dict: topology_from_mapping(mapping) builds one"),
        (
            {"trace": "FRAME"},
            "simulate.trace: must be a Trace; got DataFrame: Trace.from_frame(df)",
        ),
        ({"trace": "jobs.csv"}, "got str: unstall.traces.read_trace(path) reads a trace file"),
        ({"congestion": "medium"}, "simulate.congestion: must be a congestion (e.g. congestion_"),
        ({"congestion": "medium"}, 'got str: use congestion_level("medium")'),
        ({"congestion": 0.4}, "fractions=(0.4,))"),
        (
            {"policy": "fifo"},
            "simulate.policy: must be a policy object (name, needs_oracle, decide(snapshot, rng), "
            'reset()); got str: use make_policy("fifo")',
        ),
        ({"policy": "greedy"}, "got str: make_policy(name) builds a registered one (known: ["),
        ({"policy": Fifo}, "got a class, Fifo: instantiate it (Fifo())"),
        ({"policy": object()}, "got object, which lacks name and needs_oracle and decide("),
        ({"policy": "NAMED_3"}, "simulate.policy: its name must be a string, got int"),
    ],
)
def test_a_name_or_table_where_an_object_belongs_says_what_builds_the_object(
    arguments: dict[str, object], message: str
) -> None:
    """Each used to fail deep inside the run: an AttributeError ('str' object has no attribute
    'fastest_device'), or a crash blamed on the policy ('reset' missing 'self')."""
    given: dict[str, object] = {
        "trace": default_trace(),
        "cluster": small(),
        "policy": make_policy("fifo"),
    }
    given.update(arguments)
    if given["trace"] == "FRAME":
        given["trace"] = default_trace().jobs
    if given["policy"] == "NAMED_3":
        given["policy"] = make_policy("fifo")
        given["policy"].name = 3  # type: ignore[attr-defined]
    with pytest.raises(ConfigError) as err:
        simulate(**given, max_jobs=5)  # type: ignore[arg-type]
    assert message in str(err.value)


def test_a_policy_and_a_congestion_of_ones_own_classes_still_run() -> None:
    """The checks ask for the protocols, not for unstall's own classes."""

    class Calm:
        name = "calm"

        def schedule(self, horizon_s: float, seed: int) -> CongestionSchedule:
            return CongestionSchedule(times_s=(0.0,), fractions=(0.0,), name=self.name)

    class Mine:
        name = "mine"
        needs_oracle = False

        def __init__(self) -> None:
            self.inner = Fifo()

        def reset(self) -> None:
            self.inner.reset()

        def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
            return self.inner.decide(snapshot, rng)

    run = simulate(default_trace(), small(), Mine(), congestion=Calm(), max_jobs=5)
    result = run.result
    assert (result.policy, result.congestion, result.jobs_finished) == ("mine", "calm", 5)


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
    with pytest.raises(TraceError, match="names an unknown model 'my-net' \\(as do 79 more jobs"):
        run()
    with pytest.raises(
        ConfigError, match=r"simulate\.job_profiles: a second profile of model 'my-net'"
    ):
        run(light, heavy)


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
        "'lstm'; known: ["
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
    assert bad.exit_code == 1
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


def test_a_trace_without_jobs_gives_an_empty_result_not_a_crash() -> None:
    from unstall.traces.schema import REQUIRED_COLUMNS, Trace

    empty = Trace.from_frame(pd.DataFrame({c: [] for c in REQUIRED_COLUMNS}))
    run = simulate(empty, small(), make_policy("dally"))
    assert run.result.jobs == 0 and run.result.jobs_finished == 0
    assert run.jobs.empty and run.result.makespan_s == 0.0


def test_the_summary_counts_moved_jobs_and_the_most_moves_of_one_job() -> None:
    from unstall.cli.resolvers.sim import resolve_cluster, resolve_policy
    from unstall.cli.resolvers.traces import resolve_trace
    from unstall.sim import simulate

    run = simulate(resolve_trace(None), resolve_cluster("small"), resolve_policy("tiresias"))
    moves = run.jobs["preemptions"] + run.jobs["migrations"]
    assert run.result.preemptions > 0  # tiresias preempts on this trace
    assert run.result.jobs_moved == int((moves > 0).sum()) > 0
    assert run.result.max_moves_per_job == int(moves.max()) >= 1
