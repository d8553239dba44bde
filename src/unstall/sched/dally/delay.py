"""Delay scheduling over locality levels (one node, one rack, anywhere), and the factor of its
timers.

A job that cannot get a consolidated placement waits for one, but only as long as the worse
placement would cost it: running ``slowdown`` times slower loses ``(slowdown - 1) x run time``,
so the timer is ``factor x (slowdown - 1) x expected run time`` (capped if asked). An
insensitive job's timer is zero, so it starts at once wherever GPUs are free; a sensitive one
holds out for consolidation.

The factor is fixed unless ``autotune`` is on (:class:`DelayFactor`): then it keeps two accounts
in GPU-seconds over a window of job starts, the *waiting paid* (time jobs spent held for a
better level) against the *slowdown avoided* by held jobs that got it and the *slowdown
suffered* by sensitive jobs that gave up and took a worse level. If giving up lost more than
waiting cost, the factor grows; if waiting cost more than it saved, it shrinks.
"""

from __future__ import annotations

from dataclasses import dataclass


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


@dataclass
class DelayFactor:
    """The delay timers' factor, moved online from what happened so far when ``enabled`` (the
    config's ``autotune``): see the module docstring."""

    value: float
    enabled: bool
    adjust_every: int
    step: float
    min_value: float
    max_value: float
    waiting_paid: float = 0.0
    slowdown_avoided: float = 0.0
    slowdown_suffered: float = 0.0
    starts_seen: int = 0
    adjustments: int = 0

    def restart(self, value: float, enabled: bool) -> None:
        """Start again from ``value`` (another setting's), keeping the accounts so far."""
        self.value = value
        self.enabled = enabled

    def observe_start(
        self, *, gpus: int, held_s: float, avoided: float, suffered: float, expected_s: float
    ) -> bool:
        """Account one start of a job that was held (``held_s`` > 0) or that accepted a worse
        level (``suffered`` > 1); returns True when the factor was adjusted."""
        self.waiting_paid += gpus * held_s
        self.slowdown_avoided += gpus * (avoided - 1.0) * expected_s
        self.slowdown_suffered += gpus * (suffered - 1.0) * expected_s
        self.starts_seen += 1
        if not self.enabled or self.starts_seen < self.adjust_every:
            return False
        if self.slowdown_suffered > self.waiting_paid:
            # Jobs that gave up lost more to slowdown than all the waiting cost: wait longer.
            self.value = min(self.max_value, self.value * self.step)
        elif self.waiting_paid > self.slowdown_avoided:
            # Waiting cost more than the slowdown it avoided: give up sooner.
            self.value = max(self.min_value, self.value / self.step)
        self.waiting_paid = self.slowdown_avoided = self.slowdown_suffered = 0.0
        self.starts_seen = 0
        self.adjustments += 1
        return True
