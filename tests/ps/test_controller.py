"""PSLD's pure controller on synthetic telemetry: no Ray."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from unstall.errors import ConfigError
from unstall.ps.assign.base import CostPhase
from unstall.ps.assign.oracle import best_shares
from unstall.ps.links import ServerCost
from unstall.ps.psld.balance import optimal_shares, rebalance, split_time
from unstall.ps.psld.config import ControllerConfig
from unstall.ps.psld.controller import PSLDController
from unstall.ps.psld.decisions import ClusterView, NoChange, Reassign, ScaleIn, ScaleOut
from unstall.ps.psld.pauses import PauseModel, PauseSample
from unstall.ps.psld.rates import ServerSample, samples_from
from unstall.ps.server import ServerIteration

CHUNKS = {i: 65_536 for i in range(60)}
FAST = 1.6e-7  # seconds per byte of a 25 MB/s link with 2 workers


def view(owner: Mapping[int, int], servers: tuple[int, ...], spares: int = 0) -> ClusterView:
    return ClusterView(
        chunk_bytes=CHUNKS,
        owner=owner,
        servers=servers,
        next_server=max(servers) + 1,
        spares_left=spares,
    )


def feed(c: PSLDController, v: ClusterView, per_byte: Mapping[int, float]) -> None:
    loads = v.loads()
    c.observe(
        [
            ServerSample(server=s, owned_bytes=loads[s], seconds=per_byte[s] * loads[s])
            for s in v.servers
        ]
    )


def loads_of(owner: Mapping[int, int], servers: tuple[int, ...]) -> dict[int, int]:
    return view(owner, servers).loads()


def test_detects_a_4x_slower_server_and_shifts_load_away() -> None:
    servers = (0, 1, 2, 3)
    owner = {i: i % 4 for i in CHUNKS}
    per_byte = {0: FAST, 1: 4 * FAST, 2: FAST, 3: FAST}
    c = PSLDController(ControllerConfig(min_samples=2))
    feed(c, view(owner, servers), per_byte)
    assert isinstance(c.decide(view(owner, servers)), NoChange)  # one sample: still uncertain
    feed(c, view(owner, servers), per_byte)
    d = c.decide(view(owner, servers))
    assert isinstance(d, Reassign) and "exploit" in d.reason
    loads = loads_of(d.owner, servers)
    # The min-max split gives the slow server a quarter of a fast one's share: 1/13 of the bytes.
    assert loads[1] == pytest.approx(sum(CHUNKS.values()) / 13, rel=0.3)
    assert min(loads[s] for s in (0, 2, 3)) > 3 * loads[1]
    assert d.predicted_after_s < 0.4 * d.predicted_before_s
    # Once there, it stays (nothing better to gain).
    feed(c, view(d.owner, servers), per_byte)
    assert isinstance(c.decide(view(d.owner, servers)), NoChange)


def test_default_acts_on_the_first_sample() -> None:
    """The default trusts one sample: the straggler is unloaded after the first iteration."""
    servers = (0, 1, 2, 3)
    owner = {i: i % 4 for i in CHUNKS}
    per_byte = {0: FAST, 1: FAST, 2: 4 * FAST, 3: FAST}
    c = PSLDController()
    assert isinstance(c.decide(view(owner, servers)), NoChange)  # nothing measured yet
    feed(c, view(owner, servers), per_byte)
    d = c.decide(view(owner, servers))
    assert isinstance(d, Reassign) and "exploit" in d.reason
    loads = loads_of(d.owner, servers)
    assert min(loads[s] for s in (0, 1, 3)) > 3 * loads[2]


def test_no_action_when_the_gain_is_below_the_migration_cost() -> None:
    servers = (0, 1)
    owner = {i: i % 2 for i in CHUNKS}
    per_byte = {0: FAST, 1: 1.1 * FAST}  # 10% slower: a 5% gain
    costly = ControllerConfig(migration_fixed_s=5.0, horizon_iterations=10)
    c = PSLDController(costly)
    for _ in range(3):
        feed(c, view(owner, servers), per_byte)
    d = c.decide(view(owner, servers))
    assert isinstance(d, NoChange) and "does not beat the migration" in d.reason
    cheap = PSLDController()
    for _ in range(3):
        feed(cheap, view(owner, servers), per_byte)
    assert isinstance(cheap.decide(view(owner, servers)), Reassign)


def test_scales_out_and_explores_the_new_server_with_a_small_share() -> None:
    servers = (0, 1, 2, 3)
    owner = {i: i % 4 for i in CHUNKS}
    per_byte = {s: FAST for s in range(5)}
    # A fifth server cuts 157 ms to 126 ms: 3.1 s over 100 iterations against ~1 s to start it.
    c = PSLDController(ControllerConfig(horizon_iterations=100))
    for _ in range(2):
        feed(c, view(owner, servers, spares=1), per_byte)
    assert isinstance(c.decide(view(owner, servers, spares=0)), NoChange)  # no spare left
    d = c.decide(view(owner, servers, spares=1))
    assert isinstance(d, ScaleOut) and d.server == 4
    total = sum(CHUNKS.values())
    share = loads_of(d.owner, (*servers, 4))[4] / total
    assert 0 < share <= ControllerConfig().explore_share + 0.02
    # Measured for a couple of iterations, the newcomer then gets its full fifth.
    servers5, owner = (*servers, 4), dict(d.owner)
    for _ in range(2):
        feed(c, view(owner, servers5), per_byte)
    d2 = c.decide(view(owner, servers5))
    assert isinstance(d2, Reassign)
    assert loads_of(d2.owner, servers5)[4] / total == pytest.approx(0.2, abs=0.03)


def test_scales_in_a_useless_server() -> None:
    servers = (0, 1, 2)
    owner = {i: i % 3 for i in CHUNKS}
    per_byte = {0: FAST, 1: FAST, 2: 200 * FAST}
    c = PSLDController()
    for _ in range(2):
        feed(c, view(owner, servers), per_byte)
    d = c.decide(view(owner, servers))
    assert isinstance(d, ScaleIn) and d.server == 2
    assert 2 not in d.owner.values()
    assert set(d.owner) == set(CHUNKS)


def test_a_changed_server_restarts_its_window() -> None:
    c = PSLDController(ControllerConfig(min_samples=2))
    for _ in range(4):
        c.observe([ServerSample(server=0, owned_bytes=1000, seconds=1000 * FAST)])
    changed = c.observe([ServerSample(server=0, owned_bytes=1000, seconds=4000 * FAST)])
    assert changed == [0]
    est = c.estimator.estimate(0)
    assert est is not None and est.samples == 1 and est.per_byte_s == pytest.approx(4 * FAST)
    assert c.estimator.trusted(0)  # a known server's change is acted on at once
    c.observe([ServerSample(server=9, owned_bytes=1000, seconds=1000 * FAST)])
    assert not c.estimator.trusted(9)  # a new one is explored first
    c.observe([ServerSample(server=9, owned_bytes=1000, seconds=1000 * FAST)])
    assert c.estimator.trusted(9)  # for min_samples iterations
    default = PSLDController()
    assert not default.estimator.trusted(9)  # unmeasured: explored (the default)
    default.observe([ServerSample(server=9, owned_bytes=1000, seconds=1000 * FAST)])
    assert default.estimator.trusted(9)  # one sample is enough by default


def test_rebalance_moves_few_chunks() -> None:
    owner = {i: i % 2 for i in CHUNKS}
    new = rebalance(CHUNKS, owner, {0: 0.75 * 60 * 65_536, 1: 0.25 * 60 * 65_536})
    moved = sum(owner[c] != new[c] for c in CHUNKS)
    assert moved == 15  # exactly the 15 chunks that go from server 1 to server 0
    assert all(new[c] == 0 for c in CHUNKS if owner[c] == 0)


def test_config_is_validated() -> None:
    with pytest.raises(ConfigError, match="explore_share"):
        ControllerConfig(explore_share=0.7)
    with pytest.raises(ConfigError, match="probe_bytes"):
        ControllerConfig(probe_bytes=0)
    with pytest.raises(ConfigError, match="probe_every"):
        ControllerConfig(probe_every=-1)


def probe(c: PSLDController, per_byte: Mapping[int, float], owned: int = 4096) -> list[int]:
    return c.observe_probe(
        [ServerSample(server=s, owned_bytes=owned, seconds=p * owned) for s, p in per_byte.items()]
    )


def test_warm_start_places_by_the_probes() -> None:
    """Probed before any iteration, the 4x slower server starts with the min-max share."""
    servers = (0, 1, 2, 3)
    owner = {i: i % 4 for i in CHUNKS}
    c = PSLDController()
    assert isinstance(c.place(view(owner, servers)), NoChange)  # nothing probed yet
    assert probe(c, {0: FAST, 1: 4 * FAST, 2: FAST, 3: FAST}) == []
    d = c.place(view(owner, servers))
    assert isinstance(d, Reassign) and d.reason.startswith("warm start")
    loads = loads_of(d.owner, servers)
    assert loads[1] == pytest.approx(sum(CHUNKS.values()) / 13, rel=0.3)
    assert min(loads[s] for s in (0, 2, 3)) > 3 * loads[1]
    # Equal probes keep the even split.
    even = PSLDController()
    probe(even, dict.fromkeys(servers, FAST))
    assert loads_of(even.place(view(owner, servers)).owner, servers) == loads_of(owner, servers)  # type: ignore[union-attr]


def test_an_iteration_sample_replaces_the_probe() -> None:
    """A probe's estimate stands until the server's first iteration sample, which replaces it
    (it is not averaged in, nor taken for a change)."""
    c = PSLDController()
    probe(c, {0: 2 * FAST})
    assert c.estimator.trusted(0) and c.estimates([0])[0].per_byte_s == pytest.approx(2 * FAST)
    assert c.observe([ServerSample(server=0, owned_bytes=100_000, seconds=FAST * 1e5)]) == []
    est = c.estimates([0])[0]
    assert est.samples == 1 and est.per_byte_s == pytest.approx(FAST)


def test_a_boundary_probe_moves_load_before_the_straggler_runs_an_iteration() -> None:
    servers = (0, 1, 2, 3)
    owner = {i: i % 4 for i in CHUNKS}
    c = PSLDController()
    per_byte = dict.fromkeys(servers, FAST)
    for _ in range(2):  # two samples: an interval to be outside of
        feed(c, view(owner, servers), per_byte)
    assert isinstance(c.decide(view(owner, servers)), NoChange)
    # A probe within the interval changes nothing; one 4x off is a change, trusted at once.
    assert probe(c, {**per_byte, 3: 1.1 * FAST}) == []
    assert c.estimates([3])[3].per_byte_s == pytest.approx(FAST)
    assert probe(c, {**per_byte, 3: 4 * FAST}) == [3]
    d = c.decide(view(owner, servers))
    assert isinstance(d, Reassign) and "exploit" in d.reason
    assert min(loads_of(d.owner, servers)[s] for s in (0, 1, 2)) > 3 * loads_of(d.owner, servers)[3]


def test_tripwires_hold_back_only_a_change_that_makes_a_new_slowest_server() -> None:
    """A server's tripwire is the larger of its interval's upper end and the speed at which
    its load would make it the slowest server by ``min_relative_gain``; a server without an
    interval (one sample) or without load has none."""
    servers = (0, 1, 2, 3)
    owner = {i: i % 4 if i < 56 else 3 for i in CHUNKS}  # server 3: 18 chunks, the rest 14
    c = PSLDController()
    per_byte = dict.fromkeys(servers, FAST)
    feed(c, view(owner, servers), per_byte)
    assert c.tripwires(view(owner, servers)) == {}  # one sample: no interval yet
    feed(c, view(owner, servers), per_byte)
    loads = loads_of(owner, servers)
    wires = c.tripwires(view(owner, servers))
    assert set(wires) == set(servers)
    slowest = FAST * loads[3]
    gain = c.config.min_relative_gain
    # Server 3 is the slowest: its interval's upper end (25% over its mean) is the wire.
    assert wires[3] == pytest.approx(FAST * (1 + c.config.change_tolerance))
    # The others may slow until they pass server 3 by 3%: beyond their interval.
    for s in (0, 1, 2):
        assert wires[s] == pytest.approx(slowest * (1 + gain) / loads[s])
        assert wires[s] > FAST * (1 + c.config.change_tolerance)
    # The probe that trips a wire is a change the controller acts on.
    assert probe(c, {**per_byte, 1: 1.01 * wires[1]}) == [1]
    d = c.decide(view(owner, servers))
    assert isinstance(d, Reassign) and loads_of(d.owner, servers)[1] < loads[1]
    # A server that owns nothing has no wire.
    drained = {i: 0 if s == 2 else s for i, s in owner.items()}
    assert 2 not in c.tripwires(view(drained, servers))


def test_samples_leave_the_first_pull_out() -> None:
    """Iteration 0's servers also send everything they own once more (the workers' first
    pull): its seconds are not the server's speed."""
    first = ServerIteration(
        server=0, owned_bytes=1000, ingress_busy_s=2.0, egress_busy_s=4.0, pull_busy_s=2.0
    )
    later = ServerIteration(server=0, owned_bytes=1000, ingress_busy_s=2.0, egress_busy_s=2.0)
    assert [s.seconds for s in samples_from([first, later])] == [4.0, 4.0]
    assert first.busy_s == 6.0


