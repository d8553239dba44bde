"""Max-min fair sharing: exact small cases and the defining properties under hypothesis."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from unstall.errors import ConfigError
from unstall.net.sharing import link_usage, max_min_fair

REL = 1e-7


def test_one_link_equal_shares() -> None:
    rates = max_min_fair({"l": 12.0}, {f: ["l"] for f in range(4)})
    assert rates == pytest.approx(dict.fromkeys(range(4), 3.0))


def test_classic_parking_lot() -> None:
    # a: 10, b: 4; flow 2 crosses both. b is the bottleneck of 2 and 3 (2 each); 1 takes the
    # rest of a (8).
    rates = max_min_fair({"a": 10.0, "b": 4.0}, {1: ["a"], 2: ["a", "b"], 3: ["b"]})
    assert rates == pytest.approx({1: 8.0, 2: 2.0, 3: 2.0})


def test_weights_caps_and_background() -> None:
    # weight 2 on the link: flow 1 uses 2 x rate. Flow 2 is capped at 1.
    rates = max_min_fair({"a": 10.0}, {1: {"a": 2.0}, 2: ["a"]}, caps={2: 1.0})
    assert rates == pytest.approx({1: 4.5, 2: 1.0})
    # background takes half of the link away
    assert max_min_fair({"a": 10.0}, {1: ["a"]}, background={"a": 0.5})[1] == pytest.approx(5.0)


def test_flow_without_links_is_unbounded_and_zero_capacity_gives_zero() -> None:
    rates = max_min_fair({"a": 0.0}, {1: [], 2: ["a"], 3: [], 4: []}, caps={3: 2.5})
    assert math.isinf(rates[1]) and rates[2] == 0.0 and rates[3] == 2.5


@pytest.mark.parametrize(
    ("capacities", "flows", "kwargs", "field"),
    [
        ({"a": -1.0}, {1: ["a"]}, {}, "capacities"),
        ({"a": 1.0}, {1: ["b"]}, {}, "flows"),
        ({"a": 1.0}, {1: {"a": 0.0}}, {}, "flows"),
        ({"a": 1.0}, {1: ["a"]}, {"background": {"a": 1.5}}, "background"),
        ({"a": 1.0}, {1: ["a"]}, {"caps": {1: -2.0}}, "caps"),
    ],
)
def test_bad_inputs_name_the_field(capacities, flows, kwargs, field) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError) as info:
        max_min_fair(capacities, flows, **kwargs)
    assert info.value.field == field


@st.composite
def networks(draw: st.DrawFn) -> tuple[dict, dict, dict, dict]:  # type: ignore[type-arg]
    n_links = draw(st.integers(1, 6))
    links = [f"l{i}" for i in range(n_links)]
    capacities = {
        link: draw(st.floats(0.0, 100.0, allow_nan=False).filter(lambda c: c == 0 or c > 1e-3))
        for link in links
    }
    flows = {}
    for f in range(draw(st.integers(1, 8))):
        crossed = draw(st.lists(st.sampled_from(links), min_size=1, max_size=n_links, unique=True))
        flows[f] = {link: draw(st.sampled_from([1.0, 1.0, 2.0, 0.5, 3.0])) for link in crossed}
    caps = {f: draw(st.floats(0.0, 50.0)) for f in flows if draw(st.booleans())}
    background = {link: draw(st.floats(0.0, 1.0)) for link in links if draw(st.booleans())}
    return capacities, flows, caps, background


@settings(max_examples=300, deadline=None)
@given(networks())
def test_max_min_properties(net: tuple[dict, dict, dict, dict]) -> None:  # type: ignore[type-arg]
    capacities, flows, caps, background = net
    rates = max_min_fair(capacities, flows, caps=caps, background=background)
    usable = {link: c * (1 - background.get(link, 0.0)) for link, c in capacities.items()}
    used = link_usage(rates, flows)
    # 1. no link over its (remaining) capacity
    for link, load in used.items():
        assert load <= usable[link] * (1 + REL) + 1e-9
    saturated = {link for link, load in used.items() if load >= usable[link] * (1 - 1e-6) - 1e-9}
    for f, rate in rates.items():
        assert rate >= 0
        if f in caps:
            assert rate <= caps[f] * (1 + REL) + 1e-12
            if rate >= caps[f] * (1 - 1e-6):
                continue  # bottlenecked by its own cap
        # 2. every other flow has a saturated link where no flow has a higher rate
        ok = [
            link
            for link in flows[f]
            if link in saturated
            and all(rates[g] <= rate * (1 + 1e-6) + 1e-9 for g in flows if link in flows[g])
        ]
        assert ok, f"flow {f} (rate {rate}) has no bottleneck link"
