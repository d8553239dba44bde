"""The evaluation's links rule: the bandwidth at which transfer dominates a model's iteration,
and scenarios with every link scaled (pure: no Ray)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from unstall.errors import ConfigError
from unstall.net.link import MB, Link
from unstall.ps import (
    SCENARIOS,
    STRATEGIES,
    ServerSpec,
    even_split_s,
    link_for_transfer_ratio,
    scaled_links,
    scenario_table,
    with_oracle,
)
from unstall.ps.scenarios import scenario_from_mapping

SIZE = dict(model_bytes=5_260_000, workers=2, servers=4)


def at_mb_s(spec: ServerSpec, bandwidth_mb_s: float) -> ServerSpec:
    link = Link.from_mb_s(bandwidth_mb_s, latency_ms=spec.link.latency_ms)
    return dataclasses.replace(spec, link=link)


def test_even_split_is_the_cost_models_time_of_a_quarter_of_the_model() -> None:
    spec = ServerSpec(link=Link.from_mb_s(25.0, latency_ms=0.5), apply_mb_s=400.0)
    share = 5_260_000 / 4
    # two workers push and pull a quarter each (4 transfers on the links), two latencies, a step
    expected = 4 * share / (25 * MB) + 0.001 + 2 * share / (400 * MB)
    assert even_split_s(spec, **SIZE) == pytest.approx(expected)


@given(
    engine_s=st.floats(min_value=0.05, max_value=5.0),  # above the 7.6 ms step+latency
    ratio=st.floats(min_value=0.5, max_value=10.0),
)
def test_the_chosen_link_makes_the_even_split_ratio_times_the_engine(
    engine_s: float, ratio: float
) -> None:
    base = ServerSpec()
    link = link_for_transfer_ratio(base, engine_s=engine_s, ratio=ratio, **SIZE)
    assert even_split_s(at_mb_s(base, link), **SIZE) == pytest.approx(ratio * engine_s, rel=1e-9)


def test_a_heavier_engine_gets_slower_links() -> None:
    light = link_for_transfer_ratio(ServerSpec(), engine_s=0.1, ratio=2.0, **SIZE)
    heavy = link_for_transfer_ratio(ServerSpec(), engine_s=0.4, ratio=2.0, **SIZE)
    # the step and latency take ~7.6 ms of the target: heavy is a bit under a quarter of light
    assert 0.24 * light < heavy < 0.25 * light


def test_a_ratio_below_the_step_and_latency_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"ratio.*no bandwidth reaches it"):
        link_for_transfer_ratio(ServerSpec(), engine_s=0.001, ratio=1.0, **SIZE)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scaling_links_keeps_the_stragglers_relative_and_nothing_else(name: str) -> None:
    preset = SCENARIOS[name]()
    scaled = scaled_links(preset, 0.25)
    assert scaled.base.link.mb_s == pytest.approx(preset.base.link.mb_s * 0.25)
    for iteration in range(30):
        for server in range(preset.servers):
            before, after = preset.spec(server, iteration, 30), scaled.spec(server, iteration, 30)
            assert after.link.mb_s == pytest.approx(before.link.mb_s * 0.25)
            assert dataclasses.replace(after, link=before.link) == before
            assert after.link.latency_us == before.link.latency_us
    assert (scaled.name, scaled.model, scaled.servers) == (preset.name, preset.model, 4)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_a_scenario_table_reads_back_as_the_same_scenario(name: str) -> None:
    scenario = scaled_links(SCENARIOS[name](), 0.12)
    back = scenario_from_mapping(scenario_table(scenario), "test.json")
    # The links go through MB/s and milliseconds, the file's units: equal to rounding.
    assert dataclasses.replace(back, base=scenario.base, phases=scenario.phases) == scenario
    for iteration in range(10):
        for server in range(scenario.servers):
            a, b = scenario.spec(server, iteration, 10), back.spec(server, iteration, 10)
            assert b.link.bandwidth_gbps == pytest.approx(a.link.bandwidth_gbps, rel=1e-12)
            assert b.link.latency_us == pytest.approx(a.link.latency_us, rel=1e-12)
            assert (b.apply_mb_s, b.slowdown) == (a.apply_mb_s, a.slowdown)


def test_a_grid_adds_the_oracle_once_and_runs_a_strategy_once() -> None:
    mx, oracle = STRATEGIES["mxnet"], STRATEGIES["oracle"]
    assert [s.name for s in with_oracle([mx, mx])] == ["mxnet", "oracle"]
    assert [s.name for s in with_oracle([oracle, mx])] == ["oracle", "mxnet"]