def test_follows_a_moving_straggler_in_one_decision() -> None:
    servers = (0, 1, 2, 3)
    owner: Mapping[int, int] = {i: i % 4 for i in CHUNKS}
    c = PSLDController()
    slow0 = {0: 4 * FAST, 1: FAST, 2: FAST, 3: FAST}
    for _ in range(3):
        feed(c, view(owner, servers), slow0)
        d = c.decide(view(owner, servers))
        if isinstance(d, Reassign):
            owner = d.owner
    assert loads_of(owner, servers)[0] < loads_of(owner, servers)[2] / 3
    slow2 = {0: FAST, 1: FAST, 2: 4 * FAST, 3: FAST}  # the straggler moves to server 2
    feed(c, view(owner, servers), slow2)
    d = c.decide(view(owner, servers))
    assert isinstance(d, Reassign)
    loads = loads_of(d.owner, servers)
    assert loads[2] < loads[0] / 3 and loads[0] == pytest.approx(loads[1], rel=0.15)


def test_pause_model_learns_the_fixed_cost_then_the_rate() -> None:
    config = ControllerConfig(migration_fixed_s=0.05, migration_mb_s=200.0)
    m = PauseModel(config)
    assert m.migration_s(2e6) == pytest.approx(0.05 + 0.01) and m.source() == "prior"
    # Two moves of one size: the prior rate stays, the fixed part is what their pauses leave.
    for pause in (0.300, 0.320):
        m.observe(PauseSample(kind="Reassign", bytes_moved=2_000_000, pause_s=pause))
    assert m.per_byte_s == pytest.approx(1 / 200e6)
    assert m.fixed_s == pytest.approx(0.31 - 0.01)
    # Moves of three sizes on an exact line (20 ms + 1 s per 10 MB): both terms fitted.
    m = PauseModel(config)
    for nbytes in (1_000_000, 2_000_000, 4_000_000, 8_000_000):
        m.observe(PauseSample(kind="ScaleIn", bytes_moved=nbytes, pause_s=0.02 + nbytes * 1e-7))
    assert m.fixed_s == pytest.approx(0.02) and m.per_byte_s == pytest.approx(1e-7)
    # A scale-out's start: its pause less the migration part, learned apart from the moves.
    m.observe(PauseSample(kind="ScaleOut", bytes_moved=1_000_000, pause_s=0.52))
    assert m.start_s == pytest.approx(0.52 - 0.12) and m.scale_out_s(0) == pytest.approx(0.42)
    assert m.source() == "learned from 5 pause(s)"


