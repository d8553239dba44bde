"""How fast a job runs on a placement: the simulator's view of the perf model.

The engine asks only these questions, so a test can plug in a hand-made model with known numbers
and the real one (:class:`~unstall.sim.perf_speed.PerfSpeedModel`) wraps ``workload.perf``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping
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


@dataclass(frozen=True, slots=True)
class RateTiming:
    """A placement's iteration time as a function of its share of the network: the perf model's
    ``plan_time(plan, plan.bandwidth_at_rate(rate)).total_s`` with the same float operations (so
    the same result to the bit), over the plan's distinct link terms only
    (:func:`unstall.sim.perf_speed.rate_timing` builds it from a plan).

    ``terms``: ``(max_bandwidth, weight, latency_s, bytes)`` of each link term that can set the
    communication time; ``floor``: the latency of links without bytes, paid at any rate. The
    engine evaluates many of these at once over arrays (``unstall.sim.network_jobs``).
    """

    terms: tuple[tuple[float, float, float, float], ...]
    floor: float
    compute_s: float
    overlap_s: float
    data_s: float

    def __call__(self, rate: float) -> float:
        comm = self.floor
        for max_bw, weight, latency_s, nbytes in self.terms:
            bw = weight * rate
            if not bw < max_bw:
                bw = max_bw
            t = latency_s + (nbytes / bw if bw > 0.0 else math.inf)
            if t > comm:
                comm = t
        exposed = comm - self.overlap_s
        if exposed < 0.0:
            exposed = 0.0
        total = self.compute_s + exposed
        return self.data_s if self.data_s > total else total


class SpeedModel(Protocol):
    """How fast a job runs on a placement (see the module docstring).

    Optional members, which the engine reads through :func:`speed_capabilities` (a model
    without them gets the defaults):

    - ``heterogeneous: bool``, default False: whether a job's compute time depends on the GPU
      types of its placement. When True the engine asks ``base_iter_s`` at every start.
    - ``base_iter_s(model, num_gpus, placement) -> float``, asked only when ``heterogeneous``:
      the consolidated iteration time on the slowest GPU type of ``placement``, which the job's
      communication overhead is measured against. Default (and on one GPU type): the
      consolidated iteration time the job was built with (``consolidated_iter_s``).
    - ``rate_timing(model, num_gpus, placement) -> RateTiming``: ``iter_s`` of a placement on
      shared links as a function of the rate alone, which the engine evaluates for many jobs at
      once over arrays. Default: none, and the engine calls ``iter_s`` job by job.
    """

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


@dataclass(frozen=True, slots=True)
class SpeedCapabilities:
    """A speed model's optional members as the engine uses them (see :class:`SpeedModel`):
    ``base_iter_s`` is None unless the model is ``heterogeneous``, ``rate_timing`` None when the
    model has none."""

    base_iter_s: Callable[[str, int, Placement], float] | None
    rate_timing: Callable[[str, int, Placement], RateTiming] | None


def speed_capabilities(speed: object) -> SpeedCapabilities:
    """``speed``'s optional members, with the defaults of :class:`SpeedModel` for those it
    lacks (a hand-made model may implement only the protocol's five methods)."""
    heterogeneous = bool(getattr(speed, "heterogeneous", False))
    return SpeedCapabilities(
        base_iter_s=getattr(speed, "base_iter_s", None) if heterogeneous else None,
        rate_timing=getattr(speed, "rate_timing", None),
    )
