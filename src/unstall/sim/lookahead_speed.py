"""The look-ahead's speed model (:mod:`unstall.sim.lookahead`): what job views carry, no link
capacities."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from unstall.sched.base import ClusterLayout, Placement, Sensitivity
from unstall.sim.speed import Flow


@dataclass
class ViewSpeed:
    """The look-ahead's speed model, from what job views carry: a job runs at 1 iteration a
    second consolidated on the GPU type its run times were measured on, over its speed on the
    slowest GPU type of its placement on a cluster of several types (``type_speeds``), and
    ``sensitivity.at(across racks, congestion)`` times slower spread (no link sharing between
    jobs: the views do not tell link capacities)."""

    layout: ClusterLayout
    congestion: float
    sensitivities: dict[tuple[str, int], Sensitivity] = field(default_factory=dict)
    # (model, GPUs) -> its speed by GPU type: a mapping made once a look-ahead, for every
    # iteration time asks it.
    type_speeds: dict[tuple[str, int], dict[str, float]] = field(default_factory=dict)

    @property
    def heterogeneous(self) -> bool:
        """Whether a job's speed depends on the GPU types of its placement (read by the
        engine: see ``speed_capabilities``)."""
        return not self.layout.one_type

    def consolidated_iter_s(self, model: str, num_gpus: int) -> float:
        return 1.0

    def base_iter_s(self, model: str, num_gpus: int, placement: Placement) -> float:
        """The consolidated iteration time on the slowest GPU type of ``placement``."""
        if self.layout.one_type:
            return 1.0
        speeds = self.type_speeds.get((model, num_gpus), {})
        slowest = min(speeds.get(self.layout.node_type[node], 1.0) for node, _ in placement)
        return 1.0 / slowest if slowest > 0 else math.inf

    def sensitivity(self, model: str, num_gpus: int) -> Sensitivity:
        return self.sensitivities.get((model, num_gpus), Sensitivity.flat(1.0, 1.0))

    def flow(self, model: str, num_gpus: int, placement: Placement) -> Flow | None:
        return None

    def capacity(self, link: object) -> float:
        return 1.0

    def iter_s(self, model: str, num_gpus: int, placement: Placement, rate: float | None) -> float:
        base = self.base_iter_s(model, num_gpus, placement)
        if len(placement) <= 1:
            return base
        racks = {self.layout.node_rack[node] for node, _ in placement}
        return base * self.sensitivity(model, num_gpus).at(len(racks) > 1, self.congestion)
