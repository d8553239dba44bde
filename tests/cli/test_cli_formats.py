"""Figures in tables read at every magnitude: a small job's times are not all "0.00 h"."""

from __future__ import annotations

import math

import pytest

from unstall.cli.common import fmt_duration


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0.0, "0 ms"),
        (0.00702, "7.02 ms"),
        (0.231, "231 ms"),
        (0.9999, "1.00 s"),  # rounded before the unit is chosen
        (9.999, "10.0 s"),
        (42.0, "42.0 s"),
        (59.99, "1.00 min"),
        (754.0, "12.6 min"),
        (3599.9, "1.00 h"),
        (5760.0, "1.60 h"),
        (20.77 * 3600, "20.8 h"),
        (1234 * 3600, "1,230 h"),
        (math.nan, "-"),
    ],
)
def test_a_duration_is_shown_in_the_unit_that_reads_at_its_size(seconds: float, shown: str) -> None:
    assert fmt_duration(seconds) == shown


def test_durations_of_different_sizes_keep_three_figures() -> None:
    for exponent in range(-4, 8):
        for mantissa in (1.0, 2.5, 9.87):
            text = fmt_duration(mantissa * 10.0**exponent)
            number = text.split()[0].replace(",", "")
            assert len(number.replace(".", "").lstrip("0")) >= 3 or float(number) >= 100, text
