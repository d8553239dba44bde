"""Model selection by cross-validation: the folds, the out-of-sample arithmetic on a predictor
whose errors are known by hand, and the rule that picks (lowest error; ties to fewer
parameters)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from unstall.errors import ConfigError
from unstall.profile.select import (
    NOISE_FLOOR_S,
    TIE_TOLERANCE,
    choose,
    cross_validate,
    cv_folds,
    relative_error,
)


@dataclass(frozen=True)
class Point:
    variant: str
    seconds: float

    def stall(self, kind: str) -> float:
        assert kind == "comm"
        return self.seconds


@dataclass(frozen=True)
class MeanOfTraining:
    """Predicts every point as the mean stall of the points it was fitted on."""

    mean: float

    def predict_point(self, point: Point) -> float:
        return self.mean


def fit_mean(points: Sequence[Point], stall: str) -> MeanOfTraining:
    return MeanOfTraining(sum(p.stall(stall) for p in points) / len(points))


POINTS = [
    Point("a:depth=1", 1.0),
    Point("a:depth=2", 2.0),
    Point("b:depth=1", 4.0),
    Point("c", 8.0),
]


def test_folds_leave_one_model_or_one_variant_out() -> None:
    variants = [p.variant for p in POINTS]
    assert cv_folds(variants, "model") == ("model", [[0, 1], [2], [3]])
    assert cv_folds(variants, "variant") == ("variant", [[0], [1], [2], [3]])
    # One model only, or a model holding all but one point: one variant a fold instead.
    assert cv_folds(["a:x=1", "a:x=2", "a:x=3"], "model") == ("variant", [[0], [1], [2]])
    assert cv_folds(["a:x=1", "a:x=2", "a:x=3", "b"], "model")[0] == "variant"
    with pytest.raises(ConfigError, match="groups"):
        cv_folds(variants, "family")
    with pytest.raises(ConfigError, match="points"):
        cv_folds(variants[:2], "variant")


def test_leave_one_model_out_errors_by_hand() -> None:
    cv = cross_validate(POINTS, fit_mean, stall="comm", groups="model")
    # Model a left out: fitted on 4 and 8, predicts 6 for 1 and 2. b out: mean of 1, 2, 8 = 11/3.
    # c out: mean of 1, 2, 4 = 7/3.
    expected = {
        "a:depth=1": 5.0,
        "a:depth=2": 2.0,
        "b:depth=1": (11 / 3 - 4) / 4,
        "c": (7 / 3 - 8) / 8,
    }
    assert cv.groups == "model"
    assert cv.errors == pytest.approx(expected)
    magnitudes = [abs(e) for e in expected.values()]
    assert cv.mean_abs_rel_error == pytest.approx(sum(magnitudes) / 4)
    assert cv.max_abs_rel_error == pytest.approx(5.0)
    by_variant = cross_validate(POINTS, fit_mean, stall="comm", groups="variant")
    assert by_variant.errors["a:depth=1"] == pytest.approx((14 / 3 - 1) / 1)
    assert by_variant.errors["c"] == pytest.approx((7 / 3 - 8) / 8)


def test_relative_error_is_floored_at_the_noise() -> None:
    assert relative_error(1.5, 1.0) == pytest.approx(0.5)
    assert relative_error(0.002, 0.0) == pytest.approx(0.002 / NOISE_FLOOR_S)


def test_lowest_error_wins_and_a_tie_goes_to_fewer_parameters() -> None:
    picked, reason = choose({"full": (0.064, 3), "lean": (0.083, 2), "plain": (0.17, 4)})
    assert picked == "full"
    assert "6.4%" in reason and "lean 8.3%" in reason and "plain 17.0%" in reason
    tie = TIE_TOLERANCE / 2
    picked, reason = choose({"full": (0.01, 3), "lean": (0.01 + tie, 2), "plain": (0.3, 4)})
    assert picked == "lean"
    assert "fewest parameters (2)" in reason and "full" in reason
    # Outside the tolerance the lower error wins even with more parameters.
    assert choose({"full": (0.01, 3), "lean": (0.01 + 2 * TIE_TOLERANCE, 2)})[0] == "full"
    with pytest.raises(ConfigError):
        choose({})


@given(
    st.dictionaries(
        st.sampled_from(["a", "b", "c", "d"]),
        st.tuples(st.floats(0.0, 2.0), st.integers(1, 5)),
        min_size=1,
    )
)
def test_the_pick_is_within_the_tolerance_of_the_best_and_no_leaner_rival_ties(
    scores: dict[str, tuple[float, int]],
) -> None:
    picked, _ = choose(scores)
    best = min(error for error, _ in scores.values())
    error, parameters = scores[picked]
    assert error <= best + TIE_TOLERANCE
    tied = [v for v in scores.values() if v[0] <= best + TIE_TOLERANCE]
    assert parameters == min(p for _, p in tied)
