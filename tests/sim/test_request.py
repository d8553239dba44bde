"""What :mod:`unstall.sim` resolves of a run named as on the command line: congestion levels and
schedule files, JobProfile files, a :class:`SimRequest` (names and files, saved beside a result
so that the run can be repeated), and simulate's own arguments given by name."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from policy_files import write_user_policies
from unstall.errors import ArgumentTypeError, ConfigError, DataFileError
from unstall.net import small
from unstall.results import to_jsonable
from unstall.sched import make_policy
from unstall.sim import (
    CongestionLevel,
    CongestionSchedule,
    SimRequest,
    congestion_level,
    read_job_profiles,
    resolve_congestion,
    simulate,
    simulate_request,
)
from unstall.traces import default_trace, resolve_trace, write_trace


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
    with pytest.raises(
        ConfigError, match=r"resolve_congestion\.congestion: 'extreme' is neither a level"
    ):
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


def test_job_profile_files_are_read_and_a_missing_one_is_named(tmp_path: Path) -> None:
    with pytest.raises(DataFileError, match=r"nowhere\.json: no such file"):
        read_job_profiles([tmp_path / "nowhere.json"])
    assert read_job_profiles([]) == ()


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
    # A label names the result (a comparison's second run of one policy); the run is the same.
    labelled = dataclasses.replace(request, label="t2")
    via_label = simulate_request(labelled, trace).result.to_dict()
    assert via_label.pop("policy") == "t2" and via_request.pop("policy") == "tiresias"
    assert {k: v for k, v in via_label.items() if k not in wall} == {
        k: v for k, v in via_request.items() if k not in wall
    }


def test_a_congestion_object_passes_and_a_number_is_a_type_error() -> None:
    level = congestion_level("low")
    assert resolve_congestion(level) is level
    with pytest.raises(TypeError) as err:
        resolve_congestion(0.4, owner="simulate")  # type: ignore[arg-type]
    assert isinstance(err.value, ArgumentTypeError)
    assert str(err.value).startswith("simulate.congestion: takes a congestion (a level's name")
    assert str(err.value).endswith("fractions=(0.4,))")


def test_a_request_names_its_cluster_and_congestion_as_the_request_s_fields() -> None:
    trace = default_trace()
    for request, named in (
        (SimRequest(cluster="huge"), "SimRequest.cluster: 'huge' is neither a preset"),
        (SimRequest(congestion="extreme"), "SimRequest.congestion: 'extreme' is neither a level"),
    ):
        with pytest.raises(ConfigError) as err:
            simulate_request(request, trace)
        assert str(err.value).startswith(named)


def test_simulate_takes_names_as_the_command_line_does(tmp_path: Path) -> None:
    """The front door takes a name wherever the command line does, and runs what the objects
    run."""
    trace_file = write_trace(default_trace(), tmp_path / "jobs.csv")
    policy_file = write_user_policies(tmp_path)
    by_name = simulate(trace_file, "small", "tiresias", congestion="medium", max_jobs=40)
    by_object = simulate(
        default_trace(), small(), make_policy("tiresias"), congestion=congestion_level("medium"),
        max_jobs=40,
    )  # fmt: skip
    varies = {"sim_wall_s", "events_per_s", "trace"}  # the trace: a file, and the embedded one
    figures = {k: v for k, v in by_name.result.to_dict().items() if k not in varies}
    assert figures == {k: v for k, v in by_object.result.to_dict().items() if k not in varies}
    user = simulate(default_trace(), "small", f"{policy_file}:Greedy", max_jobs=20)
    assert user.result.policy == "greedy" and user.result.jobs_finished == 20


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"trace": None}, "simulate.trace: takes a Trace or a trace file's path; got None"),
        ({"trace": 7}, "simulate.trace: takes a Trace, a trace file's path, or None"),
        ({"cluster": 32}, "simulate.cluster: takes a cluster topology (a TopologyConfig)"),
        ({"cluster": {"preset": "small"}}, "got dict; topology_from_mapping(mapping) builds one"),
        ({"policy": 3}, "simulate.policy: takes a policy object (name, needs_oracle, decide("),
        ({"congestion": 0.4}, "simulate.congestion: takes a congestion (a level's name"),
    ],
)
def test_a_value_of_the_wrong_type_is_a_type_error_naming_the_argument(
    arguments: dict[str, object], message: str
) -> None:
    given: dict[str, object] = {"trace": default_trace(), "cluster": "small", "policy": "fifo"}
    given.update(arguments)
    with pytest.raises(TypeError) as err:
        simulate(**given, max_jobs=5)  # type: ignore[arg-type]
    assert isinstance(err.value, ConfigError)  # the command line's error handling knows it
    assert message in str(err.value)
