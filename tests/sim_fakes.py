"""A hand-made speed model with round numbers, so event times can be asserted exactly."""

from __future__ import annotations

from collections.abc import Hashable

from unstall.sched.base import ClusterLayout, Placement, Sensitivity
from unstall.sim.speed import Flow


class FakeSpeed:
    """Consolidated iteration = 1 s. Spread: 1 + comm_gbit / bandwidth (bandwidth of the slowest
    link the job gets). NICs carry ``nic_gbps``, rack uplinks ``uplink_gbps``."""

    def __init__(
        self,
        layout: ClusterLayout,
        *,
        nic_gbps: float = 8.0,
        uplink_gbps: float = 8.0,
        comm_gbit: float = 8.0,
    ) -> None:
        self.layout = layout
        self.nic_gbps = nic_gbps
        self.uplink_gbps = uplink_gbps
        self.comm_gbit = comm_gbit

    def consolidated_iter_s(self, model: str, num_gpus: int) -> float:
        return 1.0

    def sensitivity(self, model: str, num_gpus: int) -> Sensitivity:
        spread = 1.0 + self.comm_gbit / self.nic_gbps
        return Sensitivity.flat(spread, 1.0 + self.comm_gbit / min(self.nic_gbps, self.uplink_gbps))

    def flow(self, model: str, num_gpus: int, placement: Placement) -> Flow | None:
        min_nodes = -(-sum(k for _, k in placement) // self.layout.gpus_per_node)
        if len(placement) <= min_nodes:
            return None
        links: list[Hashable] = [("nic", node) for node, _ in placement]
        racks = sorted({self.layout.node_rack[node] for node, _ in placement})
        if len(racks) > 1:
            links += [("uplink", r) for r in racks]
        cap = min(self.capacity(link) for link in links)
        return Flow(weights=dict.fromkeys(links, 1.0), cap=cap)

    def capacity(self, link: Hashable) -> float:
        assert isinstance(link, tuple)
        return self.nic_gbps if link[0] == "nic" else self.uplink_gbps

    def iter_s(self, model: str, num_gpus: int, placement: Placement, rate: float | None) -> float:
        if rate is None:
            return 1.0
        return 1.0 + self.comm_gbit / rate
