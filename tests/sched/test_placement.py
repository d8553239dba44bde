from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from unstall.sched import placement as pl
from unstall.sched.base import ClusterLayout

LAYOUT = ClusterLayout.regular(racks=2, nodes_per_rack=2, gpus_per_node=4)


def racks_free(free: list[int]) -> list[int]:
    return [sum(free[n] for n in nodes) for nodes in LAYOUT.rack_nodes]


def test_one_node_is_best_fit() -> None:
    assert pl.on_one_node([4, 2, 3, 1], 2) == ((1, 2),)
    assert pl.on_one_node([4, 2, 3, 1], 4) == ((0, 4),)
    assert pl.on_one_node([1, 1, 1, 1], 2) is None


def test_rack_level_uses_fewest_nodes_in_one_rack() -> None:
    free = [3, 3, 4, 1]
    got = pl.in_one_rack(free, racks_free(free), LAYOUT, 5)
    assert got == ((2, 4), (3, 1))
    assert pl.locality_of(got, LAYOUT) == pl.Locality.RACK


def test_at_level_respects_the_level() -> None:
    free = [2, 2, 2, 2]
    assert pl.at_level(pl.Locality.NODE, free, racks_free(free), LAYOUT, 4) is None
    rack = pl.at_level(pl.Locality.RACK, free, racks_free(free), LAYOUT, 4)
    assert rack == ((0, 2), (1, 2))
    assert pl.at_level(pl.Locality.RACK, free, racks_free(free), LAYOUT, 6) is None
    anywhere = pl.at_level(pl.Locality.CLUSTER, free, racks_free(free), LAYOUT, 6)
    assert anywhere is not None and pl.locality_of(anywhere, LAYOUT) == pl.Locality.CLUSTER


def test_most_consolidated_needs_the_minimum_node_count() -> None:
    free = [4, 3, 4, 4]
    assert pl.most_consolidated(free, racks_free(free), LAYOUT, 8) == ((2, 4), (3, 4))
    free = [4, 3, 3, 4]
    assert pl.most_consolidated(free, racks_free(free), LAYOUT, 8) is None


def test_best_locality_possible() -> None:
    assert pl.best_locality_possible(4, LAYOUT) == pl.Locality.NODE
    assert pl.best_locality_possible(8, LAYOUT) == pl.Locality.RACK
    assert pl.best_locality_possible(12, LAYOUT) == pl.Locality.CLUSTER


@given(
    free=st.lists(st.integers(0, 4), min_size=4, max_size=4),
    n=st.integers(1, 16),
    level=st.sampled_from(list(pl.Locality)),
)
def test_every_placement_fits_the_free_gpus_and_the_level(
    free: list[int], n: int, level: pl.Locality
) -> None:
    got = pl.at_level(level, free, racks_free(free), LAYOUT, n)
    if got is None:
        if level == pl.Locality.CLUSTER:
            assert sum(free) < n
        return
    assert sum(k for _, k in got) == n
    assert all(0 < k <= free[node] for node, k in got)
    assert len({node for node, _ in got}) == len(got)
    assert pl.locality_of(got, LAYOUT) <= level
    ff = pl.first_fit(free, n)
    assert ff is not None and sum(k for _, k in ff) == n


@given(st.lists(st.integers(0, 5), max_size=40))
def test_each_rack_lists_its_nodes_in_node_order(node_rack: list[int]) -> None:
    """Racks in any order and with gaps (a rack without nodes is an empty tuple)."""
    layout = ClusterLayout.from_node_rack(tuple(node_rack), 4)
    racks = max(node_rack) + 1 if node_rack else 0
    expected = tuple(
        tuple(n for n, r in enumerate(node_rack) if r == rack) for rack in range(racks)
    )
    assert layout.rack_nodes == expected
