"""The one link type of unstall: the simulator's topology, the profiler's emulated network and
the parameter server's emulated server links are all :class:`Link` values.

Units, stated once for the whole package: bandwidth in Gbit/s (10^9 bits per second) per
direction, latency in microseconds per hop (or per message, where the user of the link sends
one message at a time), and ``efficiency`` as the fraction of the line rate that traffic
achieves in practice (transport stack, collective implementation). Conversions for the places
where people quote other units (MB/s for a parameter server's link, milliseconds on the command
line) are functions here, so that no other module multiplies by 8 or by 1e3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from unstall.config import check

BITS_PER_BYTE = 8.0
MB = 1e6  # a megabyte of network figures: 10^6 bytes


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True, kw_only=True)
class Link:
    """A link: per-direction ``bandwidth_gbps`` (Gbit/s), one-hop ``latency_us`` (µs) and the
    achieved ``efficiency`` of its line rate, in (0, 1]. ``inf`` bandwidth means no limit."""

    bandwidth_gbps: float
    latency_us: float = 0.0
    efficiency: float = 1.0

    def __post_init__(self) -> None:
        for name in ("bandwidth_gbps", "latency_us", "efficiency"):
            value = getattr(self, name)
            check(_is_number(value), self, name, f"must be a number, got {value!r}")
            check(not math.isnan(value), self, name, "must not be NaN")
        check(
            self.bandwidth_gbps > 0,
            self,
            "bandwidth_gbps",
            f"must be > 0, got {self.bandwidth_gbps!r}",
        )
        check(
            0 <= self.latency_us < math.inf,
            self,
            "latency_us",
            f"must be >= 0 and finite, got {self.latency_us!r}",
        )
        check(
            0 < self.efficiency <= 1,
            self,
            "efficiency",
            f"must be in (0, 1], got {self.efficiency!r}",
        )

    # --- constructors in other units -----------------------------------------------------------

    @classmethod
    def from_mb_s(cls, bandwidth_mb_s: float, *, latency_ms: float = 0.0) -> Link:
        """A link quoted in MB/s (10^6 bytes) and milliseconds."""
        return cls(
            bandwidth_gbps=bandwidth_mb_s * MB * BITS_PER_BYTE / 1e9,
            latency_us=latency_ms * 1e3,
        )

    @classmethod
    def unlimited(cls) -> Link:
        """No limit: infinite bandwidth, no latency."""
        return cls(bandwidth_gbps=math.inf)

    # --- derived figures ------------------------------------------------------------------------

    @property
    def effective_gbps(self) -> float:
        """The bandwidth traffic achieves: the line rate times the efficiency."""
        if self.efficiency == 1.0:
            return self.bandwidth_gbps
        return self.bandwidth_gbps * self.efficiency

    @property
    def bytes_per_s(self) -> float:
        """Achieved bytes per second in one direction."""
        return self.effective_gbps * 1e9 / BITS_PER_BYTE

    @property
    def mb_s(self) -> float:
        """Achieved MB/s (10^6 bytes) in one direction."""
        return self.bytes_per_s / MB

    @property
    def latency_s(self) -> float:
        return self.latency_us * 1e-6

    @property
    def latency_ms(self) -> float:
        return self.latency_us / 1e3

    def transfer_s(self, nbytes: float) -> float:
        """Seconds ``nbytes`` occupy the link (serialisation only; the latency comes on top)."""
        return nbytes / self.bytes_per_s

    def time_s(self, nbytes: float) -> float:
        """Seconds from sending ``nbytes`` to their arrival: latency plus serialisation."""
        return self.latency_s + self.transfer_s(nbytes)

    def with_efficiency(self, efficiency: float) -> Link:
        """The same link at another achieved share of its line rate."""
        if efficiency == self.efficiency:
            return self
        return Link(
            bandwidth_gbps=self.bandwidth_gbps, latency_us=self.latency_us, efficiency=efficiency
        )

    def describe(self) -> str:
        """``"10 Gbit/s, 50 µs"`` (with the efficiency when it is not 1)."""
        text = f"{self.bandwidth_gbps:g} Gbit/s, {self.latency_us:g} µs"
        if self.efficiency != 1.0:
            text += f", {self.efficiency:g} of line rate"
        return text
