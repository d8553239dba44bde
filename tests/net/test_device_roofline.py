"""The step-time roofline: its formula, its fit, its held-out judgement and where it is used."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest

from unstall.errors import ConfigError
from unstall.net.device_fit import (
    GAVEL_DEVICES,
    ThroughputPoint,
    gavel_step,
    held_out_errors,
)
from unstall.net.device_roofline import (
    GpuFigures,
    MeasuredStep,
    RooflineModel,
    StepFeatures,
    fit_roofline,
)
from unstall.net.device_speeds import compute_time_scale, relative_speed, speed_table
from unstall.net.gavel_models import GAVEL_MODELS

FIGURES = {d: GpuFigures.datasheet(d) for d in GAVEL_DEVICES}
TRUE = RooflineModel(
    figures=FIGURES,
    launch_s=1.5e-4,
    efficiency={"k80": 0.25, "p100": 0.45, "v100": 0.4},
    winograd={"k80": 1.0, "p100": 2.0, "v100": 2.5},
    memory_passes=20.0,
    tensor_s=3e-4,
)


def synthetic_steps() -> list[StepFeatures]:
    """Jobs from host-bound to compute-bound, with and without 3x3 convolutions."""
    return [
        StepFeatures(
            flops=flops, weight_bytes=wb, layer_calls=calls, winograd_share=share, param_tensors=n
        )
        for flops, wb, calls, share, n in itertools.product(
            (1e9, 3e10, 1e12), (4e6, 4e8), (5, 500), (0.0, 0.9), (4, 300)
        )
    ]


def test_step_time_is_the_soft_maximum_of_host_and_gpu_time() -> None:
    step = StepFeatures(
        flops=2e12, weight_bytes=1e8, layer_calls=100, winograd_share=0.5, param_tensors=50
    )
    v100 = FIGURES["v100"]
    host = 100 * 1.5e-4 + 50 * 3e-4
    gpu = 2e12 * (0.5 + 0.5 / 2.5) / (v100.fp32_flops * 0.4) + 20 * 1e8 / v100.memory_bytes_s
    assert TRUE.host_time(step) == pytest.approx(host)
    assert TRUE.gpu_time("v100", step) == pytest.approx(gpu)
    assert TRUE.step_time("v100", step) == pytest.approx((host**4 + gpu**4) ** 0.25)
    # equal streams cost 2^(1/4) of one; one stream far ahead hides the other
    assert TRUE.overlap_power == 4.0
    even = dataclasses.replace(TRUE, tensor_s=0.0, launch_s=gpu / 100)
    assert even.step_time("v100", step) == pytest.approx(gpu * 2**0.25)
    hidden = dataclasses.replace(TRUE, tensor_s=0.0, launch_s=gpu / 1e4)
    assert hidden.step_time("v100", step) == pytest.approx(gpu, rel=1e-7)
    # no overlap at all (k = 1): the two streams add up
    serial = dataclasses.replace(TRUE, overlap_power=1.0)
    assert serial.step_time("v100", step) == pytest.approx(host + gpu)
    assert v100.fp32_flops == 15.7e12 and v100.memory_bytes_s == 900e9  # the datasheet's
    speeds = TRUE.speeds(step, "v100")
    assert speeds["v100"] == 1.0
    assert speeds["k80"] == pytest.approx(
        TRUE.step_time("v100", step) / TRUE.step_time("k80", step)
    )


def test_host_bound_steps_differ_less_between_gpus_than_large_ones() -> None:
    launch_bound = StepFeatures(flops=1e8, weight_bytes=1e6, layer_calls=500, param_tensors=200)
    compute_bound = StepFeatures(flops=1e13, weight_bytes=1e8, layer_calls=50, winograd_share=0.9)
    small, large = TRUE.speeds(launch_bound, "v100"), TRUE.speeds(compute_bound, "v100")
    assert 1 / small["k80"] < 3.0 < 6.0 < 1 / large["k80"]


def test_the_fit_recovers_known_constants_from_synthetic_step_times() -> None:
    measured = [
        MeasuredStep(step=s, seconds={d: TRUE.step_time(d, s) for d in GAVEL_DEVICES})
        for s in synthetic_steps()
    ]
    fitted = fit_roofline(measured)
    for d in GAVEL_DEVICES:
        assert fitted.efficiency[d] == pytest.approx(TRUE.efficiency[d], rel=1e-3)
        assert fitted.winograd[d] == pytest.approx(TRUE.winograd[d], rel=1e-3)
    assert fitted.launch_s == pytest.approx(TRUE.launch_s, rel=1e-3)
    assert fitted.memory_passes == pytest.approx(TRUE.memory_passes, rel=1e-3)
    assert fitted.tensor_s == pytest.approx(TRUE.tensor_s, rel=1e-3)
    assert fitted.overlap_power == TRUE.overlap_power  # fixed, not fitted


def test_features_and_constants_are_validated() -> None:
    with pytest.raises(ConfigError, match="winograd_share"):
        StepFeatures(flops=1.0, weight_bytes=0.0, layer_calls=1, winograd_share=1.5)
    with pytest.raises(ConfigError, match="flops"):
        StepFeatures(flops=0.0, weight_bytes=0.0, layer_calls=1)
    with pytest.raises(ConfigError, match="efficiency"):
        dataclasses.replace(TRUE, efficiency={**TRUE.efficiency, "k80": 1.5})
    with pytest.raises(ConfigError, match="winograd"):
        dataclasses.replace(TRUE, winograd={"k80": 1.0})
    with pytest.raises(ConfigError, match="device"):
        TRUE.step_time("h100", StepFeatures(flops=1.0, weight_bytes=0.0, layer_calls=1))
    with pytest.raises(ConfigError, match="overlap_power"):
        dataclasses.replace(TRUE, overlap_power=0.5)
    with pytest.raises(ConfigError, match="param_tensors"):
        StepFeatures(flops=1.0, weight_bytes=0.0, layer_calls=1, param_tensors=-1)
    with pytest.raises(ConfigError, match="at least 3"):
        fit_roofline([])
    step = StepFeatures.of_model(forward_flops=2e9, params=1e6, layer_calls=10, batch=32)
    assert step.flops == 3 * 2e9 * 32 and step.weight_bytes == 4e6


def gavel_like_points() -> list[ThroughputPoint]:
    """Gavel's job types with throughputs from the true roofline, times a family's own factor
    (what the roofline cannot know), so that no fit is exact."""
    quirk = {"resnet18": 1.3, "resnet50": 0.9, "transformer": 1.1, "lm": 0.8, "a3c": 1.2}
    points = []
    for family, batch in [
        ("resnet18", 64),
        ("resnet18", 256),
        ("resnet50", 32),
        ("resnet50", 128),
        ("transformer", 32),
        ("transformer", 128),
        ("lm", 20),
        ("lm", 80),
        ("a3c", None),
    ]:
        step = GAVEL_MODELS[family].step(batch)
        rates = {
            d: 1 / (TRUE.step_time(d, step) * (quirk[family] if d != "v100" else 1.0))
            for d in GAVEL_DEVICES
        }
        points.append(ThroughputPoint(family=family, batch=batch, throughput=rates))
    return points


def test_leave_one_family_out_never_sees_the_held_out_familys_measurements() -> None:
    points = gavel_like_points()
    before = held_out_errors(points, "roofline")
    # Make the LM's K80 measurements absurd: the LM's predictions must not move (they come from
    # the other families' measurements and the LM's features only).
    wild = [
        dataclasses.replace(
            p, throughput={d: r * (50.0 if d == "k80" else 1.0) for d, r in p.throughput.items()}
        )
        if p.family == "lm"
        else p
        for p in points
    ]
    after = held_out_errors(wild, "roofline")
    pairs = list(zip(before, after, strict=True))
    for b, a in pairs:
        if b.family == "lm":
            assert a.predicted == pytest.approx(b.predicted, rel=1e-9)
        else:
            assert a.measured == b.measured
    # the LM's measurements changed, and the other families' fits learned from them
    assert any(a.measured != b.measured for b, a in pairs if b.family == "lm")
    assert any(abs(a.predicted / b.predicted - 1) > 1e-3 for b, a in pairs if b.family != "lm")


@pytest.mark.parametrize("method", ["roofline", "leave-one-family-out", "leave-one-batch-out"])
def test_families_fitted_without_are_never_learned_from(method: str) -> None:
    points = gavel_like_points()
    out = frozenset({"lm"})
    wild = [
        dataclasses.replace(
            p, throughput={d: r * (1 + 3 * i) for i, (d, r) in enumerate(p.throughput.items())}
        )
        if p.family == "lm"
        else p
        for p in points
    ]
    before = held_out_errors(points, method, fit_without=out)
    after = held_out_errors(wild, method, fit_without=out)
    others = [(b, a) for b, a in zip(before, after, strict=True) if b.family != "lm"]
    assert [a.predicted for _, a in others] == pytest.approx([b.predicted for b, _ in others])
    # without fit_without the LM's measurements do move other families' predictions (in the
    # leave-one-batch-out method only A3C's: measured at one batch size, it falls back on the
    # other families)
    moved = held_out_errors(wild, method)
    rest = [(b, m) for b, m in zip(before, moved, strict=True) if b.family != "lm"]
    assert any(abs(m.predicted / b.predicted - 1) > 1e-3 for b, m in rest)


def test_gavel_steps_come_from_the_architectures() -> None:
    a3c = gavel_step(ThroughputPoint(family="a3c", batch=None, throughput={"v100": 1.0}))
    assert a3c.layer_calls == 4 * 20 * 7 and a3c.flops == pytest.approx(3 * 4 * 20 * 117.7e6)
    assert a3c.param_tensors == 4 * 16
    r50 = gavel_step(ThroughputPoint(family="resnet50", batch=64, throughput={"v100": 1.0}))
    assert r50.flops == pytest.approx(3 * 8.18e9 * 64)
    # CNNs built of 3x3 convolutions and models without convolutions
    assert GAVEL_MODELS["cyclegan"].winograd_share > 0.85
    assert GAVEL_MODELS["lm"].winograd_share == 0.0
    assert all(m.source for m in GAVEL_MODELS.values())


def test_gavel_resnet50_matches_the_zoos_layer_level_count() -> None:
    from unstall.workload import zoo

    facts = zoo.facts("resnet50")
    model = GAVEL_MODELS["resnet50"]
    assert model.forward_flops == pytest.approx(facts.flops_per_sample, rel=0.01)
    assert model.params == pytest.approx(facts.params, rel=0.01)
    assert model.layer_calls == facts.layers
    assert model.param_tensors == facts.gradient_tensors
    share = facts.winograd_flops_per_sample / facts.flops_per_sample
    assert model.winograd_share == pytest.approx(share, abs=0.01)


def test_gavel_counts_of_parameter_tensors_match_the_zoos_where_the_zoo_has_the_model() -> None:
    from unstall.workload import zoo

    # the zoo's ResNet-18 has the ImageNet stem, but the same convolutions, BatchNorms and fc
    cifar = zoo.facts("resnet18", image_size=32, num_classes=10)
    assert GAVEL_MODELS["resnet18"].param_tensors == cifar.gradient_tensors == 62
    assert GAVEL_MODELS["resnet18"].layer_calls == cifar.layers
    # an untied 2-layer LSTM LM: embedding, 4 per LSTM layer, decoder weight and bias
    lm = zoo.facts("lstm_lm", embed_dim=200, hidden=200, tie_weights=False, vocab=33278)
    assert GAVEL_MODELS["lm"].param_tensors == lm.gradient_tensors
    assert GAVEL_MODELS["lm"].params == pytest.approx(lm.params, rel=0.01)


def test_device_speeds_use_the_roofline_only_outside_the_fitted_families() -> None:
    table = speed_table()
    assert table.roofline is not None and set(table.roofline.devices) == set(GAVEL_DEVICES)
    small = StepFeatures(flops=1e9, weight_bytes=1e6, layer_calls=200)
    large = StepFeatures(flops=1e13, weight_bytes=1e8, layer_calls=50, winograd_share=0.9)
    # a fitted family keeps its fitted speed whatever the step
    assert relative_speed("k80", "resnet50", step=small) == table.families["resnet50"]["k80"]
    # no fitted family: the roofline for the step; no step: the median family
    assert relative_speed("k80", None, step=small) == table.roofline.speeds(small, "v100")["k80"]
    assert relative_speed("k80", "recommendation", step=large) < relative_speed("k80", step=small)
    assert relative_speed("k80") == table.generic["k80"]
    assert relative_speed("v100", None, step=small) == 1.0
    # GPUs with public figures keep them
    assert relative_speed("a100", None, step=small) == relative_speed("a100")
    scale = compute_time_scale("k80", "p100", step=large)
    speeds = table.roofline.speeds(large, "v100")
    assert scale == pytest.approx(speeds["k80"] / speeds["p100"])
    assert math.isfinite(scale)


def test_held_out_fits_use_the_overlap_power_they_are_given() -> None:
    points = gavel_like_points()
    shipped = held_out_errors(points, "roofline")
    added = held_out_errors(points, "roofline", overlap_power=1.0)
    assert [e.measured for e in shipped] == [e.measured for e in added]
    pairs = zip(shipped, added, strict=True)
    assert any(abs(a.predicted / s.predicted - 1) > 1e-3 for s, a in pairs)
    # k = 1 is the two streams added: the fit then recovers a model without overlap
    exact = [
        MeasuredStep(
            step=s, seconds={d: TRUE.host_time(s) + TRUE.gpu_time(d, s) for d in GAVEL_DEVICES}
        )
        for s in synthetic_steps()
    ]
    assert fit_roofline(exact, overlap_power=1.0).tensor_s == pytest.approx(3e-4, rel=1e-3)
