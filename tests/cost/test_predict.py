"""Time and cost of one configuration: arithmetic, GPU scaling, links, data, measured figures."""

from __future__ import annotations

import dataclasses
import math

import pytest

from unstall.cost.catalog import Instance
from unstall.cost.predict import (
    MEASURED,
    MEASURED_SCALED,
    MODELLED,
    JobModel,
    TrainingConfig,
    batch_split,
    instance_topology,
    job_from_model,
    job_from_profile,
    predict,
    predict_all,
)
from unstall.errors import ConfigError
from unstall.net.device_speeds import compute_time_scale
from unstall.net.topology import CALIBRATED_NETWORK_EFFICIENCY
from unstall.workload.perf import JobPerfSpec, Placement, iteration_time
from unstall.workload.profiles import JobProfile


def make_instance(name: str, gpus: int, gpu: str = "v100", **fields: object) -> Instance:
    values: dict[str, object] = dict(
        instance=name,
        gpus=gpus,
        gpu=gpu,
        gpu_memory_gb=16.0,
        gpu_link="none" if gpus == 1 else "nvlink2",
        network_gbps=25.0,
        usd_per_hour=3.0 * gpus,
        date="2026-11",
        source="test",
    )
    values.update(fields)
    return Instance(**values)  # type: ignore[arg-type]


SPEC = JobPerfSpec(name="job", device="v100", compute_s=0.1, local_batch=32, gradient_bytes=100e6)
ONE_V100 = make_instance("v.1", 1)
EIGHT_V100 = make_instance("v.8", 8)
TRAINING = TrainingConfig(samples=32_000, epochs=2)  # 1,000 samples of 32 per epoch on one GPU


def test_one_gpu_is_compute_only_and_the_arithmetic_is_exact() -> None:
    p = predict(JobModel(spec=SPEC), ONE_V100, 1, TRAINING)
    assert p is not None
    assert (p.gpus, p.local_batch, p.global_batch, p.iterations) == (1, 32, 32, 2000)
    assert p.iteration_s == pytest.approx(0.1) and p.exposed_comm_s == 0.0
    assert p.predicted_hours == pytest.approx(2000 * 0.1 / 3600)
    assert p.predicted_cost_usd == pytest.approx(p.predicted_hours * 3.0)
    assert (p.source, p.slowest_link, p.label) == (MODELLED, "none", "1 x v.1")


def test_iterations_round_up_per_epoch_and_cost_counts_every_instance() -> None:
    training = TrainingConfig(samples=1000, epochs=3)
    unbilled = dataclasses.replace(EIGHT_V100, min_billed_s=0.0)  # the arithmetic, no minimum
    p = predict(JobModel(spec=SPEC), unbilled, 2, training)
    assert p is not None
    assert p.global_batch == 32 * 16
    assert p.iterations == 3 * math.ceil(1000 / 512)
    assert p.usd_per_hour == 2 * 24.0
    assert p.predicted_cost_usd == pytest.approx(p.predicted_hours * 48.0)


def test_every_instance_is_billed_its_minimum_however_short_the_run() -> None:
    tiny = TrainingConfig(samples=1000, epochs=1)  # seconds of training
    p = predict(JobModel(spec=SPEC), EIGHT_V100, 2, tiny)
    assert p is not None and p.predicted_hours * 3600 < 60
    assert EIGHT_V100.min_billed_s == 60.0  # the clouds' one-minute minimum, by default
    assert p.predicted_cost_usd == pytest.approx(48.0 / 60)  # two instances, a minute each
    long = predict(JobModel(spec=SPEC), EIGHT_V100, 2, TrainingConfig(samples=3_200_000, epochs=1))
    assert long is not None and long.predicted_hours * 3600 > 60
    assert long.predicted_cost_usd == pytest.approx(long.predicted_hours * 48.0)  # no effect


def test_an_instance_is_one_node_of_its_gpus_with_its_network() -> None:
    inst = make_instance("v.8", 8, network_gbps=100.0, network_latency_us=7.0)
    topo = instance_topology(inst, 3)
    assert (topo.racks, topo.n_nodes, topo.gpus_per_node, topo.device) == (1, 3, 8, "v100")
    assert (topo.nic.bandwidth_gbps, topo.nic.latency_us) == (100.0, 7.0)
    assert topo.network_efficiency == CALIBRATED_NETWORK_EFFICIENCY
    assert topo.intra_spec.bandwidth_gbps == 1200.0  # nvlink2
    p = predict(JobModel(spec=SPEC), inst, 3, TRAINING)
    expected = iteration_time(SPEC, Placement((8, 8, 8)), topo)
    assert p is not None and p.iteration_s == expected.total_s
    assert p.slowest_link == "network"


def test_compute_scales_between_gpu_types_by_the_device_presets() -> None:
    a100 = make_instance("a.1", 1, gpu="a100")
    p = predict(JobModel(spec=SPEC), a100, 1, TRAINING)
    assert p is not None
    assert p.iteration_s == pytest.approx(0.1 * compute_time_scale("v100", "a100"))


