"""JobProfile: JSON round trip, field-named errors, and the perf spec it yields."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from unstall.errors import ConfigError, DataFileError
from unstall.net.topology import small
from unstall.workload import JobProfile, Placement, iteration_time

GOOD = {
    "model": "resnet50",
    "device": "v100",
    "compute_s": 0.3,
    "local_batch": 32,
    "gradient_bytes": 102_000_000,
    "gradient_tensors": 161,
    "layers": 54,
    "data_s": 0.05,
    "measured": {"4": 0.31, "22": 0.45, "1111": 0.7},
}


def test_round_trip_through_text_and_file(tmp_path: Path) -> None:
    profile = JobProfile(**GOOD)  # type: ignore[arg-type]
    assert JobProfile.from_json(profile.to_json()) == profile
    path = profile.save(tmp_path / "sub" / "p.json")
    assert JobProfile.from_json(path) == profile
    assert JobProfile.from_json(str(path)) == profile
    assert json.loads(path.read_text())["measured"]["22"] == 0.45


def test_load_reads_back_what_save_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = JobProfile(**GOOD)  # type: ignore[arg-type]
    path = profile.save(tmp_path / "p.json")
    assert JobProfile.load(path) == profile
    assert JobProfile.load(str(path)) == profile
    with pytest.raises(DataFileError, match=r"gone\.json"):
        JobProfile.load(tmp_path / "gone.json")
    monkeypatch.chdir(tmp_path)
    profile.save("{odd}.json")  # a name that looks like JSON text is still a file's name
    assert JobProfile.load("{odd}.json") == profile


profiles = st.builds(
    JobProfile,
    model=st.sampled_from(["resnet50", "bert", "ncf"]),
    device=st.sampled_from(["v100", "T4", "a100"]),
    compute_s=st.floats(1e-4, 10.0),
    local_batch=st.integers(1, 4096),
    gradient_bytes=st.integers(0, 10**10),
    gradient_tensors=st.integers(1, 1000),
    layers=st.integers(1, 500),
    data_s=st.none() | st.floats(0.0, 5.0),
    measured=st.dictionaries(
        st.text("1234", min_size=1, max_size=4), st.floats(1e-4, 100.0), max_size=5
    ),
    comm=st.sampled_from(["allreduce", "ps"]),
    overlap=st.floats(0.0, 1.0),
)


@settings(max_examples=100, deadline=None)
@given(profiles)
def test_any_valid_profile_round_trips(profile: JobProfile) -> None:
    assert JobProfile.from_json(profile.to_json()) == profile


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"compute_s": 0}, "compute_s"),
        ({"compute_s": "fast"}, "compute_s"),
        ({"local_batch": 1.5}, "local_batch"),
        ({"gradient_bytes": -1}, "gradient_bytes"),
        ({"gradient_tensors": 0}, "gradient_tensors"),
        ({"layers": True}, "layers"),
        ({"device": "tpu"}, "device"),
        ({"model": ""}, "model"),
        ({"data_s": -0.1}, "data_s"),
        ({"measured": {"2x": 0.3}}, "measured.2x"),
        ({"measured": {"22": 0}}, "measured.22"),
        ({"measured": [1, 2]}, "measured"),
        ({"comm": "gossip"}, "comm"),
        ({"overlap": 2}, "overlap"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_errors_name_field_and_file(tmp_path: Path, change: dict, field: str) -> None:  # type: ignore[type-arg]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**GOOD, **change}))
    with pytest.raises(DataFileError) as info:
        JobProfile.from_json(path)
    assert info.value.field == field and info.value.path == str(path)


def test_a_measured_time_keyed_by_a_number_is_named() -> None:
    """From Python, ``{4: 0.3}`` was taken and then never found by the placement string "4"."""
    with pytest.raises(ConfigError) as info:
        JobProfile(**{**GOOD, "measured": {4: 0.3}})
    assert str(info.value) == (
        "JobProfile.measured.4: keys are placement strings like '4' or '22', got 4"
    )


def test_missing_field_bad_json_and_missing_file(tmp_path: Path) -> None:
    body = dict(GOOD)
    del body["layers"]
    with pytest.raises(DataFileError) as info:
        JobProfile.from_json(json.dumps(body))
    assert info.value.field == "layers" and info.value.path == "<text>"
    with pytest.raises(DataFileError, match="not valid JSON"):
        JobProfile.from_json('{"model": ')
    with pytest.raises(DataFileError, match="top level"):
        JobProfile.from_dict([1, 2])
    with pytest.raises(DataFileError, match="no such file"):
        JobProfile.from_json(tmp_path / "nope.json")


def test_to_perf_spec_drives_the_model() -> None:
    profile = JobProfile(**GOOD)  # type: ignore[arg-type]
    spec = profile.to_perf_spec(overlap=0.0)
    assert (spec.name, spec.compute_s, spec.gradient_bytes, spec.data_s) == (
        "resnet50",
        0.3,
        102e6,
        0.05,
    )
    assert spec.overlap == 0.0
    one = iteration_time(spec, Placement.parse("1"), small())
    assert one.total_s == pytest.approx(0.3)
    assert iteration_time(spec, Placement.parse("1111"), small()).total_s > one.total_s
    assert set(profile.measured_placements()) == {Placement.parse(k) for k in ("4", "22", "1111")}


def test_a_cpu_profile_converts_to_a_gpu_only_when_asked() -> None:
    cpu = JobProfile(
        **{**GOOD, "device": "cpu", "device_name": "Some CPU", "device_tflops": 0.157}  # type: ignore[arg-type]
    )
    assert cpu.on_cpu and JobProfile.from_json(cpu.to_json()) == cpu
    with pytest.raises(ConfigError, match="measured on a CPU"):
        cpu.to_perf_spec()
    v100 = cpu.on_gpu("v100")
    assert (v100.device, v100.measured, v100.device_tflops) == ("v100", {}, None)
    assert v100.compute_s == pytest.approx(0.3 * 0.157 / 15.7)
    assert v100.data_s == cpu.data_s and v100.to_perf_spec().device == "v100"
    assert JobProfile(**GOOD).on_gpu("v100") == JobProfile(**GOOD)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="not a CPU"):
        JobProfile(**GOOD).on_gpu("t4")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="parameter_bytes"):
        JobProfile(**{**GOOD, "parameter_bytes": 1})  # type: ignore[arg-type]
