"""The emulated link's queueing, the cost model, scenario presets and scenario files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from unstall.errors import ConfigError, DataFileError
from unstall.ps.links import MB, LinkQueue, ServerSpec, server_cost, unlimited
from unstall.ps.scenarios import SCENARIOS, load_scenario, resolve_scenario


def test_transfers_on_one_link_serialize_and_latency_does_not_hold_it() -> None:
    link = LinkQueue()
    # three 1-second transfers arriving together: delivered at 1, 2, 3 s plus 0.5 s latency
    assert [link.reserve(10.0, 1.0, 0.5) for _ in range(3)] == [11.5, 12.5, 13.5]
    assert link.reserve(20.0, 1.0, 0.5) == 21.5  # an idle link starts at once
    assert link.busy_s == 4.0


def test_spec_times_are_computed_from_the_numbers() -> None:
    spec = ServerSpec(bandwidth_mb_s=25, latency_ms=2, apply_mb_s=400, slowdown=4)
    assert spec.transfer_s(5 * MB) == pytest.approx(0.2)
    assert spec.apply_s(4 * MB) == pytest.approx(0.04)
    assert spec.latency_s == 0.002
    assert unlimited().transfer_s(10**9) == 0.0 and unlimited().apply_s(10**9) == 0.0


def test_server_cost_per_byte_counts_w_transfers_each_way_and_the_step() -> None:
    spec = ServerSpec(bandwidth_mb_s=10, latency_ms=1, apply_mb_s=100, slowdown=2)
    cost = server_cost(spec, workers=3)
    assert cost.fixed_s == pytest.approx(0.002)
    assert cost.per_byte_s == pytest.approx(6 / (10 * MB) + 3 * 2 / (100 * MB))


@pytest.mark.parametrize("field", ["bandwidth_mb_s", "apply_mb_s"])
def test_spec_rejects_non_positive_rates(field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        ServerSpec(**{field: 0.0})


def test_presets_say_what_the_issue_asks() -> None:
    assert set(SCENARIOS) == {"none", "bandwidth", "interference", "imbalance", "dynamic", "mixed"}
    bw = resolve_scenario("bandwidth").specs(0, 10)
    assert len(bw) == 4
    assert [s.bandwidth_mb_s for s in bw] == [25.0, 6.25, 25.0, 25.0]  # one of four at a quarter
    inter = resolve_scenario("interference").specs(0, 10)
    assert [s.slowdown for s in inter] == [1.0, 1.0, 10.0, 1.0]
    assert all(s == ServerSpec() for s in resolve_scenario("none").specs(5, 10))


def test_dynamic_moves_the_slow_server_during_the_run() -> None:
    dyn = resolve_scenario("dynamic")
    slow = [
        [s.bandwidth_mb_s for s in dyn.specs(i, 30)].index(6.25) for i in (0, 9, 10, 19, 20, 29)
    ]
    assert slow == [0, 0, 2, 2, 3, 3]
    assert dyn.spans(30) == [(0, 10), (10, 20), (20, 30)]


def test_imbalance_model_has_one_very_large_tensor() -> None:
    from unstall.workload import zoo

    sc = resolve_scenario("imbalance")
    assert sc.model is not None
    sizes = [t.numel for t in zoo.facts(sc.model, **sc.model_options).tensors]
    assert max(sizes) >= 1_000_000 and max(sizes) / sum(sizes) > 0.9


def test_scenario_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "slow.toml"
    path.write_text(
        "servers = 3\n[base]\nbandwidth_mb_s = 50.0\n"
        "[[phases]]\nstart = 0.5\nservers = [{ server = 2, slowdown = 3.0 }]\n"
    )
    sc = load_scenario(path)
    assert sc.name == "slow"
    assert sc.specs(0, 10) == (ServerSpec(bandwidth_mb_s=50.0),) * 3
    assert sc.specs(5, 10)[2] == ServerSpec(bandwidth_mb_s=50.0, slowdown=3.0)
    assert resolve_scenario(str(path)) == sc


@pytest.mark.parametrize(
    ("content", "field"),
    [
        ({"base": {"bandwidth_mb_s": -1}}, "base.bandwidth_mb_s"),
        ({"base": {"bandwith_mb_s": 10}}, "base.bandwith_mb_s"),
        ({"phases": [{"start": 1.5}]}, "phases[0].start"),
        (
            {"phases": [{"servers": [{"server": 0, "slowdown": 0.5}]}]},
            "phases[0].servers[0].slowdown",
        ),
        ({"phases": [{"servers": [{"server": 7}]}]}, "phases[0].servers"),
        ({"phases": "fast"}, "phases"),
        ({"servers": 0}, "servers"),
    ],
)
def test_bad_scenario_files_name_the_field(tmp_path: Path, content: dict, field: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(content))
    with pytest.raises(DataFileError) as info:
        load_scenario(path)
    assert info.value.field == field
    assert str(path) in str(info.value)


def test_unknown_scenario_name() -> None:
    with pytest.raises(ConfigError, match="neither a preset"):
        resolve_scenario("congested")


def test_with_servers_rejects_overrides_of_missing_servers() -> None:
    with pytest.raises(ConfigError, match="server 1 does not exist"):
        resolve_scenario("bandwidth").with_servers(1)
    assert math.isclose(
        resolve_scenario("bandwidth").with_servers(8).specs(0, 1)[1].bandwidth_mb_s, 6.25
    )


def test_spare_servers_have_specs_for_a_controller_to_add() -> None:
    from unstall.ps.scenarios import scenario_from_mapping

    data = {"servers": 2, "spares": 1, "phases": [{"servers": [{"server": 2, "slowdown": 2.0}]}]}
    sc = scenario_from_mapping(data, "inline")
    assert len(sc.specs(0, 10)) == 2  # the spare is not started
    assert sc.spec(2, 0, 10).slowdown == 2.0
    with pytest.raises(DataFileError, match="spares = 0"):
        scenario_from_mapping({**data, "spares": 0}, "inline")
