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


def test_one_repeat_or_a_stall_that_came_out_negative_is_warned_about() -> None:
    from unstall.cli.profile import noise_warning
    from unstall.profile.stalls import summarize

    once = {"local": summarize("local", [0.010]), "network": summarize("network", [0.009])}
    warning = noise_warning(once, {"network_stall_s": -0.001, "interconnect_stall_s": 0.002})
    assert warning is not None
    assert "the network run was 1 ms/iter faster than the local run" in warning
    assert "network stall shows as 0" in warning and "interconnect" not in warning
    assert "1 repeat per run: run-to-run noise can hide a stall" in warning
    thrice = {n: summarize(n, [0.010, 0.011, 0.012]) for n in ("local", "network")}
    assert noise_warning(thrice, {"network_stall_s": 0.001}) is None
    assert "network stall shows as 0" in (noise_warning(thrice, {"network_stall_s": -1e-4}) or "")


def _seconds(text: str) -> float:
    value, unit = text.split()
    return float(value.replace(",", "")) * {"ms": 1e-3, "s": 1, "min": 60, "h": 3600}[unit]


def test_recommend_rows_read_in_the_order_the_header_states() -> None:
    """Within the budget by cost (then by time among costs equal to the cent), as printed: the
    cents are shown, so rows that read "$224" no longer look tied while ranked by their cents."""
    from typer.testing import CliRunner

    from unstall.cli.app import app

    args = ["recommend", "--model", "resnet50", "--samples", "1281167", "--epochs", "90"]
    result = CliRunner().invoke(
        app, [*args, "--budget-hours", "3", "--top", "40"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    assert "within the budget by cost, then over it by time" in result.output
    rows = []
    for line in result.output.splitlines():
        cells = line.split()
        if cells and cells[0].isdigit() and cells[-1] in ("ok", "over", "*"):
            # "#", "N x TYPE", GPUs, $/h, time as value and unit, cost, ...
            at = 7
            assert cells[at] in ("ms", "s", "min", "h"), line
            time_s = _seconds(f"{cells[at - 1]} {cells[at]}")
            rows.append((float(cells[at + 1].replace(",", "")), time_s))
    assert len(rows) == 40
    assert rows == sorted(rows), "cost, then time among equal costs"
    assert len({cost for cost, _ in rows}) > 30  # the cents tell the rows apart
