"""What the controller knows of each server: seconds per owned byte, over a sliding window.

Each iteration every server reports the bytes it owned and the seconds it took (its workers'
slowest ingress and egress plus its step). Per server the estimator keeps a window of seconds
per byte: a mean and its standard error (a confidence interval). A sample outside the interval
restarts the window (the server's conditions changed), so the estimate follows a moving
straggler within an iteration or two.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from unstall.ps.psld.config import ControllerConfig

if TYPE_CHECKING:  # the Ray actor's module; the controller itself runs without Ray
    from unstall.ps.server import ServerIteration


@dataclass(frozen=True, kw_only=True)
class ServerSample:
    """One server in one iteration: the bytes it owned and the seconds it took for them."""

    server: int
    owned_bytes: int
    seconds: float


@dataclass(frozen=True, kw_only=True)
class RateEstimate:
    """Seconds per owned byte: window mean, standard error, samples."""

    per_byte_s: float
    stderr: float
    samples: int

    @property
    def rate_mb_s(self) -> float:
        return 1e-6 / self.per_byte_s if self.per_byte_s > 0 else math.inf


@dataclass
class RateEstimator:
    """Sliding windows of seconds-per-byte samples, one per server."""

    config: ControllerConfig
    windows: dict[int, deque[float]] = field(default_factory=dict)
    # Servers once measured ``min_samples`` times: after a change their one new sample is
    # trusted (the change is the news), where a new server is explored first.
    established: set[int] = field(default_factory=set)
    # Seconds per byte a probe predicted, for servers with no iteration sample since: the
    # estimate until the next iteration's sample replaces it (a probe's few bytes stand in for
    # an iteration's, which they are not: they are never averaged with them).
    priors: dict[int, float] = field(default_factory=dict)

    def add(self, sample: ServerSample) -> bool:
        """Add a sample; True when it revealed a change (the window restarted at it)."""
        if sample.owned_bytes <= 0:
            return False
        value = sample.seconds / sample.owned_bytes
        self.priors.pop(sample.server, None)
        window = self.windows.setdefault(sample.server, deque(maxlen=self.config.window))
        est = self.estimate(sample.server)
        changed = False
        if est is not None and est.samples >= self.config.min_samples and self._outside(value, est):
            window.clear()
            changed = True
        window.append(value)
        if len(window) >= self.config.min_samples:
            self.established.add(sample.server)
        return changed

    def add_probe(self, sample: ServerSample) -> bool:
        """Take a probe's sample: the estimate of a server not measured yet, or, when it lies
        outside a measured server's interval, its new estimate (the window restarts); True in
        that case (a change). A probe within the interval adds nothing."""
        if sample.owned_bytes <= 0:
            return False
        value = sample.seconds / sample.owned_bytes
        window = self.windows.get(sample.server)
        if not window:
            self.priors[sample.server] = value
            return False
        est = self.estimate(sample.server)
        assert est is not None
        if not self._outside(value, est):
            return False
        window.clear()
        self.priors[sample.server] = value
        return True

    def _outside(self, value: float, est: RateEstimate) -> bool:
        return abs(value - est.per_byte_s) > self._bound(est)

    def _bound(self, est: RateEstimate) -> float:
        return max(self.config.z * est.stderr, self.config.change_tolerance * est.per_byte_s)

    def upper(self, server: int) -> float | None:
        """The most seconds per byte a sample of ``server`` may show without revealing a
        change (None: any; a window of one sample, or a probe's estimate, has no interval
        yet)."""
        window = self.windows.get(server)
        est = self.estimate(server)
        if not window or est is None or len(window) < self.config.min_samples:
            return None
        bound = self._bound(est)
        return est.per_byte_s + bound if math.isfinite(bound) else None

    def estimate(self, server: int) -> RateEstimate | None:
        window = self.windows.get(server)
        if not window:
            prior = self.priors.get(server)
            return (
                None
                if prior is None
                else RateEstimate(per_byte_s=prior, stderr=math.inf, samples=0)
            )
        # Plain float sums: ``statistics.stdev`` sums exact fractions, a tenth of a millisecond
        # a server at every iteration boundary, for figures only compared with tolerances.
        n = len(window)
        mean = math.fsum(window) / n
        if n == 1:
            return RateEstimate(per_byte_s=mean, stderr=math.inf, samples=1)
        var = math.fsum((v - mean) ** 2 for v in window) / (n - 1)
        return RateEstimate(per_byte_s=mean, stderr=math.sqrt(var / n), samples=n)

    def forget(self, server: int) -> None:
        self.windows.pop(server, None)
        self.priors.pop(server, None)
        self.established.discard(server)

    def trusted(self, server: int) -> bool:
        """Measured ``min_samples`` times, measured before (a change's one new sample), or
        probed since its last iteration sample."""
        est = self.estimate(server)
        if est is None:
            return False
        return (
            est.samples >= self.config.min_samples
            or server in self.established
            or server in self.priors
        )


def samples_from(servers: Sequence[ServerIteration]) -> list[ServerSample]:
    """Per-server samples from an iteration's telemetry: the seconds the server's links were
    occupied by the workers' push-pulls (both directions) plus its step. These are the
    transfer times as the server saw them, without the queueing that depends on when each worker
    arrived, so a sample per byte is the server's service time whatever its load. A run's first
    pulls (in its first iteration: everything owned goes out once more) are left out: counted,
    they made that sample half as slow again as the server, and it stayed in the window."""
    return [
        ServerSample(server=s.server, owned_bytes=s.owned_bytes, seconds=s.exchange_busy_s)
        for s in servers
    ]