def test_a_faster_network_or_gpu_link_never_slows_a_configuration() -> None:
    job = JobModel(spec=SPEC)
    slow = predict(job, make_instance("s", 8, gpu_link="pcie3", network_gbps=10.0), 4, TRAINING)
    fast = predict(job, make_instance("f", 8, gpu_link="nvlink2", network_gbps=100.0), 4, TRAINING)
    assert slow is not None and fast is not None
    assert fast.iteration_s < slow.iteration_s
    assert slow.compute_s == fast.compute_s


def test_the_input_pipeline_bounds_the_iteration_when_it_is_slower() -> None:
    job = JobModel(spec=dataclasses.replace(SPEC, data_s=0.5))
    p = predict(job, ONE_V100, 1, TRAINING)
    assert p is not None and p.iteration_s == 0.5 and p.data_s == 0.5


def test_a_fixed_global_batch_is_split_over_the_gpus() -> None:
    training = TrainingConfig(samples=10_000, epochs=1, global_batch=256)
    assert batch_split(32, 8, training) == (32, 256)
    assert batch_split(32, 3, training) == (86, 256)
    assert batch_split(32, 512, training) is None
    job = JobModel(spec=dataclasses.replace(SPEC, data_s=0.01))
    p = predict(job, EIGHT_V100, 2, training)
    assert p is not None
    assert (p.local_batch, p.global_batch, p.iterations) == (16, 256, math.ceil(10_000 / 256))
    assert p.compute_s == pytest.approx(SPEC.compute_at(16))
    assert p.data_s == pytest.approx(0.005)
    few = TrainingConfig(samples=100, epochs=1, global_batch=4)
    assert predict(job, EIGHT_V100, 1, few) is None
    assert [q.label for q in predict_all(job, [ONE_V100, EIGHT_V100], few)] == [
        f"{n} x v.1" for n in range(1, 5)
    ]


PROFILE = JobProfile(
    model="vggish",
    device="v100",
    compute_s=0.2,
    local_batch=32,
    gradient_bytes=500_000_000,
    gradient_tensors=32,
    layers=16,
    measured={"8": 0.25, "1": 0.2},
)


def test_measured_figures_win_on_their_gpu_type_and_placement() -> None:
    job = job_from_profile(PROFILE)
    one_node = predict(job, EIGHT_V100, 1, TRAINING)
    two_nodes = predict(job, EIGHT_V100, 2, TRAINING)
    assert one_node is not None and two_nodes is not None
    assert (one_node.source, one_node.iteration_s) == (MEASURED, 0.25)
    assert one_node.modelled_iteration_s != 0.25  # the model's own figure is kept beside it
    assert one_node.predicted_hours == pytest.approx(
        125 * 2 * 0.25 / 3600
    )  # 32,000 / 256 per epoch
    assert two_nodes.source == MODELLED  # "88" was not measured


def test_a_measured_figure_on_another_gpu_type_is_scaled_by_the_model() -> None:
    job = job_from_profile(PROFILE)
    a100 = make_instance("a.8", 8, gpu="a100", gpu_link="nvswitch")
    p = predict(job, a100, 1, TRAINING)
    assert p is not None and p.source == MEASURED_SCALED
    topo = instance_topology(a100, 1)
    on_v100 = iteration_time(job.spec, Placement((8,)), dataclasses.replace(topo, device="v100"))
    ratio = p.modelled_iteration_s / on_v100.total_s
    assert ratio < 1.0  # an A100 computes faster
    assert p.iteration_s == pytest.approx(0.25 * ratio)


def test_measured_figures_do_not_apply_at_another_local_batch() -> None:
    job = job_from_profile(PROFILE)
    training = TrainingConfig(samples=32_000, epochs=1, global_batch=128)
    p = predict(job, EIGHT_V100, 1, training)
    assert p is not None and p.local_batch == 16 and p.source == MODELLED


def test_profile_placement_keys_are_made_canonical() -> None:
    profile = dataclasses.replace(PROFILE, measured={"8.8": 0.5})
    assert job_from_profile(profile).measured == {"88": 0.5}
    with pytest.raises(ConfigError, match="canonical"):
        JobModel(spec=SPEC, measured={"8.8": 0.5})


def test_a_zoo_model_is_estimated_on_each_gpu_type_and_fp16_is_faster() -> None:
    job = job_from_model("resnet18", ["v100", "t4"])
    assert set(job.per_device) == {"v100", "t4"} and job.spec.device == "v100"
    assert job.spec_on("t4").compute_s > job.spec_on("v100").compute_s
    half = job_from_model("resnet18", ["v100"], precision="fp16")
    assert half.spec.compute_s < job.spec.compute_s
    assert half.spec.fixed_compute_s == job.spec.fixed_compute_s  # the overhead does not shrink
    with pytest.raises(ConfigError, match="precision"):
        job_from_model("resnet18", ["v100"], precision="int8")


