"""The look-ahead tuner's backtest (:mod:`unstall.sim.lookahead`): each candidate setting
replayed over the recent past, where most of the truth is known.

A forward look-ahead draws every run time from the finished jobs' and replays the last
horizon's arrivals as the next; over the recent past the arrivals are the real ones and the
jobs that have finished since have their real run times (what they ran in all, as the
snapshots showed it at their finish). Only the jobs still unfinished need drawing, and those
knowing more than a forward look-ahead does: each has run at least what it has run by now.

What it keeps is what the policy was shown (snapshots through ``decide``): the cluster every
``every_s`` (a :class:`PastState`: running jobs with their placements and service, the oldest
waiting ones), the jobs that arrived since the oldest kept state, and the run times of those
that finished since. It keeps no more than one window back.
"""

from __future__ import annotations

import bisect
import random
from collections import deque
from dataclasses import dataclass

from unstall.sched.base import ClusterLayout, ClusterSnapshot, JobView
from unstall.sched.dally.history import RunHistory
from unstall.sim.lookahead_plan import Arrival, PlannedJob, draw_remaining_s


@dataclass(frozen=True, slots=True)
class PastState:
    """The cluster as a snapshot showed it at ``at_s``: its running jobs and the oldest
    waiting ones (views are frozen; the snapshot's own collections are not kept)."""

    at_s: float
    layout: ClusterLayout
    congestion: float
    running: tuple[JobView, ...]
    queued: tuple[JobView, ...]

    @classmethod
    def of(cls, snapshot: ClusterSnapshot, max_jobs: int) -> PastState:
        return cls(
            at_s=snapshot.now,
            layout=snapshot.layout,
            congestion=snapshot.congestion,
            running=tuple(snapshot.running),
            queued=tuple(snapshot.queued[:max_jobs]),
        )

    def as_snapshot(self) -> ClusterSnapshot:
        """A snapshot of this state (what a look-ahead starts from: its layout, congestion
        and instant; the jobs are planned apart)."""
        return ClusterSnapshot(
            now=self.at_s,
            layout=self.layout,
            free_by_node=(),
            free_by_rack=(),
            queued=self.queued,
            running=self.running,
            congestion=self.congestion,
        )


class PastRecord:
    """What the backtest needs of the run so far, from the snapshots: the cluster every
    ``every_s``, the arrivals and the finished jobs' run times, at most ``window_s`` (plus a
    state's spacing) back."""

    def __init__(self, window_s: float, every_s: float, max_jobs: int) -> None:
        self.window_s = window_s
        self.every_s = every_s
        self.max_jobs = max_jobs
        self.states: deque[PastState] = deque()
        self.arrivals: deque[tuple[str, Arrival]] = deque()
        self.runtimes: dict[str, float] = {}  # job -> what it ran in all (finished jobs)
        self._finished_at: deque[tuple[float, str]] = deque()

    def note_arrival(self, job_id: str, arrival: Arrival) -> None:
        """A job new to the queue (in arrival order)."""
        self.arrivals.append((job_id, arrival))

    def observe(self, snapshot: ClusterSnapshot) -> None:
        """Note the finishes ``snapshot`` reports, keep its state when one is due, and forget
        what is older than the oldest state a backtest may start from."""
        now = snapshot.now
        for view in snapshot.finished:
            self.runtimes[view.job_id] = view.attained_gpu_s(now) / view.num_gpus
            self._finished_at.append((now, view.job_id))
        if not self.states or now >= self.states[-1].at_s + self.every_s:
            self.states.append(PastState.of(snapshot, self.max_jobs))
        # The oldest state kept is the latest at least a window back (a backtest starts there).
        while len(self.states) > 1 and self.states[1].at_s <= now - self.window_s:
            self.states.popleft()
        oldest = self.states[0].at_s
        while self.arrivals and self.arrivals[0][1].submit_s < oldest:
            self.arrivals.popleft()
        while self._finished_at and self._finished_at[0][0] < oldest:
            self.runtimes.pop(self._finished_at.popleft()[1], None)

    def start(self, now_s: float) -> PastState | None:
        """The state a backtest at ``now_s`` starts from: the latest at least a window back,
        else the oldest kept; None when there is none before ``now_s``."""
        chosen = None
        for state in self.states:
            if state.at_s >= now_s:
                break
            if chosen is None or state.at_s <= now_s - self.window_s:
                chosen = state
        return chosen

    def plan(
        self,
        start: PastState,
        snapshot: ClusterSnapshot,
        history: RunHistory,
        rng: random.Random,
    ) -> list[PlannedJob]:
        """The jobs of a backtest from ``start`` to ``snapshot.now``: those there at the start
        (running ones where they ran), then the arrivals since, with their real run times where
        they have finished; the others' drawn from ``history``, at least what they have run by
        now (``snapshot``'s views; a job not in them is taken to have run what it had at the
        start). Times are relative to the start."""
        t0 = start.at_s
        ran_now = {v.job_id: v.attained_gpu_s(snapshot.now) / v.num_gpus for v in snapshot.running}
        ran_now.update((v.job_id, v.attained_gpu_s_at_change / v.num_gpus) for v in snapshot.queued)

        def remaining(job_id: str, gpus: int, ran0: float) -> float:
            known = self.runtimes.get(job_id)
            if known is not None:
                return max(known - ran0, 1.0)
            ran = max(ran_now.get(job_id, ran0), ran0)
            drawn = draw_remaining_s(history.runtimes_for(gpus), ran, history.prior_runtime_s, rng)
            return drawn + ran - ran0

        jobs: list[PlannedJob] = []
        there: set[str] = set()
        for view in (*start.running, *start.queued):
            ran0 = view.attained_gpu_s(t0) / view.num_gpus
            there.add(view.job_id)
            jobs.append(PlannedJob.there(view, t0, remaining(view.job_id, view.num_gpus, ran0)))
        # Arrivals are kept in submit order: those after the start, up to now.
        at = bisect.bisect_left([a.submit_s for _, a in self.arrivals], t0)
        for job_id, arrival in list(self.arrivals)[at:]:
            if job_id in there or arrival.submit_s > snapshot.now:
                continue
            rel = max(arrival.submit_s - t0, 1e-6)
            remaining_s = remaining(job_id, arrival.num_gpus, 0.0)
            jobs.append(PlannedJob.arriving(job_id, arrival, rel, remaining_s))
        return jobs