def test_measured_pauses_change_the_hysteresis_decision() -> None:
    """A 10% slower server: a move pays for itself at the prior 50 ms pause, not once the
    pauses measured say a migration costs 5 s (and off, the prior stands)."""
    servers = (0, 1)
    owner = {i: i % 2 for i in CHUNKS}
    per_byte = {0: FAST, 1: 1.1 * FAST}

    def decision(config: ControllerConfig, pauses: list[float]) -> object:
        c = PSLDController(config)
        for pause in pauses:
            c.observe_pause(PauseSample(kind="Reassign", bytes_moved=100_000, pause_s=pause))
        for _ in range(3):
            feed(c, view(owner, servers), per_byte)
        return c.decide(view(owner, servers))

    assert isinstance(decision(ControllerConfig(), []), Reassign)
    slow = decision(ControllerConfig(), [5.0, 5.2, 4.9])
    assert isinstance(slow, NoChange) and "learned from 3 pause(s)" in slow.reason
    assert isinstance(decision(ControllerConfig(learn_pauses=False), [5.0, 5.2, 4.9]), Reassign)


def test_closed_form_split_equals_the_oracle_programme() -> None:
    """Without fixed costs the min-max split is proportional to speed: the LP agrees."""
    per_byte = {0: FAST, 1: 4 * FAST, 3: 1.5 * FAST, 7: 10 * FAST}
    phase = CostPhase(
        weight=1.0,
        servers=tuple(ServerCost(fixed_s=0.0, per_byte_s=per_byte[s] / FAST) for s in per_byte),
    )
    solved = best_shares(1, [phase])
    shares = optimal_shares(per_byte)
    assert list(shares) == sorted(per_byte)
    assert [shares[s] for s in sorted(per_byte)] == pytest.approx(list(solved), abs=1e-6)
    assert split_time(per_byte, 1e6) == pytest.approx(FAST * 1e6 * shares[0])
