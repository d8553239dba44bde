"""The emulated link and compute of one parameter server, and the cost model strategies read.

A server has a :class:`~unstall.net.link.Link` (bandwidth, latency: the network model the
simulator uses too) with one queue per direction (a NIC is full duplex): pushes queue on its
ingress, pulls on its egress. A transfer of ``b`` bytes starts when the link is free, occupies
it for ``link.transfer_s(b)`` seconds, and arrives ``link.latency_s`` later (the propagation
delay does not hold the link). Transfers on one link serialize, so W workers pushing to one
server at once are all in after ``W * b / bandwidth + latency``.

The server's compute (summing the W gradients and the SGD step) costs
``W * b * slowdown / apply_rate`` seconds; ``slowdown`` > 1 emulates interference from other
work on the machine. Every delay is computed from these numbers, not measured, so a run's timing
is set by the scenario rather than by the load of the machine it runs on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from unstall.config import check, check_positive
from unstall.net.link import MB, Link

# The presets' link: 25 MB/s (0.2 Gbit/s) and 0.5 ms, slow enough that moving their few MB of
# parameters takes several times longer than their compute and Ray's own overhead on a small
# machine, as the network does on a real cluster.
DEFAULT_LINK_MB_S = 25.0
DEFAULT_LATENCY_MS = 0.5


def default_link() -> Link:
    """The presets' server link: 25 MB/s, 0.5 ms."""
    return Link.from_mb_s(DEFAULT_LINK_MB_S, latency_ms=DEFAULT_LATENCY_MS)


@dataclass(frozen=True, kw_only=True)
class ServerSpec:
    """One server's emulated link and compute: ``apply_mb_s`` is the rate (MB/s of gradients)
    its step runs at, ``slowdown`` (>= 1) divides it. ``inf`` apply rate means no limit."""

    link: Link = field(default_factory=default_link)
    apply_mb_s: float = 400.0
    slowdown: float = 1.0

    def __post_init__(self) -> None:
        check(isinstance(self.link, Link), self, "link", f"must be a Link, got {self.link!r}")
        for name in ("apply_mb_s", "slowdown"):
            value = getattr(self, name)
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            check(ok, self, name, f"must be a number, got {value!r}")
        check_positive(self, apply_mb_s=self.apply_mb_s)
        check(self.slowdown >= 1, self, "slowdown", f"must be >= 1, got {self.slowdown}")
        check(math.isfinite(self.slowdown), self, "slowdown", "must be finite")

    @property
    def seconds_per_byte(self) -> float:
        """Seconds one byte holds the link."""
        return 1.0 / self.link.bytes_per_s

    @property
    def latency_s(self) -> float:
        return self.link.latency_s

    def transfer_s(self, nbytes: float) -> float:
        """Seconds ``nbytes`` hold the link (serialisation only; latency comes on top)."""
        return nbytes * self.seconds_per_byte

    def apply_s(self, nbytes: float) -> float:
        """Seconds the server computes on ``nbytes`` of gradients (all workers' together)."""
        return nbytes * self.slowdown / (self.apply_mb_s * MB)


def unlimited() -> ServerSpec:
    """No emulated limit: infinite bandwidth and compute, no latency (the engine's own speed)."""
    return ServerSpec(link=Link.unlimited(), apply_mb_s=math.inf)


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
