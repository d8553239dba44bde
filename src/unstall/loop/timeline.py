"""What a run records over time: busy GPUs, queue length and congestion after every instant,
and the numbers the policy reported (telemetry); the metrics integrate these step functions."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field


@dataclass(slots=True)
class Timeline:
    """Step functions sampled after every round: value holds until the next time."""

    time_s: array = field(default_factory=lambda: array("d"))
    busy_gpus: array = field(default_factory=lambda: array("l"))
    queued: array = field(default_factory=lambda: array("l"))
    congestion: array = field(default_factory=lambda: array("d"))
    telemetry: list[tuple[float, str, float]] = field(default_factory=list)
