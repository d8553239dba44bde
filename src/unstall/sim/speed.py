"""How fast a job runs on a placement: the simulator's view of the perf model.

The engine asks only these questions, so a test can plug in a hand-made model with known numbers
and the real one (:class:`~unstall.sim.perf_speed.PerfSpeedModel`) wraps ``workload.perf``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Protocol

from unstall.sched.base import Placement, Sensitivity

LinkId = Hashable


@dataclass(frozen=True, slots=True)
class Flow:
    """A job's traffic on the shared network as one flow of the max-min sharing step.

    ``weights``: bytes the job puts on each shared link per unit of its rate; ``cap``: the rate it
    reaches alone on idle links. Rates are in whatever unit the speed model uses (bytes/s here).
    """

    weights: Mapping[LinkId, float]
    cap: float


class SpeedModel(Protocol):
    def consolidated_iter_s(self, model: str, num_gpus: int) -> float:
        """Iteration time on the most consolidated placement, links idle."""
        ...

    def sensitivity(self, model: str, num_gpus: int) -> Sensitivity:
        """Spread over nodes of one rack, and over racks, vs consolidated, by congestion."""
        ...

    def flow(self, model: str, num_gpus: int, placement: Placement) -> Flow | None:
        """The job's flow over shared network links, or None when it crosses none."""
        ...

    def capacity(self, link: LinkId) -> float:
        """Full capacity of a shared link before background congestion (same unit as rates)."""
        ...

    def iter_s(self, model: str, num_gpus: int, placement: Placement, rate: float | None) -> float:
        """Iteration time on ``placement`` when the sharing step gave the job ``rate`` (None: the
        placement crosses no shared link)."""
        ...
