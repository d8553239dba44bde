"""Delay scheduling over locality levels (one node, one rack, anywhere).

A job that cannot get a consolidated placement waits for one, but only as long as the worse
placement would cost it: running ``slowdown`` times slower loses ``(slowdown - 1) x run time``,
so the timer is ``factor x (slowdown - 1) x expected run time`` (capped if asked); ``factor`` is
what the auto-tuner moves. An insensitive job's timer is zero, so it starts at once wherever GPUs
are free; a sensitive one holds out for consolidation.
"""

from __future__ import annotations


def accept_after_s(
    slowdown: float,
    *,
    factor: float,
    expected_runtime_s: float,
    max_wait_s: float | None,
    insensitive_below: float,
) -> float:
    """Seconds held back for locality after which a job accepts a placement that slows it by
    ``slowdown`` (Dally counts them from the first round it turned such a placement down)."""
    if slowdown < insensitive_below:
        return 0.0
    after = factor * (slowdown - 1.0) * expected_runtime_s
    return after if max_wait_s is None else min(max_wait_s, after)
