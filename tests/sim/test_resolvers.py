"""The simulator's resolvers: command-line text into policies, clusters, congestion, traces and
profiles; bad text gives one error naming the field or file."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from unstall.cli.resolvers.sim import (
    SimRequest,
    parse_model_mix,
    parse_pairs,
    resolve_cluster,
    resolve_congestion,
    resolve_job_profiles,
    resolve_policy,
    simulate_request,
)
from unstall.cli.resolvers.traces import resolve_trace
from unstall.errors import ConfigError, DataFileError
from unstall.net import small
from unstall.results import to_jsonable
from unstall.sched import Dally, make_policy
from unstall.sim import CongestionLevel, CongestionSchedule, simulate
from unstall.traces import default_trace
from unstall.usercode import UserCodeError

USER_POLICIES = '''
import dataclasses
from unstall.sched import Decision, FreeGpus, Start


@dataclasses.dataclass
class Greedy:
    """Starts every queued job on the best free GPUs, largest first when asked."""

    name: str = "greedy"
    needs_oracle: bool = False
    largest_first: bool = False

    def reset(self):
        pass

    def decide(self, snapshot, rng):
        free = FreeGpus(snapshot)
        jobs = sorted(snapshot.queued, key=lambda j: -j.num_gpus) if self.largest_first else list(
            snapshot.queued
        )
        starts = []
        for job in jobs:
            placement = free.best(job.num_gpus)
            if placement is not None:
                free.take(placement)
                starts.append(Start(job.job_id, placement))
        return Decision(starts=tuple(starts))


class Plain:
    """Not a dataclass: its options come from the constructor's defaults."""

    needs_oracle = False

    def __init__(self, name="plain", margin=1.5):
        self.name = name
        self.margin = margin

    def reset(self):
        pass

    def decide(self, snapshot, rng):
        return Decision()


class NotAPolicy:
    pass


class NoMethods:
    name = "no-methods"
    needs_oracle = False
