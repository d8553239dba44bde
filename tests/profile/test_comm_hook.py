"""The emulated link: the delay formula and its parsing."""

from __future__ import annotations

import pytest

from unstall.errors import ConfigError
from unstall.profile.link import LinkSpec


def test_ring_allreduce_delay_formula() -> None:
    link = LinkSpec(gbps=1.0, latency_ms=2.0)
    # 4 workers: each link carries 2 * 3/4 of 1e8 bytes = 1.5e8 bytes = 1.2 s at 1 Gbit/s.
    assert link.bandwidth_delay_s(100_000_000, 4) == pytest.approx(1.2)
    assert link.delay_s(100_000_000, 4) == pytest.approx(1.202)
    assert link.bandwidth_delay_s(100_000_000, 1) == 0.0  # nothing to send alone


def test_four_times_slower_link_four_times_the_bandwidth_part() -> None:
    fast, slow = LinkSpec(gbps=4.0, latency_ms=1.0), LinkSpec(gbps=1.0, latency_ms=1.0)
    assert slow.bandwidth_delay_s(5_000_000, 2) == pytest.approx(
        4 * fast.bandwidth_delay_s(5_000_000, 2)
    )


def test_parse() -> None:
    assert LinkSpec.parse("10,0.5") == LinkSpec(gbps=10.0, latency_ms=0.5)
    assert LinkSpec.parse("2") == LinkSpec(gbps=2.0)
    for bad in ("x,1", "1,2,3", "0,1", "1,-1"):
        with pytest.raises(ConfigError):
            LinkSpec.parse(bad)
