"""Each assignment strategy's rule on known inputs, and properties every strategy keeps."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from unstall.errors import ConfigError
from unstall.net.link import Link
from unstall.ps.assign import psld
from unstall.ps.assign.base import CostPhase
from unstall.ps.assign.byteps import PARTITION_BYTES, djb2, partition_server
from unstall.ps.assign.mxnet import BIGARRAY_BOUND, slice_bounds
from unstall.ps.assign.oracle import best_shares
from unstall.ps.chunks import Assignment, Chunk, TensorInfo, plan_pieces
from unstall.ps.links import ServerSpec, server_cost
from unstall.ps.strategies import STRATEGIES


def assign(
    name: str, ts: list[TensorInfo], servers: int, cs: list[CostPhase] | None = None
) -> Assignment:
    """Strategy ``name``'s first assignment (which checks that its chunks tile each tensor)."""
    return STRATEGIES[name].assign(ts, servers, cs or [])


def spec(bandwidth_mb_s: float = 25.0, latency_ms: float = 0.5, **compute: float) -> ServerSpec:
    """A server spec quoted as scenario files quote it."""
    link = Link.from_mb_s(bandwidth_mb_s, latency_ms=latency_ms)
    return ServerSpec(link=link, **compute)


def tensors(*numels: int) -> list[TensorInfo]:
    return [TensorInfo(key=i, name=f"t{i}", numel=n) for i, n in enumerate(numels)]


def costs(*specs: ServerSpec, workers: int = 2) -> list[CostPhase]:
    return [CostPhase(weight=1.0, servers=tuple(server_cost(s, workers) for s in specs))]


# --- mxnet ---------------------------------------------------------------------------------------


def test_mxnet_slices_a_25m_element_array_over_every_server() -> None:
    a = assign("mxnet", tensors(25_000_000), 4)
    assert [(c.start, c.stop) for c in a.chunks] == [
        (0, 6_250_000),
        (6_250_000, 12_500_000),
        (12_500_000, 18_750_000),
        (18_750_000, 25_000_000),
    ]
    assert [a.owner[c.id] for c in a.chunks] == [0, 1, 2, 3]
    assert a.server_bytes() == [25_000_000] * 4  # 6.25 M float32 each


def test_mxnet_bound_is_one_million_elements() -> None:
    a = assign("mxnet", tensors(BIGARRAY_BOUND - 1, BIGARRAY_BOUND), 3)
    whole = [c for c in a.chunks if c.tensor == 0]
    assert len(whole) == 1 and a.owner[whole[0].id] == (0 * 9973) % 3
    assert len([c for c in a.chunks if c.tensor == 1]) == 3


def test_mxnet_small_arrays_go_to_key_times_9973_mod_n() -> None:
    a = assign("mxnet", tensors(*[10] * 7), 5)
    # 9973 % 5 = 3, so key k goes to 3k % 5: 0, 3, 1, 4, 2, 0, 3
    assert [a.owner[c.id] for c in a.chunks] == [0, 3, 1, 4, 2, 0, 3]


def test_mxnet_slice_boundaries_round_half_up() -> None:
    # 1,000,001 / 2 = 500,000.5: C's round gives 500,001 (Python's round would give 500,000)
    assert slice_bounds(1_000_001, 2) == [(0, 500_001), (500_001, 1_000_001)]
    assert slice_bounds(1_000_000, 3) == [(0, 333_333), (333_333, 666_667), (666_667, 1_000_000)]


# --- byteps --------------------------------------------------------------------------------------


def test_djb2_known_values() -> None:
    assert djb2("") == 5381
    assert djb2("0") == 5381 * 33 + ord("0") == 177_621
    assert djb2("65536") == 210_653_553_582  # hand-unrolled: h = h*33 + c over "6","5","5","3","6"


def test_byteps_cuts_4096000_byte_partitions() -> None:
    assert PARTITION_BYTES == 4_096_000
    a = assign("byteps", tensors(2_048_000, 1_024_001, 100), 4)
    by_tensor = {t: [(c.start, c.stop) for c in a.chunks if c.tensor == t] for t in range(3)}
    assert by_tensor[0] == [(0, 1_024_000), (1_024_000, 2_048_000)]  # 2 x 4,096,000 bytes
    assert by_tensor[1] == [(0, 1_024_000), (1_024_000, 1_024_001)]
    assert by_tensor[2] == [(0, 100)]


def test_byteps_partition_server_is_djb2_of_the_partition_key_mod_n() -> None:
    a = assign("byteps", tensors(2_048_000, 10), 4)
    expected = [djb2("0") % 4, djb2(str(1)) % 4, djb2(str(1 << 16)) % 4]
    assert [a.owner[c.id] for c in a.chunks] == expected
    assert partition_server(1, 0, 4) == djb2("65536") % 4 == 2


# --- tf-greedy and round-robin -------------------------------------------------------------------


def test_tf_greedy_fewest_bytes_first_lowest_index_on_ties() -> None:
    a = assign("tf-greedy", tensors(100, 50, 50, 30, 20), 2)
    # 100 -> s0; 50 -> s1 (0 < 100); 50 -> s1 (50 < 100); 30 -> s0 (tie 100/100); 20 -> s1
    assert [a.owner[c.id] for c in a.chunks] == [0, 1, 1, 0, 1]
    assert a.server_bytes() == [520, 480]


