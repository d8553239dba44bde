"""The live backend's clock: wall time times ``speedup``, in trace seconds.

A live run reports its times in trace seconds (wall seconds times the speedup), so that it and a
simulated run of the same trace compare column for column. Every conversion between the two is
here, once.
"""

from __future__ import annotations

import time


class WallClock:
    """Trace seconds since :meth:`start`, at ``speedup`` trace seconds per wall second."""

    def __init__(self, speedup: float) -> None:
        self.speedup = speedup
        self._t0 = time.monotonic()

    def start(self) -> None:
        self._t0 = time.monotonic()

    def now(self) -> float:
        """Trace seconds since the run began."""
        return (time.monotonic() - self._t0) * self.speedup

    def wall(self, trace_s: float) -> float:
        """Wall seconds that ``trace_s`` trace seconds take."""
        return trace_s / self.speedup

    def trace(self, wall_s: float) -> float:
        """Trace seconds that ``wall_s`` wall seconds stand for."""
        return wall_s * self.speedup
