from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from unstall.net.topology import TOPOLOGY_PRESETS, topology_preset
from unstall.sim.perf_speed import PerfSpeedModel


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(TOPOLOGY_PRESETS)), n=st.integers(1, 256), racks=st.booleans())
def test_spread_placements_are_valid_and_never_faster_than_consolidated(
    name: str, n: int, racks: bool
) -> None:
    speed = PerfSpeedModel(topology_preset(name))
    topo = speed.topology
    n = min(n, topo.n_gpus)
    spread = speed.spread(n, across_racks=racks)
    nodes = [node for node, _ in spread]
    assert len(set(nodes)) == len(nodes)
    assert all(0 <= node < topo.n_nodes for node in nodes)
    assert all(1 <= k <= topo.gpus_per_node for _, k in spread)
    assert sum(k for _, k in spread) == n
    sens = speed.sensitivity("resnet50", n)
    assert all(s >= 1.0 for s in sens.node + sens.rack)
    assert all(
        b >= a - 1e-12 for a, b in zip(sens.consolidated, sens.consolidated[1:], strict=False)
    )
