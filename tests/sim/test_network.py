"""The simulator's incremental link sharing equals a from-scratch max-min fair share."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from unstall.net.sharing import max_min_fair
from unstall.sim import network
from unstall.sim.network import NetworkState
from unstall.sim.speed import Flow

LINKS = [("nic", i) for i in range(6)] + [("uplink", 0), ("uplink", 1)]
CAPACITY = {link: (10.0 if link[0] == "nic" else 15.0) for link in LINKS}

flow_strategy = st.tuples(
    st.lists(st.sampled_from(LINKS), min_size=1, max_size=4, unique=True),
    st.floats(1.0, 20.0),
    st.sampled_from([1.0, 1.0, 2.0]),
)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), flow_strategy),
        st.tuples(st.just("remove"), st.integers(0, 30)),
        st.tuples(st.just("congest"), st.sampled_from([0.0, 0.3, 0.7])),
    ),
    min_size=1,
    max_size=60,
)


def remove_or_congest(net: NetworkState, flows: dict[int, Flow], kind: str, arg: object) -> None:
    """The operations every sequence shares: drop one live flow, or set the congestion."""
    if kind == "remove" and flows:
        job = sorted(flows)[int(arg) % len(flows)]  # type: ignore[call-overload]
        del flows[job]
        net.remove(job)
    elif kind == "congest":
        net.set_congestion(float(arg))  # type: ignore[arg-type]


def assert_rates_are_max_min_fair(
    net: NetworkState, capacity: dict[tuple[str, int], float], flows: dict[int, Flow]
) -> None:
    """Every flow's rate equals a from-scratch max-min fair share of the congested links."""
    keep = 1.0 - net.congestion
    expected = max_min_fair(
        {link: c * keep for link, c in capacity.items()},
        {job: f.weights for job, f in flows.items()},
        caps={job: f.cap for job, f in flows.items()},
    )
    for job in flows:
        assert net.rate(job) == pytest.approx(expected[job], rel=1e-9), job


@settings(max_examples=150, deadline=None)
@given(ops=ops)
def test_incremental_rates_equal_a_full_recompute(ops: list[tuple[str, object]]) -> None:
    check_against_full_recompute(ops)


def check_against_full_recompute(ops: list[tuple[str, object]]) -> None:
    net = NetworkState(CAPACITY.__getitem__)
    flows: dict[int, Flow] = {}
    next_id = 0
    for kind, arg in ops:
        if kind == "add":
            links, cap, weight = arg  # type: ignore[misc]
            flow = Flow(weights=dict.fromkeys(links, weight), cap=cap)
            flows[next_id] = flow
            net.add(next_id, flow)
            next_id += 1
        else:
            remove_or_congest(net, flows, kind, arg)
        net.recompute()
        assert_rates_are_max_min_fair(net, CAPACITY, flows)


regular_flow = st.tuples(
    st.lists(st.sampled_from(LINKS), min_size=1, max_size=4, unique=True),
    st.sampled_from([1.0, 1.0, 2.0]),
)
regular_ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), regular_flow),
        st.tuples(st.just("remove"), st.integers(0, 30)),
        st.tuples(st.just("congest"), st.sampled_from([0.0, 0.3, 0.7, 0.95])),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=100, deadline=None)
@given(ops=regular_ops)
def test_regular_flows_rescale_on_congestion_and_equal_a_full_recompute(
    ops: list[tuple[str, object]],
) -> None:
    """Flows capped by their slowest link, as the perf model makes them: a congestion change
    re-scales idle-link rates instead of re-sharing, and the rates stay the exact allocation."""
    regular: list[tuple[str, object]] = []
    for kind, arg in ops:
        if kind == "add":
            links, weight = arg  # type: ignore[misc]
            arg = (links, cap_of_slowest(links, weight), weight)
        regular.append((kind, arg))
    check_against_full_recompute(regular)


def cap_of_slowest(links: list[tuple[str, int]], weight: float) -> float:
    return min(CAPACITY[link] / weight for link in links)


def test_a_congestion_change_moves_every_regular_flow_without_a_sharing_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    net = NetworkState(CAPACITY.__getitem__)
    for job, links in enumerate([[("nic", 0), ("nic", 1)], [("nic", 1), ("nic", 2)]]):
        net.add(job, Flow(weights=dict.fromkeys(links, 1.0), cap=10.0))
    assert net.recompute() == {0: 5.0, 1: 5.0}  # they share nic 1
    shared: list[float] = []
    share_dirty = NetworkState._share_dirty

    def spy(self: NetworkState, keep: float) -> dict[int, float]:
        shared.append(keep)
        return share_dirty(self, keep)

    monkeypatch.setattr(NetworkState, "_share_dirty", spy)
    net.set_congestion(0.3)
    assert net.recompute() == pytest.approx({0: 3.5, 1: 3.5}, rel=1e-12)
    assert shared == []
    net.set_congestion(0.3)  # the same level again: no rate moves
    assert net.recompute() == {}


def test_with_scaling_off_every_change_re_shares(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(network, "SCALE_WITH_CONGESTION", False)
    net = NetworkState(CAPACITY.__getitem__)
    net.add(0, Flow(weights={("nic", 0): 1.0}, cap=10.0))
    net.recompute()
    net.set_congestion(0.5)
    assert {link for link, i in net._ids.items() if i in net.dirty} == {("nic", 0)}
    assert net.recompute() == {0: 5.0}


CHAIN = [("nic", i) for i in range(30)]
chain_ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.tuples(st.integers(0, 27), st.integers(2, 3))),
        st.tuples(st.just("remove"), st.integers(0, 60)),
        st.tuples(st.just("congest"), st.sampled_from([0.0, 0.5])),
    ),
    min_size=20,
    max_size=80,
)


@settings(max_examples=60, deadline=None)
@given(ops=chain_ops)
def test_long_chains_of_jobs_equal_a_full_recompute(ops: list[tuple[str, object]]) -> None:
    """Jobs over consecutive NICs, as first-fit places them: components are long chains."""
    chain_capacity = dict.fromkeys(CHAIN, 10.0)
    net = NetworkState(chain_capacity.__getitem__)
    flows: dict[int, Flow] = {}
    for i, (kind, arg) in enumerate(ops):
        if kind == "add":
            first, span = arg  # type: ignore[misc]
            flows[i] = Flow(weights=dict.fromkeys(CHAIN[first : first + span], 1.0), cap=10.0)
            net.add(i, flows[i])
        else:
            remove_or_congest(net, flows, kind, arg)
        net.recompute()
        assert_rates_are_max_min_fair(net, chain_capacity, flows)
