"""The emulated link's delay: ring all-reduce bytes over the link's bandwidth, plus its latency."""

from __future__ import annotations

import pytest

from unstall.net.link import Link
from unstall.profile.comm_hook import bandwidth_delay_s, bucket_delay_s, link_json, ring_bytes


def test_ring_allreduce_delay_formula() -> None:
    link = Link(bandwidth_gbps=1.0, latency_us=2000.0)
    # 4 workers: each link carries 2 * 3/4 of 1e8 bytes = 1.5e8 bytes = 1.2 s at 1 Gbit/s.
    assert ring_bytes(100_000_000, 4) == pytest.approx(1.5e8)
    assert bandwidth_delay_s(link, 100_000_000, 4) == pytest.approx(1.2)
    assert bucket_delay_s(link, 100_000_000, 4) == pytest.approx(1.202)
    assert bandwidth_delay_s(link, 100_000_000, 1) == 0.0  # nothing to send alone


def test_four_times_slower_link_four_times_the_bandwidth_part() -> None:
    fast = Link(bandwidth_gbps=4.0, latency_us=1000.0)
    slow = Link(bandwidth_gbps=1.0, latency_us=1000.0)
    assert bandwidth_delay_s(slow, 5_000_000, 2) == pytest.approx(
        4 * bandwidth_delay_s(fast, 5_000_000, 2)
    )


def test_json_keeps_the_units_of_the_command_line() -> None:
    assert link_json(Link(bandwidth_gbps=1.0, latency_us=500.0)) == {
        "gbps": 1.0,
        "latency_ms": 0.5,
    }
    assert link_json(None) is None
