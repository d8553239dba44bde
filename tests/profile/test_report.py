"""build_report on raw timings with known injected delays: stalls, profile, overhead, trace."""

from __future__ import annotations

import json

import pytest

from unstall.errors import ConfigError
from unstall.net.link import Link
from unstall.profile.config import InjectedDelays, ProfileConfig
from unstall.profile.job import ModelShape, model_shape
from unstall.profile.report import StallReport, build_report
from unstall.profile.runner import RawTimings
from unstall.workload import zoo
from unstall.workload.profiles import JobProfile

SHAPE = ModelShape(
    parameter_bytes=5000,
    gradient_bytes=4000,
    gradient_tensors=4,
    layers=2,
    tensor_bytes=(1000,) * 4,
)


def _report(config: ProfileConfig, raw: RawTimings, shape: ModelShape = SHAPE) -> StallReport:
    return build_report(config, raw, model="m", model_options={}, shape=shape)


def test_report_from_known_delays() -> None:
    c = 0.100  # compute; then +fetch 0.03, +prep 0.02, +interconnect 0.05, +network 0.2
    raw = RawTimings(
        runs={
            "compute": [c + 0.004, c, c - 0.001],
            "compute_untimed": [c * 0.99, c * 0.99, c * 0.99],
            "local_untimed": [c + 0.05, c + 0.06, c + 0.04],
            "cached": [c, c, c],
            "warm": [c + 0.02] * 3,
            "cold": [c + 0.05, c + 0.05, c + 0.06],
            "local": [c + 0.05] * 3,
            "network": [c + 0.25] * 3,
        },
        phases={"local": {"forward": [0.03, 0.03, 0.04], "backward": [0.07] * 3}},
        trace=[{"name": "forward", "start_s": 1.0, "end_s": 1.5}],
        emulated_delay_s=[0.21, 0.2, 0.22],
        batch=8,
    )
    config = ProfileConfig(workers=2, network=Link(bandwidth_gbps=1.0), measure_overhead=True)
    shape = model_shape(lambda: zoo.build("resnet18", image_size=32))
    r = build_report(config, raw, model="resnet18", model_options={"image_size": 32}, shape=shape)
    assert r.compute_s == pytest.approx(c)
    assert r.fetch_stall_s == pytest.approx(0.03)
    assert r.prep_stall_s == pytest.approx(0.02)
    assert r.interconnect_stall_s == pytest.approx(0.05)
    assert r.network_stall_s == pytest.approx(0.2)
    assert r.fractions["network_stall_s"] == pytest.approx(0.2 / 0.4)
    assert r.runs["compute"].max_s == pytest.approx(c + 0.004)
    assert r.phases["local"]["forward"] == pytest.approx(0.03)
    # Paired per round: timed / untimed - 1 = (c + 0.004) / 0.99c - 1, c / 0.99c - 1, ...
    assert r.profiler_overhead_samples is not None and r.profiler_overhead is not None
    assert r.profiler_overhead_samples["compute"][0] == pytest.approx((c + 0.004) / (0.99 * c) - 1)
    assert r.profiler_overhead["compute"] == pytest.approx(1 / 0.99 - 1)
    assert r.profiler_overhead["local"] == pytest.approx(0.0)  # ratios 0, -0.0625, +0.0714
    assert "local_untimed" not in r.raw_differences and r.interconnect_stall_s > 0
    assert r.emulated_delay_s == pytest.approx(0.21)
    # The model's facts as the zoo counts them (the same module, measured on the meta device).
    facts = zoo.facts("resnet18", image_size=32)
    p = r.job_profile
    assert (p.gradient_bytes, p.layers, p.local_batch) == (facts.gradient_bytes, facts.layers, 8)
    assert p.gradient_tensors == facts.gradient_tensors
    assert shape.tensor_bytes == tuple(t.bytes for t in facts.tensors)
    assert p.data_s == pytest.approx(0.05)
    assert p.measured == pytest.approx({"1": c, "2": c + 0.05, "11": c + 0.25})
    assert JobProfile.from_json(p.to_json()) == p  # what sim and recommend read
    forward = [e for e in r.chrome_trace()["traceEvents"] if e["name"] == "forward"]
    assert [e["dur"] for e in forward] == pytest.approx([5e5])
    # JSON: the link in the command line's units, the labels as given.
    data = json.loads(r.to_json())
    assert data["network"] == {"gbps": 1.0, "latency_ms": 0.0}
    labels = (data["model"], data["model_options"], data["batch"])
    assert labels == ("resnet18", {"image_size": 32}, 8)


