"""The evaluation's links rule: the bandwidth at which transfer dominates a model's iteration,
and scenarios with every link scaled (pure: no Ray)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from unstall.errors import ConfigError
from unstall.ps.bench import even_split_s, link_for_transfer_ratio, scaled_links, scenario_table
from unstall.ps.links import MB, ServerSpec
from unstall.ps.scenarios import SCENARIOS, resolve_scenario, scenario_from_mapping

SIZE = dict(model_bytes=5_260_000, workers=2, servers=4)


def test_even_split_is_the_cost_models_time_of_a_quarter_of_the_model() -> None:
    spec = ServerSpec(bandwidth_mb_s=25.0, latency_ms=0.5, apply_mb_s=400.0)
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
    at_link = dataclasses.replace(base, bandwidth_mb_s=link)
    assert even_split_s(at_link, **SIZE) == pytest.approx(ratio * engine_s, rel=1e-9)


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
    preset = resolve_scenario(name)
    scaled = scaled_links(preset, 0.25)
    assert scaled.base.bandwidth_mb_s == preset.base.bandwidth_mb_s * 0.25
    for iteration in range(30):
        for server in range(preset.servers):
            before, after = preset.spec(server, iteration, 30), scaled.spec(server, iteration, 30)
            assert after.bandwidth_mb_s == pytest.approx(before.bandwidth_mb_s * 0.25)
            assert dataclasses.replace(after, bandwidth_mb_s=before.bandwidth_mb_s) == before
    assert (scaled.name, scaled.model, scaled.servers) == (preset.name, preset.model, 4)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_a_scenario_table_reads_back_as_the_same_scenario(name: str) -> None:
    scenario = scaled_links(resolve_scenario(name), 0.12)
    assert scenario_from_mapping(scenario_table(scenario), "test.json") == scenario