'''


def test_registered_policies_take_typed_text_options() -> None:
    policy = resolve_policy("dally", (("order", "las"), ("preemption", "no"), ("wait_factor", "4")))
    assert isinstance(policy, Dally)
    assert policy.config.order == "las"
    assert policy.config.preemption is False
    assert policy.config.wait_factor == 4.0
    thresholds = resolve_policy("dally", (("las_thresholds_gpu_s", "10,20"),))
    assert isinstance(thresholds, Dally)
    assert thresholds.config.las_thresholds_gpu_s == (10.0, 20.0)
    assert resolve_policy("fifo").name == "fifo"


@pytest.mark.parametrize(
    ("name", "options", "named"),
    [
        ("dally", [("no_such_knob", "1")], "DallyConfig.no_such_knob"),
        ("dally", [("preemption", "maybe")], "DallyConfig.preemption"),
        ("dally", [("wait_factor", "fast")], "DallyConfig.wait_factor"),
        ("dally", [("order", "random")], "DallyConfig.order"),
        ("fifo", [("order", "las")], "policy.options"),
        ("nope", [], "unknown policy 'nope'"),
    ],
)
def test_bad_policy_text_names_the_field(
    name: str, options: list[tuple[str, str]], named: str
) -> None:
    with pytest.raises(ConfigError) as err:
        resolve_policy(name, options)
    assert named in str(err.value)


def test_user_policy_classes_load_from_a_file_with_typed_options(tmp_path: Path) -> None:
    path = tmp_path / "my_policies.py"
    path.write_text(USER_POLICIES)
    greedy = resolve_policy(f"{path}:Greedy", (("largest_first", "yes"),))
    assert greedy.name == "greedy" and greedy.largest_first is True  # type: ignore[attr-defined]
    plain = resolve_policy(f"{path}:Plain", (("margin", "3"),))
    assert plain.margin == 3.0  # type: ignore[attr-defined]
    run = simulate(default_trace(), small(), greedy, max_jobs=30)
    assert run.result.policy == "greedy" and run.result.jobs_finished == 30
    with pytest.raises(ConfigError, match=r"Greedy\.nope: unknown option"):
        resolve_policy(f"{path}:Greedy", (("nope", "1"),))
    with pytest.raises(ConfigError, match="lacks the Policy protocol"):
        resolve_policy(f"{path}:NotAPolicy")
    # Only what is missing: the class defines name and needs_oracle.
    with pytest.raises(ConfigError) as half:
        resolve_policy(f"{path}:NoMethods")
    assert str(half.value) == (
        f"SimRequest.policy: {path}:NoMethods built a NoMethods, which lacks the Policy "
        "protocol's decide(snapshot, rng) and reset()"
    )
    with pytest.raises(UserCodeError, match="Missing"):
        resolve_policy(f"{path}:Missing")


def test_clusters_are_presets_or_files(tmp_path: Path) -> None:
    assert resolve_cluster("small") == small()
    path = tmp_path / "cluster.toml"
    path.write_text('preset = "small"\nnic = "100g"\n')
    assert resolve_cluster(str(path)).nic.bandwidth_gbps == 100.0
    with pytest.raises(ConfigError, match=r"SimRequest\.cluster: 'huge' is neither a preset"):
        resolve_cluster("huge")
    with pytest.raises(DataFileError, match=r"missing\.json: no such file"):
        resolve_cluster(str(tmp_path / "missing.json"))


def test_congestion_is_a_level_or_a_schedule_file_labelled_as_given(tmp_path: Path) -> None:
    level = resolve_congestion("medium")
    assert isinstance(level, CongestionLevel) and level.name == "medium"
    path = tmp_path / "busy.csv"
    path.write_text("time_s,fraction\n0,0.3\n3600,0.5\n")
    schedule = resolve_congestion(str(path))
    assert isinstance(schedule, CongestionSchedule)
    assert schedule.name == str(path)
    assert schedule.schedule(10.0, seed=4) is schedule
    assert schedule.fractions == (0.3, 0.5)
    with pytest.raises(ConfigError, match=r"SimRequest\.congestion: 'extreme' is neither a level"):
        resolve_congestion("extreme")
    path.write_text("time_s,fraction\n0,0.3\n10,lots\n")
    with pytest.raises(DataFileError, match=r"busy\.csv, line 3, field 'fraction'"):
        resolve_congestion(str(path))


def test_a_congestion_schedule_from_a_spreadsheet_reads_and_its_mistakes_are_named(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cong.csv"
    # "CSV UTF-8" from a spreadsheet: a byte-order mark before the header, CRLF, a blank line.
    path.write_bytes(b"\xef\xbb\xbftime_s,fraction\r\n0,0.1\r\n\r\n600,0.5\r\n")
    schedule = resolve_congestion(str(path))
    assert (schedule.times_s, schedule.fractions) == ((0.0, 600.0), (0.1, 0.5))
    for text, message in [
        ("", "the file is empty; want the header time_s,fraction"),
        ("time,frac\n0,0.1\n", "line 1: header must be exactly: time_s,fraction, got 'time,frac'"),
        ("time_s,fraction\n0,0.1\n\n600,0.5,7\n", "line 4: 3 fields where the header has 2"),
        ("time_s,fraction\n0,1.5\n", "line 2, field 'fraction': must be in [0, 0.95], got 1.5"),
    ]:
        path.write_text(text)
        with pytest.raises(DataFileError) as err:
            resolve_congestion(str(path))
        assert str(err.value) == f"{path}, {message}" if "line" in message else f"{path}: {message}"


def test_text_pairs_and_model_mix() -> None:
    assert parse_pairs(["a=1", " b = two "], "--opt", "KEY=VALUE") == (("a", "1"), ("b", "two"))
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        parse_pairs(["a"], "--opt", "KEY=VALUE")
    assert parse_model_mix("resnet18=3, vgg16=1") == (("resnet18", 3.0), ("vgg16", 1.0))
    assert parse_model_mix(None) is None
    with pytest.raises(ConfigError, match="NAME=SHARE"):
        parse_model_mix("resnet18=lots")


def test_job_profile_files_are_read_and_a_missing_one_is_named(tmp_path: Path) -> None:
    with pytest.raises(DataFileError, match=r"nowhere\.json: no such file"):
        resolve_job_profiles([tmp_path / "nowhere.json"])
    assert resolve_job_profiles([]) == ()


def test_a_request_runs_as_the_objects_it_names_and_saves_as_the_text_it_holds() -> None:
    request = SimRequest(policy="tiresias", congestion="low", seed=2, max_jobs=60)
    trace = resolve_trace(None)
    via_request = simulate_request(request, trace).result.to_dict()
    direct = simulate(
        trace,
        small(),
        make_policy("tiresias"),
        congestion=resolve_congestion("low"),
        seed=2,
        max_jobs=60,
    ).result.to_dict()
    wall = ("sim_wall_s", "events_per_s")
    assert {k: v for k, v in via_request.items() if k not in wall} == {
        k: v for k, v in direct.items() if k not in wall
    }
    saved = json.loads(json.dumps(to_jsonable(request)))
    assert list(saved) == [f.name for f in dataclasses.fields(SimRequest)]
    assert saved["congestion"] == "low" and saved["policy_options"] == []


def test_sim_run_takes_a_policy_class_from_a_file(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from unstall.cli.app import app

    path = tmp_path / "my_policies.py"
    path.write_text(USER_POLICIES)
    out = tmp_path / "run.json"
    args = ["sim", "run", "--policy", f"{path}:Greedy", "--max-jobs", "20", "--json", str(out)]
    res = CliRunner().invoke(app, [*args, "--policy-option", "largest_first=yes"])
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["policy"] == "greedy"
    bad = CliRunner().invoke(app, [*args, "--policy-option", "largest_first=sometimes"])
    assert bad.exit_code == 1
    assert "Greedy.largest_first: 'sometimes' is not a bool" in bad.output
