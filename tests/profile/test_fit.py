"""The comm-stall model: DDP's buckets, the bucket model recovering a known law and predicting a
held-out variant, selection picking the form that generated the points, and the resumable
sweep."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from unstall.errors import ConfigError, DataFileError
from unstall.net.link import Link
from unstall.profile.config import ProfileConfig
from unstall.profile.fit import fit_comm_stall
from unstall.profile.job import model_shape
from unstall.profile.laws import CommStallModel, FeatureRegression
from unstall.profile.report import build_report
from unstall.profile.runner import RawTimings
from unstall.profile.select import TIE_TOLERANCE
from unstall.profile.sweep import (
    FIRST_BUCKET_BYTES,
    MIB,
    SweepPoint,
    ddp_bucket_bytes,
    load_points,
    measure_points,
    save_points,
    sweep_point,
)
from unstall.workload import zoo

LAW = CommStallModel(per_bucket_s=1e-3, per_byte_s=8e-9, overlap=0.8)


def test_buckets_follow_ddp() -> None:
    # DDP's own assignment (reverse registration order, 1 MiB then 25 MiB) on resnet18's tensors.
    params: list[torch.Tensor] = list(zoo.build("resnet18", image_size=32).parameters())
    limits = [FIRST_BUCKET_BYTES, 25 * MIB]
    indices, _ = dist._compute_bucket_assignment_by_size(params[::-1], limits)
    expected = tuple(sum(params[::-1][i].numel() * 4 for i in bucket) for bucket in indices)
    sizes = [p.numel() * 4 for p in params]
    assert ddp_bucket_bytes(sizes, cap_bytes=25 * MIB) == expected
    # What a 1-worker DDP reported after rebuilding its buckets (rebuilt_bucket_sizes).
    assert expected == (2_052_000, 28_852_224, 15_853_824)
    assert ddp_bucket_bytes([10, 10, 10], cap_bytes=15, first_cap_bytes=5) == (10, 20)


def _point(
    name: str, buckets: tuple[int, ...], backward_s: float, law: CommStallModel
) -> SweepPoint:
    stall = law.predict(buckets, backward_s)
    return SweepPoint(
        variant=name,
        layers=len(buckets) * 7,
        gradient_tensors=len(buckets) * 20,
        gradient_bytes=sum(buckets),
        bucket_bytes=buckets,
        backward_s=backward_s,
        interconnect_stall_s=stall / 2,
        network_stall_s=stall,
    )


SWEEP = [
    ("mlp-a", (3_000_000,), 0.004),
    ("mlp-b", (4_000_000, 8_000_000), 0.02),
    ("mlp-c", (4_000_000, 24_000_000), 0.04),
    ("resnet-a", (2_000_000, 28_000_000, 16_000_000), 0.09),
    ("resnet-b", (8_000_000, 31_000_000, 26_000_000, 27_000_000, 10_000_000), 0.28),
    ("vgg-a", (16_000_000, 67_000_000, 411_000_000, 28_000_000, 9_000_000), 1.0),
]


def test_bucket_model_recovers_the_law_and_predicts_the_held_out_model() -> None:
    points = [_point(n, b, t, LAW) for n, b, t in SWEEP]
    # Many small tensors, a large backward: its stall is the last bucket, not total - overlap.
    held = _point("mobilenet-like", (5_000_000, 9_000_000), 0.08, LAW)
    assert held.network_stall_s == pytest.approx(1e-3 + 8e-9 * 9_000_000)
    link = Link(bandwidth_gbps=1.0, latency_us=1000.0)
    fit = fit_comm_stall(points, stall="network", held_out=held, link=link)
    bucket = fit.candidate("ddp-buckets")
    assert isinstance(bucket.model, CommStallModel)
    assert bucket.model.per_bucket_s == pytest.approx(1e-3, rel=1e-3)
    assert bucket.model.per_byte_s == pytest.approx(8e-9, rel=1e-3)
    assert bucket.model.overlap == pytest.approx(0.8, rel=1e-3)
    assert bucket.quality.r2 == pytest.approx(1.0, abs=1e-6)
    assert bucket.quality.held_out_rel_error == pytest.approx(0.0, abs=1e-3)
    assert fit.selected == "ddp-buckets"
    assert fit.predict(held) == pytest.approx(held.network_stall_s, rel=1e-3)
    # The emulated link's own coefficients: ring factor 1 for 2 workers, 8 s/GB at 1 Gbit/s.
    assert (fit.link_per_bucket_s, fit.link_per_byte_s) == pytest.approx((1e-3, 8e-9))
    # The plain regression on layers, tensors and bytes cannot see the last-bucket regime.
    assert abs(fit.candidate("regression").quality.held_out_rel_error or 0.0) > 0.2
    interconnect = fit_comm_stall(points, stall="interconnect", link=link)
    assert interconnect.link is None
    assert interconnect.candidate("ddp-buckets").model.to_dict()["per_byte_s"] == pytest.approx(
        4e-9
    )
    comm = fit_comm_stall(points, link=link)  # interconnect + network: 1.5 x the law
    assert comm.stall == "comm" and comm.link == link
    assert comm.to_dict()["link"] == {"gbps": 1.0, "latency_ms": 1.0}
    assert points[0].stall("comm") == pytest.approx(1.5 * points[0].network_stall_s)
    assert comm.candidate("ddp-buckets").model.to_dict()["per_byte_s"] > 1.4 * 8e-9


def test_fit_quality_drops_on_noise_the_model_cannot_explain() -> None:
    points = [_point(n, b, t, LAW) for n, b, t in SWEEP]
    noisy = [
        SweepPoint(**{**p.to_dict(), "network_stall_s": p.network_stall_s * (1 + 0.6 * (-1) ** i)})
        for i, p in enumerate(points)
    ]
    fit = fit_comm_stall(noisy, stall="network", candidates=["ddp-buckets"])
    assert [c.name for c in fit.candidates] == ["ddp-buckets"]
    quality = fit.chosen.quality
    assert quality.mean_abs_rel_error > 0.2
    assert quality.r2 < 0.99
    assert fit.chosen.cross_validation.mean_abs_rel_error > quality.mean_abs_rel_error
    with pytest.raises(ConfigError, match="stall"):
        fit_comm_stall(points, stall="fetch")
    with pytest.raises(ConfigError, match="candidates"):
        fit_comm_stall(points, candidates=["spline"])


# Three zoo models, three depths each; layers and tensors do not follow the buckets, so each
# candidate form has points the others cannot fit: (variant, layers, tensors, buckets, backward).
FAMILIES = [
    ("mlp:depth=2", 2, 4, (3_000_000,), 0.004),
    ("mlp:depth=4", 4, 8, (4_000_000, 8_000_000), 0.02),
    ("mlp:depth=8", 8, 16, (4_000_000, 24_000_000), 0.04),
    ("resnet:depth=18", 21, 62, (2_000_000, 28_000_000, 16_000_000), 0.09),
    ("resnet:depth=34", 37, 110, (2_000_000, 28_000_000, 26_000_000, 27_000_000, 4_000_000), 0.15),
    ("resnet:depth=50", 54, 161, (8_000_000, 31_000_000, 26_000_000, 27_000_000, 10_000_000), 0.28),
    ("vgg:depth=11", 11, 22, (16_000_000, 67_000_000, 411_000_000, 28_000_000, 9_000_000), 1.0),
    ("vgg:depth=13", 13, 26, (16_000_000, 67_000_000, 411_000_000, 29_000_000, 9_500_000), 1.3),
    ("vgg:depth=16", 16, 32, (16_000_000, 67_000_000, 411_000_000, 40_000_000, 9_500_000), 1.6),
]
LAWS: dict[str, CommStallModel | FeatureRegression] = {
    "ddp-buckets": CommStallModel(per_bucket_s=1e-3, per_byte_s=8e-9, overlap=0.8),
    "ddp-buckets-no-overlap": CommStallModel(per_bucket_s=20e-3, per_byte_s=8e-9, overlap=0.0),
    "regression": FeatureRegression(
        intercept_s=5e-3,
        coefficients={"layers": 5e-3, "gradient_tensors": 1e-3, "gradient_bytes": 6e-9},
    ),
}


def _law_points(law: CommStallModel | FeatureRegression) -> list[SweepPoint]:
    points = []
    for variant, layers, tensors, buckets, backward in FAMILIES:
        point = SweepPoint(
            variant=variant,
            layers=layers,
            gradient_tensors=tensors,
            gradient_bytes=sum(buckets),
            bucket_bytes=buckets,
            backward_s=backward,
            interconnect_stall_s=0.0,
            network_stall_s=0.0,
        )
        points.append(replace(point, network_stall_s=law.predict_point(point)))
    return points


@pytest.mark.parametrize("law_name", list(LAWS))
def test_selection_picks_the_form_that_generated_the_points(law_name: str) -> None:
    fit = fit_comm_stall(_law_points(LAWS[law_name]), stall="network")
    errors = {c.name: c.cross_validation.mean_abs_rel_error for c in fit.candidates}
    assert fit.selected == law_name, errors
    assert fit.reason.startswith("leave-one-model-out: ")
    assert all(c.cross_validation.groups == "model" for c in fit.candidates)
    # The true form predicts left-out models well; every form that is not nested in it, badly.
    assert errors[law_name] < 0.05
    nested = {("ddp-buckets-no-overlap", "ddp-buckets")}  # the second can express the first
    rivals = [n for n in LAWS if n != law_name and (law_name, n) not in nested]
    assert all(errors[n] > 0.03 + errors[law_name] for n in rivals), errors
    if law_name == "ddp-buckets-no-overlap":  # nested in ddp-buckets: a tie, the leaner law wins
        assert errors["ddp-buckets"] == pytest.approx(0.0, abs=TIE_TOLERANCE)
        assert "fewest parameters (2)" in fit.reason


def test_sweep_points_come_from_the_report_and_resume_from_the_file(tmp_path: Path) -> None:
    measured: list[str] = []
    config = ProfileConfig(network=Link(bandwidth_gbps=1.0))

    def fake_measure(variant: str) -> SweepPoint:
        measured.append(variant)
        depth = int(variant.rpartition("=")[2])
        raw = RawTimings(
            # The fastest repeats: compute 0.1, local 0.13, network 0.3 (others disturbed).
            runs={
                "compute": [0.1, 0.15, 0.12],
                "local": [0.2, 0.13, 0.2],
                "network": [0.3, 0.4, 0.5],
            },
            phases={"compute": {"backward": [0.06, 0.07, 0.08]}},
            batch=8,
        )
        shape = model_shape(lambda: zoo.build("mlp", depth=depth))
        report = build_report(config, raw, model=variant, model_options={}, shape=shape)
        return sweep_point(variant, report, shape.tensor_bytes, config.bucket_mb)

    path = tmp_path / "points.json"

    def save(point: SweepPoint, points: dict[str, SweepPoint]) -> None:
        save_points(path, points)

    first = measure_points(["mlp:depth=2", "mlp:depth=8"], fake_measure, on_point=save)
    point = first["mlp:depth=8"]
    assert point.network_stall_s == pytest.approx(0.17)
    assert point.interconnect_stall_s == pytest.approx(0.03)
    assert point.backward_s == pytest.approx(0.07)
    facts = zoo.facts("mlp", depth=8)
    assert (point.layers, point.gradient_bytes) == (facts.layers, facts.gradient_bytes)
    assert point.bucket_bytes == ddp_bucket_bytes(
        [t.bytes for t in facts.tensors], cap_bytes=25 * MIB
    )
    assert len(point.bucket_bytes) == 2  # 4.2 MB, then the 24.2 MB rest (as DDP rebuilt them)
    known = load_points(path)
    again = measure_points(["mlp:depth=8", "mlp:depth=4"], fake_measure, known=known, on_point=save)
    assert measured == ["mlp:depth=2", "mlp:depth=8", "mlp:depth=4"]  # depth 8 was read back
    assert again["mlp:depth=8"] == point
    assert set(load_points(path)) == {"mlp:depth=2", "mlp:depth=8", "mlp:depth=4"}
    assert load_points(tmp_path / "none.json") == {}
    (tmp_path / "bad.json").write_text("[{", encoding="utf-8")
    with pytest.raises(DataFileError, match=r"bad\.json"):
        load_points(tmp_path / "bad.json")
