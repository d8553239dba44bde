"""The running jobs as Dally's preemption sees them: candidates (victims) and their figures,
worked out at the first preemption attempt that asks for them and kept while they hold.

Every attempt of a round looks at every running job (up to ``max_preemption_attempts_per_round``
attempts a round), so these are asked for again and again:

- under one tenancy (who runs where, what is free, the congestion: the policy's tenancy
  version), the single-node tenants by node, and each victim's slowdown spread over nodes;
- for one round (the time and the tenancy version), each running job's expected GPU-time and
  priority preemption's orderings of them (running jobs' service grows with time, and the run
  history learns run times at finishes).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from unstall.sched.base import JobView
from unstall.sched.dally.history import RunHistory
from unstall.sched.dally.preemption import Tenants, single_node_tenants


@dataclass
class PriorityVictims:
    """Running jobs for priority preemption in one round: (expected remaining seconds, GPUs)
    ascending, and (expected GPU-time, index, job) from the longest-holding down."""

    by_remaining: list[tuple[float, int]]
    by_gpu_s: list[tuple[float, int, JobView]]


class VictimFigures:
    """The figures of the running jobs as preemption candidates (see the module docstring), with
    ``history`` the policy's (for expected run times)."""

    def __init__(self, history: RunHistory) -> None:
        self._history = history
        self._tenants: Tenants | None = None
        self._tenancy = -1  # the tenancy version the tenants and slowdowns were found under
        self._slowdowns: dict[str, float] = {}
        self._round = (-1.0, -1)  # (time, tenancy version) of the round's figures below
        self._gpu_s: dict[str, float] = {}
        self._priority: PriorityVictims | None = None

    def tenants(self, running: Iterable[JobView], version: int) -> Tenants:
        """The single-node running jobs by node (:func:`single_node_tenants`) under tenancy
        ``version``, built at its first attempt and kept while the tenancy lasts."""
        if self._tenants is None or self._tenancy != version:
            self._tenants = single_node_tenants(running)
            self._tenancy = version
            self._slowdowns.clear()
        return self._tenants

    def start_round(self, now: float, version: int) -> None:
        """Forget the figures kept for the last round when this is a new one (another time or
        tenancy)."""
        if self._round != (now, version):
            self._round = (now, version)
            self._gpu_s.clear()
            self._priority = None

    def slowdown(self, victim: JobView, congestion: float) -> float:
        """``victim``'s slowdown spread over nodes of one rack at ``congestion`` (kept with the
        tenants: the congestion is part of the tenancy)."""
        slowdown = self._slowdowns.get(victim.job_id)
        if slowdown is None:
            slowdown = self._slowdowns[victim.job_id] = victim.sensitivity.at(False, congestion)
        return slowdown

    def expected_gpu_s(self, victim: JobView, now: float) -> float:
        """The GPU-seconds running job ``victim`` is expected to hold still (the policy's
        expected GPU-time without its memo: a running job's service is new each round), kept
        for the round (call :meth:`start_round` first)."""
        expected = self._gpu_s.get(victim.job_id)
        if expected is None:
            g = victim.num_gpus
            expected = g * self._history.expected_remaining_s(victim.attained_gpu_s(now) / g, g)
            self._gpu_s[victim.job_id] = expected
        return expected

    def for_priority(self, running: Iterable[JobView], now: float, version: int) -> PriorityVictims:
        """The running jobs as priority preemption sorts them this round, built at its first
        attempt of the round and kept for the round."""
        self.start_round(now, version)
        kept = self._priority
        if kept is not None:
            return kept
        history, gpu_s = self._history, self._gpu_s
        by_remaining: list[tuple[float, int]] = []
        by_gpu_s: list[tuple[float, int, JobView]] = []
        for v in running:
            g = v.num_gpus
            remaining = history.expected_remaining_s(v.attained_gpu_s(now) / g, g)
            by_remaining.append((remaining, g))
            # The same figure as expected_gpu_s, which the preemption for locality asks for.
            expected = gpu_s[v.job_id] = g * remaining
            by_gpu_s.append((expected, v.index, v))
        by_remaining.sort()
        by_gpu_s.sort(key=lambda t: (-t[0], t[1]))  # the lowest in the order first
        kept = self._priority = PriorityVictims(by_remaining, by_gpu_s)
        return kept
