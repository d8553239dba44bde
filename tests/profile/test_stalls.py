"""The differential arithmetic: stalls are differences of run medians, clipped at zero."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from unstall.errors import ConfigError
from unstall.profile.stalls import STALL_FIELDS, stall_breakdown, summarize, text_bar

delay = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@given(compute=st.floats(1e-4, 1.0), fetch=delay, prep=delay, inter=delay, net=delay)
def test_injected_delays_come_back_as_the_stalls(
    compute: float, fetch: float, prep: float, inter: float, net: float
) -> None:
    # Each run adds exactly one known delay to the run before it.
    medians = {
        "compute": compute,
        "cached": compute,
        "warm": compute + prep,
        "cold": compute + prep + fetch,
        "local": compute + inter,
        "network": compute + inter + net,
    }
    b = stall_breakdown(medians)
    for got, want in [
        (b.compute_s, compute),
        (b.fetch_stall_s, fetch),
        (b.prep_stall_s, prep),
        (b.interconnect_stall_s, inter),
        (b.network_stall_s, net),
    ]:
        assert got == pytest.approx(want, abs=1e-12)
    assert b.total_s == pytest.approx(compute + fetch + prep + inter + net)
    assert math.fsum(b.fractions.values()) == pytest.approx(1.0)
    assert set(b.fractions) == set(STALL_FIELDS)


def test_noise_below_zero_is_clipped_but_kept_raw() -> None:
    b = stall_breakdown({"compute": 0.10, "local": 0.09, "network": 0.30})
    assert b.interconnect_stall_s == 0.0
    assert b.raw["interconnect_stall_s"] == pytest.approx(-0.01)
    assert b.network_stall_s == pytest.approx(0.21)
    assert b.fetch_stall_s == 0.0 and "fetch_stall_s" not in b.raw  # not measured


def test_compute_run_is_required() -> None:
    with pytest.raises(ConfigError, match="compute"):
        stall_breakdown({"local": 0.1})


def test_summary_is_median_and_range() -> None:
    s = summarize("local", [0.3, 0.1, 0.2])
    assert (s.median_s, s.min_s, s.max_s) == (0.2, 0.1, 0.3)
    assert s.spread_s == pytest.approx(0.2)
    with pytest.raises(ConfigError):
        summarize("local", [])


def test_text_bar_shows_each_part_in_proportion() -> None:
    b = stall_breakdown({"compute": 0.5, "local": 0.75, "network": 1.0})
    bar = text_bar(b, width=40).split("]")[0][1:]
    assert bar.count("C") == 20 and bar.count("I") == 10 and bar.count("N") == 10