def test_a_cpu_run_is_labelled_cpu_with_its_name_and_rate() -> None:
    raw = RawTimings(
        runs={"compute": [0.1], "local": [0.12]},
        batch=8,
        device_name="Some CPU 9000",
        device_tflops=0.5,
    )
    r = _report(ProfileConfig(), raw)
    p = r.job_profile
    assert (r.device, r.device_name) == ("cpu", "Some CPU 9000")
    assert (p.device, p.device_name, p.device_tflops) == ("cpu", "Some CPU 9000", 0.5)
    assert (p.parameter_bytes, p.gradient_bytes) == (5000, 4000)
    assert JobProfile.from_json(p.to_json()) == p
    with pytest.raises(ConfigError, match="measured on a CPU"):
        p.to_perf_spec()  # never silently a GPU's timings


def test_a_gpu_run_is_labelled_with_its_preset_or_the_one_given() -> None:
    raw = RawTimings(runs={"compute": [0.1]}, batch=8, device_name="NVIDIA H100 80GB HBM3")
    assert _report(ProfileConfig(device="cuda", workers=1), raw).job_profile.device == "h100"
    h200 = RawTimings(runs={"compute": [0.1]}, batch=8, device_name="NVIDIA H200")
    assert _report(ProfileConfig(device="cuda", workers=1), h200).job_profile.device == "h200"
    unknown = RawTimings(runs={"compute": [0.1]}, batch=8, device_name="NVIDIA GeForce RTX 4090")
    with pytest.raises(
        ConfigError, match=r"'NVIDIA GeForce RTX 4090' is none of the device presets"
    ):
        _report(ProfileConfig(device="cuda", workers=1), unknown)
    named = ProfileConfig(device="cuda", workers=1, profile_device="h100")
    assert _report(named, unknown).job_profile.device == "h100"


def test_config_errors_name_the_field() -> None:
    with pytest.raises(ConfigError, match="profile_device: a CPU run is labelled cpu"):
        ProfileConfig(profile_device="k80")
    with pytest.raises(ConfigError, match="profile_device"):
        ProfileConfig(device="cuda", profile_device="cpu")
    with pytest.raises(ConfigError, match="workers"):
        ProfileConfig(workers=0)
    with pytest.raises(ConfigError, match="network"):
        ProfileConfig(network=1.0)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        InjectedDelays(prep_s=-1.0)


def test_the_config_is_json_with_the_link_in_the_command_lines_units() -> None:
    saved = ProfileConfig(network=Link(bandwidth_gbps=10.0, latency_us=250.0)).to_dict()
    assert saved["network"] == {"gbps": 10.0, "latency_ms": 0.25}
    assert saved["delays"] == {"compute_s": 0.0, "fetch_s": 0.0, "prep_s": 0.0, "allreduce_s": 0.0}
    assert ProfileConfig().to_dict()["network"] is None


def test_placements_across_real_hosts() -> None:
    # torchrun on 2 hosts of 2 workers: local = DDP within a host ("2"), network = "22".
    config = ProfileConfig(workers=4, nodes=2)
    raw = RawTimings(runs={"compute": [0.1], "local": [0.12], "network": [0.2]}, batch=8)
    r = _report(config, raw)
    assert r.job_profile.measured == pytest.approx({"1": 0.1, "2": 0.12, "22": 0.2})
    assert r.network_stall_s == pytest.approx(0.08)
    assert r.profiler_overhead is None
    assert r.job_profile.data_s is None
    one_per_host = _report(ProfileConfig(workers=2, nodes=2), raw)
    assert one_per_host.job_profile.measured == pytest.approx({"1": 0.1, "11": 0.2})
    with pytest.raises(ConfigError, match="nodes"):
        ProfileConfig(workers=3, nodes=2)
    with pytest.raises(ConfigError, match="network"):
        ProfileConfig(workers=2, nodes=2, network=Link(bandwidth_gbps=1.0))
