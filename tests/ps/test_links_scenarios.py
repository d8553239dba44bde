"""The emulated link's queueing, the cost model, scenario presets and scenario files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from unstall.errors import ConfigError, DataFileError
from unstall.net.link import MB, Link
from unstall.ps.links import LinkQueue, ServerSpec, server_cost, unlimited
from unstall.ps.scenarios import SCENARIOS, load_scenario


def spec(bandwidth_mb_s: float = 25.0, latency_ms: float = 0.5, **compute: float) -> ServerSpec:
    """A server spec quoted as scenario files quote it."""
    return ServerSpec(link=Link.from_mb_s(bandwidth_mb_s, latency_ms=latency_ms), **compute)


def test_transfers_on_one_link_serialize_and_latency_does_not_hold_it() -> None:
    link = LinkQueue()
    # three 1-second transfers arriving together: delivered at 1, 2, 3 s plus 0.5 s latency
    assert [link.reserve(10.0, 1.0, 0.5) for _ in range(3)] == [11.5, 12.5, 13.5]
    assert link.reserve(20.0, 1.0, 0.5) == 21.5  # an idle link starts at once
    assert link.busy_s == 4.0


def test_spec_times_are_computed_from_the_numbers() -> None:
    s = spec(bandwidth_mb_s=25, latency_ms=2, apply_mb_s=400, slowdown=4)
    assert s.transfer_s(5 * MB) == pytest.approx(0.2)
    assert s.apply_s(4 * MB) == pytest.approx(0.04)
    assert s.latency_s == 0.002
    assert s.link.bandwidth_gbps == pytest.approx(0.2)  # 25 MB/s is 0.2 Gbit/s
    assert unlimited().transfer_s(10**9) == 0.0 and unlimited().apply_s(10**9) == 0.0


def test_server_cost_per_byte_counts_w_transfers_each_way_and_the_step() -> None:
    cost = server_cost(spec(bandwidth_mb_s=10, latency_ms=1, apply_mb_s=100, slowdown=2), workers=3)
    assert cost.fixed_s == pytest.approx(0.002)
    assert cost.per_byte_s == pytest.approx(6 / (10 * MB) + 3 * 2 / (100 * MB))


def test_spec_rejects_non_positive_rates_naming_the_field() -> None:
    with pytest.raises(ConfigError, match="apply_mb_s"):
        ServerSpec(apply_mb_s=0.0)
    with pytest.raises(ConfigError, match="bandwidth_gbps"):
        ServerSpec(link=Link(bandwidth_gbps=0.0))


def test_presets_say_what_the_issue_asks() -> None:
    assert set(SCENARIOS) == {"none", "bandwidth", "interference", "imbalance", "dynamic", "mixed"}
    bw = SCENARIOS["bandwidth"]().specs(0, 10)
    assert len(bw) == 4
    assert [s.link.mb_s for s in bw] == [25.0, 6.25, 25.0, 25.0]  # one of four at a quarter
    assert {s.link.latency_ms for s in bw} == {0.5}
    inter = SCENARIOS["interference"]().specs(0, 10)
    assert [s.slowdown for s in inter] == [1.0, 1.0, 10.0, 1.0]
    assert all(s == ServerSpec() for s in SCENARIOS["none"]().specs(5, 10))


def test_dynamic_moves_the_slow_server_during_the_run() -> None:
    dyn = SCENARIOS["dynamic"]()
    slow = [[s.link.mb_s for s in dyn.specs(i, 30)].index(6.25) for i in (0, 9, 10, 19, 20, 29)]
    assert slow == [0, 0, 2, 2, 3, 3]
    assert dyn.spans(30) == [(0, 10), (10, 20), (20, 30)]


def test_imbalance_model_has_one_very_large_tensor() -> None:
    from unstall.workload import zoo

    sc = SCENARIOS["imbalance"]()
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
    assert sc.specs(0, 10) == (spec(bandwidth_mb_s=50.0),) * 3
    assert sc.specs(5, 10)[2] == spec(bandwidth_mb_s=50.0, slowdown=3.0)


def test_an_override_of_the_bandwidth_alone_keeps_the_base_latency(tmp_path: Path) -> None:
    path = tmp_path / "lat.json"
    base = {"bandwidth_mb_s": 40.0, "latency_ms": 2.0}
    over = [{"server": 0, "bandwidth_mb_s": 10.0}, {"server": 1, "latency_ms": 7.0}]
    path.write_text(json.dumps({"servers": 2, "base": base, "phases": [{"servers": over}]}))
    first, second = load_scenario(path).specs(0, 10)
    assert first.link == Link.from_mb_s(10.0, latency_ms=2.0)
    assert second.link == Link.from_mb_s(40.0, latency_ms=7.0)


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


def test_with_servers_rejects_overrides_of_missing_servers() -> None:
    with pytest.raises(ConfigError, match="server 1 does not exist"):
        SCENARIOS["bandwidth"]().with_servers(1)
    assert math.isclose(SCENARIOS["bandwidth"]().with_servers(8).specs(0, 1)[1].link.mb_s, 6.25)


def test_spare_servers_have_specs_for_a_controller_to_add() -> None:
    from unstall.ps.scenarios import scenario_from_mapping

    data = {"servers": 2, "spares": 1, "phases": [{"servers": [{"server": 2, "slowdown": 2.0}]}]}
    sc = scenario_from_mapping(data, "inline")
    assert len(sc.specs(0, 10)) == 2  # the spare is not started
    assert sc.spec(2, 0, 10).slowdown == 2.0
    with pytest.raises(DataFileError, match="spares = 0"):
        scenario_from_mapping({**data, "spares": 0}, "inline")
