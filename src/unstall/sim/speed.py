"""How fast a job runs on a placement: the simulator's view of the perf model.

The engine asks only these questions, so a test can plug in a hand-made model with known numbers
and the real one (:class:`~unstall.sim.perf_speed.PerfSpeedModel`) wraps ``workload.perf``.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol

from unstall.sched.base import Placement

LinkId = Hashable


class SpeedModel(Protocol):
    def consolidated_iter_s(self, model: str, num_gpus: int) -> float:
        """Iteration time on the most consolidated placement, links at full speed."""
        ...

    def sensitivity(self, model: str, num_gpus: int) -> tuple[float, float]:
        """(spread over nodes of one rack, spread over racks) / consolidated, >= 1."""
        ...

    def links(self, placement: Placement) -> tuple[LinkId, ...]:
        """The shared network links the job's communication crosses (none on one node)."""
        ...

    def capacity_gbps(self, link: LinkId) -> float:
        """Full bandwidth of a link, before background congestion."""
        ...

    def iter_s(
        self, model: str, num_gpus: int, placement: Placement, bottleneck_gbps: float | None
    ) -> float:
        """Iteration time on ``placement`` when the job gets ``bottleneck_gbps`` on its slowest
        shared link (None: the placement crosses no shared link, or the links are uncontended)."""
        ...
