"""The emulated link and compute of one parameter server, and the cost model strategies read.

A server has a link with a bandwidth and a latency, one queue per direction (a NIC is full
duplex): pushes queue on its ingress, pulls on its egress. A transfer of ``b`` bytes starts when
the link is free, occupies it for ``b / bandwidth`` seconds, and arrives ``latency`` later (the
propagation delay does not hold the link). Transfers on one link serialize, so W workers pushing
to one server at once are all in after ``W * b / bandwidth + latency``.

The server's compute (summing the W gradients and the SGD step) costs
``W * b * slowdown / apply_rate`` seconds; ``slowdown`` > 1 emulates interference from other
work on the machine. Every delay is computed from these numbers, not measured, so a run's timing
is set by the scenario rather than by the load of the machine it runs on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from unstall.config import check, check_positive

MB = 1e6  # bandwidths are in MB/s (10^6 bytes), as network figures are quoted


@dataclass(frozen=True, kw_only=True)
class ServerSpec:
    """One server's emulated link and compute. ``inf`` bandwidth/apply rate means no limit."""

    bandwidth_mb_s: float = 25.0
    latency_ms: float = 0.5
    apply_mb_s: float = 400.0
    slowdown: float = 1.0

    def __post_init__(self) -> None:
        for name in ("bandwidth_mb_s", "latency_ms", "apply_mb_s", "slowdown"):
            value = getattr(self, name)
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            check(ok, self, name, f"must be a number, got {value!r}")
        check_positive(self, bandwidth_mb_s=self.bandwidth_mb_s, apply_mb_s=self.apply_mb_s)
        check(self.latency_ms >= 0, self, "latency_ms", f"must be >= 0, got {self.latency_ms}")
        check(self.slowdown >= 1, self, "slowdown", f"must be >= 1, got {self.slowdown}")
        check(math.isfinite(self.latency_ms), self, "latency_ms", "must be finite")
        check(math.isfinite(self.slowdown), self, "slowdown", "must be finite")

    @property
    def seconds_per_byte(self) -> float:
        return 1.0 / (self.bandwidth_mb_s * MB)

    @property
    def latency_s(self) -> float:
        return self.latency_ms / 1e3

    def transfer_s(self, nbytes: int) -> float:
        """Seconds ``nbytes`` hold the link (serialisation only; latency comes on top)."""
        return nbytes * self.seconds_per_byte

    def apply_s(self, nbytes: int) -> float:
        """Seconds the server computes on ``nbytes`` of gradients (all workers' together)."""
        return nbytes * self.slowdown / (self.apply_mb_s * MB)


def unlimited() -> ServerSpec:
    """No emulated limit: infinite bandwidth and compute, no latency (the engine's own speed)."""
    return ServerSpec(bandwidth_mb_s=math.inf, latency_ms=0.0, apply_mb_s=math.inf)


class LinkQueue:
    """One direction of a link: transfers serialize on it (a busy-until timestamp)."""

    def __init__(self) -> None:
        self.busy_until = 0.0
        self.busy_s = 0.0  # seconds the link has been occupied, summed

    def reserve(self, now: float, hold_s: float, latency_s: float) -> float:
        """Book a transfer that arrives at ``now`` and holds the link ``hold_s``: the time it is
        delivered (after the transfers queued before it, plus the latency)."""
        start = max(now, self.busy_until)
        self.busy_until = start + hold_s
        self.busy_s += hold_s
        return self.busy_until + latency_s


@dataclass(frozen=True, kw_only=True)
class ServerCost:
    """Predicted seconds one server needs per iteration for ``b`` bytes of parameters it owns:
    ``fixed_s + per_byte_s * b``."""

    fixed_s: float
    per_byte_s: float

    def seconds(self, nbytes: float) -> float:
        return self.fixed_s + self.per_byte_s * nbytes


def server_cost(spec: ServerSpec, workers: int) -> ServerCost:
    """What ``spec`` costs per iteration with ``workers`` workers.

    The workers start an iteration together (it follows a barrier) and push at once, so their W
    pushes serialize on the ingress; the step runs when the last is in; then the W replies
    serialize on the egress. A latency each way.
    """
    return ServerCost(
        fixed_s=2 * spec.latency_s,
        per_byte_s=2 * workers * spec.seconds_per_byte
        + workers * spec.slowdown / (spec.apply_mb_s * MB),
    )