def test_round_robin_is_key_mod_n() -> None:
    a = assign("round-robin", tensors(5, 1_000_000_000 // 4, 7, 7, 7), 3)
    assert [a.owner[c.id] for c in a.chunks] == [0, 1, 2, 0, 1]
    assert all(c.start == 0 for c in a.chunks)  # whole variables, however big


# --- oracle --------------------------------------------------------------------------------------


def test_oracle_splits_in_proportion_to_bandwidth_when_links_dominate() -> None:
    fast = spec(bandwidth_mb_s=100, latency_ms=0, apply_mb_s=float("inf"))
    slow = spec(bandwidth_mb_s=25, latency_ms=0, apply_mb_s=float("inf"))
    a = assign("oracle", tensors(1_000_000, 300_000, 2), 4, costs(fast, slow, fast, fast))
    shares = a.notes["shares"]
    assert shares == pytest.approx([4 / 13, 1 / 13, 4 / 13, 4 / 13], rel=1e-9)
    loads = a.server_bytes()
    assert abs(loads[1] * 4 - loads[0]) <= 16  # rounding to whole elements


def test_oracle_needs_costs() -> None:
    with pytest.raises(ConfigError, match="true costs"):
        assign("oracle", tensors(10), 2)


def test_oracle_static_over_phases_weighs_them() -> None:
    fast, slow = spec(latency_ms=0), spec(bandwidth_mb_s=1, latency_ms=0)
    phases = [
        CostPhase(weight=0.9, servers=(server_cost(slow, 2), server_cost(fast, 2))),
        CostPhase(weight=0.1, servers=(server_cost(fast, 2), server_cost(slow, 2))),
    ]
    shares = best_shares(10_000_000, phases)
    assert shares[0] < 0.2 < 0.8 < shares[1]  # mostly where it is fast most of the time


# --- properties ----------------------------------------------------------------------------------

sizes = st.lists(st.integers(1, 3_000_000), min_size=1, max_size=8)
specs = st.builds(
    spec,
    bandwidth_mb_s=st.floats(1, 1000),
    latency_ms=st.floats(0, 5),
    apply_mb_s=st.floats(10, 10_000),
    slowdown=st.floats(1, 10),
)


@settings(max_examples=40, deadline=None)
@given(numels=sizes, servers=st.integers(1, 6), data=st.data())
def test_every_strategy_tiles_every_tensor_and_oracle_is_never_worse(
    numels: list[int], servers: int, data: st.DataObject
) -> None:
    ts = tensors(*numels)
    cs = costs(*data.draw(st.lists(specs, min_size=servers, max_size=servers)))
    predicted = {}
    for name in STRATEGIES:
        a = assign(name, ts, servers, cs)  # checks that the chunks tile each tensor once
        assert sum(a.server_bytes()) == 4 * sum(numels)
        phase = cs[0]
        predicted[name] = max(
            c.seconds(b) for c, b in zip(phase.servers, a.server_bytes(), strict=True) if b
        )
    # The oracle's LP charges every server its fixed cost, and its continuous shares are rounded
    # to whole elements (a server may get one 4-byte element more than its share); allow that.
    slack = (
        max(c.fixed_s for c in cs[0].servers) + max(c.per_byte_s for c in cs[0].servers) * 4 + 1e-9
    )
    assert predicted["oracle"] <= min(predicted.values()) * (1 + 1e-6) + slack


def test_psld_chunks_are_a_64th_of_a_share_within_bounds() -> None:
    share_of_4 = tensors(1_000_000)  # 4 MB over 4 servers: 1 MB shares, 15.6 KB chunks
    assert psld.chunk_size(share_of_4, 4) == 1_000_000 // 64 // 4 * 4
    chunks = assign("psld", share_of_4, 4).chunks
    assert max(c.stop - c.start for c in chunks) * 4 <= 1_000_000 / 64
    assert psld.chunk_size(tensors(1_000), 4) == psld.MIN_CHUNK_BYTES
    assert psld.chunk_size(tensors(100_000_000), 4) == psld.CHUNK_BYTES


def test_plan_pieces_packs_small_chunks_and_cuts_big_ones() -> None:
    chunks = [
        Chunk(id=0, tensor=0, start=0, stop=1000),  # 4,000 bytes
        Chunk(id=1, tensor=1, start=0, stop=100),  # 400
        Chunk(id=2, tensor=2, start=0, stop=250),  # 1,000
        Chunk(id=3, tensor=3, start=10, stop=60),  # 200
    ]
    # Everything within one piece's bytes: one call with every whole chunk, as without pieces.
    assert plan_pieces(chunks, 10_000) == (((0, 0, 1000), (1, 0, 100), (2, 0, 250), (3, 0, 50)),)
    pieces = plan_pieces(chunks, 1_500)
    # chunk 0 (4,000 bytes) in 3 near-equal segments; then 400 + 1,000 packed; then 200
    assert pieces == (
        ((0, 0, 334),),
        ((0, 334, 667),),
        ((0, 667, 1000),),
        ((1, 0, 100), (2, 0, 250)),
        ((3, 0, 50),),
    )
    # A big chunk between small ones closes the packed piece: every piece is a run of the
    # chunks' elements in order (a server replies with one view of its flat array).
    small_big_small = [
        Chunk(id=0, tensor=0, start=0, stop=100),
        Chunk(id=1, tensor=1, start=0, stop=1000),
        Chunk(id=2, tensor=2, start=0, stop=50),
    ]
    assert plan_pieces(small_big_small, 1_500) == (
        ((0, 0, 100),),
        ((1, 0, 334),),
        ((1, 334, 667),),
        ((1, 667, 1000),),
        ((2, 0, 50),),
    )
    assert plan_pieces([], 1_500) == ()
    with pytest.raises(ConfigError, match="piece_bytes"):
        plan_pieces(chunks, 0)