def test_one_device_name_alone_is_one_device_not_its_letters() -> None:
    job = job_from_model("resnet18", "v100")
    assert set(job.per_device) == {"v100"}
    assert job_from_model("resnet18", ["V100", "v100"]).per_device.keys() == {"v100"}


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        (["x100"], r"job_from_model\.devices: unknown device 'x100'; known: \['a100'"),
        ([], r"job_from_model\.devices: must name at least one device"),
        (None, r"job_from_model\.devices: must be GPU preset names .*got NoneType"),
    ],
)
def test_bad_devices_name_job_from_models_parameter(devices: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        job_from_model("resnet18", devices)  # type: ignore[arg-type]


def test_an_unknown_model_names_job_from_models_parameter_not_a_trace() -> None:
    with pytest.raises(ConfigError) as info:
        job_from_model("resnet5", ["v100", "t4"])
    assert (info.value.owner, info.value.field) == ("job_from_model", "name")
    assert "unknown model 'resnet5' (did you mean 'resnet50'?); known: [" in str(info.value)
    assert "trace" not in str(info.value) and "sim run" not in str(info.value)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"samples": 0}, "samples"),
        ({"epochs": 0.0}, "epochs"),
        ({"epochs": math.inf}, "epochs"),
        ({"global_batch": 0}, "global_batch"),
        ({"global_batch": 11}, "global_batch"),
        ({"network_efficiency": 1.5}, "network_efficiency"),
    ],
)
def test_training_config_names_the_bad_field(fields: dict[str, object], field: str) -> None:
    values: dict[str, object] = {"samples": 10, "epochs": 1.0, **fields}
    with pytest.raises(ConfigError, match=rf"TrainingConfig\.{field}"):
        TrainingConfig(**values)  # type: ignore[arg-type]


CPU_PROFILE = JobProfile(
    model="mine",
    device="cpu",
    compute_s=0.5,
    local_batch=16,
    gradient_bytes=4_000_000,
    gradient_tensors=8,
    layers=4,
    data_s=0.01,
    measured={"1": 0.5, "2": 0.9},
    device_name="Some CPU",
    device_tflops=0.2,
)


def test_a_cpu_profile_is_converted_to_each_gpu_by_flop_rates_and_says_so() -> None:
    job = job_from_profile(CPU_PROFILE, devices=["v100", "t4"])
    # The CPU's measured matmul rate over each GPU's fp32 peak (15.7 and 8.1 TFLOP/s).
    assert job.spec_on("v100").compute_s == pytest.approx(0.5 * 0.2 / 15.7)
    assert job.spec_on("t4").compute_s == pytest.approx(0.5 * 0.2 / 8.1)
    assert job.spec_on("t4").data_s == pytest.approx(0.01)  # the host's CPU feeds it either way
    assert job.measured == {}  # CPU and gloo times are no GPU's
    assert "v100 x0.0127" in job.origin and "t4 x0.0247" in job.origin
    assert "Some CPU" in job.origin
    training = TrainingConfig(samples=16_000, epochs=1)
    p = predict(job, EIGHT_V100, 1, training)
    assert p is not None and p.source == MODELLED


def test_a_cpu_profile_without_gpus_or_in_fp16_or_without_its_rate_is_refused() -> None:
    with pytest.raises(ConfigError, match="needs the GPU types"):
        job_from_profile(CPU_PROFILE)
    with pytest.raises(ConfigError, match="ran in fp32, not fp16"):
        job_from_profile(CPU_PROFILE, precision="fp16", devices=["v100"])
    bare = dataclasses.replace(CPU_PROFILE, device_tflops=None)
    with pytest.raises(ConfigError, match="no measured FLOP rate"):
        job_from_profile(bare, devices=["v100"])


def test_a_cpu_profile_takes_one_gpu_name_alone_too() -> None:
    job = job_from_profile(CPU_PROFILE, devices="v100")
    assert set(job.per_device) == {"v100"} and job.spec.device == "v100"
    with pytest.raises(ConfigError, match=r"job_from_profile\.devices: unknown device 'x100'"):
        job_from_profile(CPU_PROFILE, devices=["x100"])


def test_measured_figures_win_over_the_family_speeds_and_are_scaled_by_them() -> None:
    # A ResNet-50 measured on one H100: its own figure on H100 instances, whatever the table
    # says; on A100 instances scaled by ResNet-50's H100/A100 speed ratio, not by a generic one.
    profile = dataclasses.replace(
        PROFILE, model="resnet50", device="h100", compute_s=0.09, measured={"1": 0.1}
    )
    job = job_from_profile(profile)
    assert job.spec.family == "resnet50"
    on_h100 = predict(job, make_instance("h.1", 1, gpu="h100"), 1, TRAINING)
    assert on_h100 is not None and (on_h100.source, on_h100.iteration_s) == (MEASURED, 0.1)
    on_a100 = predict(job, make_instance("a.1", 1, gpu="a100"), 1, TRAINING)
    assert on_a100 is not None and on_a100.source == MEASURED_SCALED
    conv = compute_time_scale("h100", "a100", family="resnet50")
    assert on_a100.iteration_s == pytest.approx(0.1 * conv)
    lm = job_from_profile(dataclasses.replace(profile, model="lstm_lm"))
    on_a100_lm = predict(lm, make_instance("a.1", 1, gpu="a100"), 1, TRAINING)
    assert on_a100_lm is not None and on_a100_lm.iteration_s != pytest.approx(0.1 * conv)
