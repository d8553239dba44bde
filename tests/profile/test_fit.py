"""The comm-stall model: recovers a known linear law and predicts a held-out point."""

from __future__ import annotations

import pytest

from unstall.errors import ConfigError
from unstall.profile.fit import SweepPoint, fit_comm_stall, parse_variant


def _point(name: str, layers: int, tensors: int, nbytes: int) -> SweepPoint:
    stall = 0.002 + 1e-4 * layers + 5e-5 * tensors + 8e-9 * nbytes  # the known law
    return SweepPoint(
        variant=name, layers=layers, gradient_tensors=tensors, gradient_bytes=nbytes, stall_s=stall
    )


def test_fit_recovers_the_law_and_predicts_the_held_out_model() -> None:
    points = [
        _point("a", 5, 10, 1_000_000),
        _point("b", 10, 30, 3_000_000),
        _point("c", 20, 45, 2_000_000),
        _point("d", 40, 80, 10_000_000),
        _point("e", 8, 30, 40_000_000),
        _point("f", 60, 100, 500_000),
    ]
    held = _point("held", 50, 150, 14_000_000)
    fit = fit_comm_stall(points, held_out=held)
    assert fit.r2 == pytest.approx(1.0, abs=1e-6)
    assert fit.intercept_s == pytest.approx(0.002, rel=1e-3)
    assert fit.coefficients["gradient_bytes"] == pytest.approx(8e-9, rel=1e-3)
    assert fit.held_out_rel_error == pytest.approx(0.0, abs=1e-4)


def test_fit_quality_drops_on_noise_the_features_cannot_explain() -> None:
    points = [_point(str(i), 10, 20, 1_000_000) for i in range(4)]
    noisy = [
        SweepPoint(**{**p.to_dict(), "stall_s": p.stall_s * (1 + 0.5 * (-1) ** i)})
        for i, p in enumerate(points)
    ]
    assert fit_comm_stall(noisy).r2 < 0.5


def test_parse_variant() -> None:
    assert parse_variant("resnet:depth=34") == ("resnet", {"depth": 34})
    assert parse_variant("mlp:depth=2,width=64") == ("mlp", {"depth": 2, "width": 64})
    assert parse_variant("mobilenet_v2") == ("mobilenet_v2", {})
    for bad in ("nosuch", "resnet:depth", "resnet:colour=3"):
        with pytest.raises(ConfigError):
            parse_variant(bad)
