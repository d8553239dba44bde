"""Gavel (Narayanan et al., OSDI'20) as a baseline: heterogeneity-aware least-attained-service,
realised in rounds.

- **Allocation.** At each round, over the jobs in the system, the linear program of
  :mod:`unstall.sched.gavel_lp`: ``X[j][t]``, the share of time job ``j`` should spend on GPU
  type ``t``, maximising the smallest effective throughput (normalised by the job's throughput
  under an equal share of the cluster). A job's throughput on a type is its speed there
  (``JobView.type_speeds``, from the simulator's speed model: per model family and GPU type,
  communication included; 1 on every type when the backend gives none).
- **Rounds** (``round_s``, 360 s as in Gavel; a :class:`SetTimer` each). Each round ranks the
  (job, type) pairs by priority = ``X[j][t]`` over the share of its time in the system the job
  has run on ``t`` so far (never run there: first), and gives each type's GPUs to the pairs in
  that order, a job at most one type. Jobs kept on the type they run on stay where they are
  (unless spread over nodes at a cost, ``repack_slowdown``: those are placed again); the others
  are preempted, and the chosen ones start on their type, largest first, as consolidated as its
  free GPUs allow (the shared placement helpers, on that type's nodes only). GPUs left over go to
  the remaining jobs, fastest type first (a round leaves no GPU idle that a waiting job fits).
- **Between rounds** (arrivals, finishes) waiting jobs only fill free GPUs, by the same
  priorities (new jobs first); nobody is preempted until the next round.

A job larger than every type's GPUs is left out of the program and runs over several types
(at the slowest one's speed) when the GPUs are free: Gavel has no such jobs.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from unstall.config import check
from unstall.sched import placement as pl
from unstall.sched.base import (
    ClusterLayout,
    ClusterSnapshot,
    Decision,
    JobView,
    Placement,
    PolicyBase,
    Preempt,
    SetTimer,
    Start,
)
from unstall.sched.free import FreeGpus
from unstall.sched.gavel_lp import las_allocation

ROUND_TIMER = "gavel-round"


@dataclass(frozen=True, kw_only=True)
class GavelConfig:
    """Gavel's knobs (the keyword options of ``make_policy("gavel", ...)``)."""

    # Length of a scheduling round, seconds (Gavel's default: 6 minutes).
    round_s: float = 360.0
    # Off: every type counts as equally fast for every job (Gavel's heterogeneity-agnostic
    # LAS, the baseline its paper sets the aware one against).
    type_aware: bool = True
    # A running job spread over nodes whose slowdown there (its network sensitivity at the
    # congestion now) exceeds this is placed again at each round, as consolidated as the
    # round allows, instead of keeping its GPUs (where packing spread it when the round that
    # started it found no room on one node).
    repack_slowdown: float = 1.2

    def __post_init__(self) -> None:
        check(
            isinstance(self.round_s, int | float) and self.round_s > 0,
            self,
            "round_s",
            f"must be a number of seconds > 0, got {self.round_s!r}",
        )
        check(
            isinstance(self.repack_slowdown, int | float) and self.repack_slowdown >= 1.0,
            self,
            "repack_slowdown",
            f"must be a slowdown >= 1, got {self.repack_slowdown!r}",
        )


@dataclass
class _Books:
    """What Gavel remembers between rounds, built only from snapshots seen: each job's seconds
    run on each type, the allocation of the latest round and the jobs it was solved for."""

    received: dict[str, dict[str, float]] = field(default_factory=dict)
    allocation: dict[str, dict[str, float]] = field(default_factory=dict)
    solved_for: frozenset[str] = frozenset()
    last_now: float | None = None
    next_round: float | None = None


class Gavel(PolicyBase):
    """Heterogeneity-aware LAS solved as a linear program, realised in rounds (see the module
    docstring)."""

    def __init__(self, config: GavelConfig | None = None, *, name: str = "gavel") -> None:
        self.config = config or GavelConfig()
        self.name = name
        self._books = _Books()

    def speed(self, job: JobView, kind: str) -> float:
        """``job``'s speed on ``kind`` as this policy weighs it: the view's, or (not
        ``type_aware``) 1 wherever the job can run."""
        speed = job.speed_on(kind)
        if self.config.type_aware or speed <= 0.0:
            return speed
        return 1.0

    def reset(self) -> None:
        self._books = _Books()

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        books = self._books
        self._account(snapshot)
        active = (*snapshot.running, *snapshot.queued)
        due = ROUND_TIMER in snapshot.fired_timers or books.next_round is None
        if not active:
            books.next_round = None
            return Decision()
        if not due:
            return Decision(starts=self._backfill(snapshot))
        self._solve(snapshot, active)
        decision = self._round(snapshot, active)
        books.next_round = snapshot.now + self.config.round_s
        timers = (SetTimer(books.next_round, ROUND_TIMER),)
        return Decision(
            starts=decision[0], preemptions=decision[1], timers=timers, telemetry=decision[2]
        )

    # --- books ----------------------------------------------------------------------------------

    def _account(self, snapshot: ClusterSnapshot) -> None:
        """Add the time since the previous call to each running job's type; forget finished
        jobs (a running job has run since then unless it started after it)."""
        books = self._books
        now = snapshot.now
        for done in snapshot.finished:
            books.received.pop(done.job_id, None)
            books.allocation.pop(done.job_id, None)
        last = books.last_now
        for job in snapshot.running:
            since = job.changed_s if last is None or job.changed_s > last else last
            if now > since:
                kind = pl.slowest_type(job, job.placement, snapshot.layout)
                got = books.received.setdefault(job.job_id, {})
                got[kind] = got.get(kind, 0.0) + (now - since)
        books.last_now = now

    def _solve(self, snapshot: ClusterSnapshot, active: Sequence[JobView]) -> None:
        """The LAS allocation of the jobs in the system, solved again when they changed."""
        books = self._books
        ids = frozenset(job.job_id for job in active)
        if ids == books.solved_for:
            return
        types = snapshot.layout.types
        capacity = pl.free_by_type(snapshot.layout.node_gpus, snapshot.layout)
        x = las_allocation(
            [job.num_gpus for job in active],
            [[self.speed(job, t) for t in types] for job in active],
            [capacity[t] for t in types],
        )
        books.allocation = {
            job.job_id: {t: float(x[i, k]) for k, t in enumerate(types) if x[i, k] > 1e-9}
            for i, job in enumerate(active)
        }
        books.solved_for = ids

    def priority(self, job: JobView, kind: str, now: float) -> float:
        """Gavel's round priority of running ``job`` on ``kind``: its allocated share over the
        share of its time in the system it ran there (infinite before it ran there)."""
        share = self._books.allocation.get(job.job_id, {}).get(kind, 0.0)
        if share <= 0.0:
            return 0.0
        ran = self._books.received.get(job.job_id, {}).get(kind, 0.0)
        if ran <= 0.0:
            return math.inf
        return share / (ran / max(now - job.submit_s, 1e-9))

    # --- a round ----------------------------------------------------------------------------------

    def _round(
        self, snapshot: ClusterSnapshot, active: Sequence[JobView]
    ) -> tuple[tuple[Start, ...], tuple[Preempt, ...], tuple[tuple[str, float], ...]]:
        layout = snapshot.layout
        chosen = self._choose(snapshot, active)
        free = FreeGpus(snapshot)
        preempts: list[Preempt] = []
        for job in snapshot.running:
            kind = chosen.get(job.job_id)
            if kind != pl.slowest_type(job, job.placement, layout) or not one_type(job, layout):
                why = "not chosen this round" if kind is None else f"moves to {kind} this round"
            elif self._repack(job, snapshot):
                why = "placed again, more consolidated"
            else:
                continue  # kept where it runs
            preempts.append(Preempt(job.job_id, f"gavel: {why}"))
            free.give(job.placement)
        preempted = {p.job_id for p in preempts}
        views = {job.job_id: job for job in active}
        # Largest first, so that the big jobs find whole nodes (priority order among equals).
        placing = sorted(
            ((views[i], kind) for i, kind in chosen.items()),
            key=lambda pair: -pair[0].num_gpus,
        )
        starts: list[Start] = []
        for job, kind in placing:
            if job.running and job.job_id not in preempted:
                continue
            placement = on_type(free, kind, job.num_gpus)
            if placement is not None:
                free.take(placement)
                starts.append(Start(job.job_id, placement))
        started = {s.job_id for s in starts}
        waiting = [j for j in snapshot.queued if j.job_id not in started]
        starts += self._fill(free, waiting, snapshot.now)
        return tuple(starts), tuple(preempts), (("gavel.jobs_chosen", float(len(chosen))),)

    def _repack(self, job: JobView, snapshot: ClusterSnapshot) -> bool:
        """Whether running ``job`` is spread over nodes at a slowdown above
        ``repack_slowdown`` (see :class:`GavelConfig`)."""
        layout = snapshot.layout
        kind = pl.slowest_type(job, job.placement, layout)
        if len(job.placement) <= pl.min_nodes_on_type(layout, kind, job.num_gpus):
            return False  # as consolidated as its type allows
        racks = {snapshot.layout.node_rack[node] for node, _ in job.placement}
        slowdown = job.sensitivity.at(len(racks) > 1, snapshot.congestion)
        return slowdown > self.config.repack_slowdown

    def _choose(self, snapshot: ClusterSnapshot, active: Sequence[JobView]) -> dict[str, str]:
        """Job id -> the type it runs on this round, pairs taken by priority while the type's
        GPUs (counted, not placed) last; dict order is the order chosen."""
        layout = snapshot.layout
        now = snapshot.now
        left = pl.free_by_type(layout.node_gpus, layout)
        pairs = []
        for job in active:
            current = pl.slowest_type(job, job.placement, layout) if job.running else ""
            for kind in self._books.allocation.get(job.job_id, {}):
                rank = self.priority(job, kind, now)
                share = self._books.allocation[job.job_id][kind]
                pairs.append((-rank, kind != current, -share, job.submit_s, job.index, job, kind))
        pairs.sort(key=lambda p: p[:5])
        chosen: dict[str, str] = {}
        for *_, job, kind in pairs:
            if job.job_id not in chosen and job.num_gpus <= left[kind]:
                chosen[job.job_id] = kind
                left[kind] -= job.num_gpus
        return chosen

    def _fill(self, free: FreeGpus, waiting: Sequence[JobView], now: float) -> list[Start]:
        """Start waiting jobs on the free GPUs without preempting anyone: by priority (new jobs
        first), each on its best-ranked type with room, fastest first among equals; a job no
        type holds goes anywhere."""
        layout = free.layout
        order = sorted(
            waiting, key=lambda j: (-self._best_priority(j, layout, now), j.submit_s, j.index)
        )
        starts: list[Start] = []
        for job in order:
            if free.total == 0:
                break
            if job.num_gpus > free.total:
                continue
            kinds = sorted(
                (t for t in layout.types if job.speed_on(t) > 0.0),
                key=lambda t: (-self.priority(job, t, now), -self.speed(job, t), t),
            )
            placement: Placement | None = None
            for kind in kinds:
                placement = on_type(free, kind, job.num_gpus)
                if placement is not None:
                    break
            if placement is None and not pl.fits_one_type(layout, job.num_gpus):
                placement = free.best(job.num_gpus)
            if placement is not None:
                free.take(placement)
                starts.append(Start(job.job_id, placement))
        return starts

    def _best_priority(self, job: JobView, layout: ClusterLayout, now: float) -> float:
        if job.job_id not in self._books.allocation:
            return math.inf  # new since the latest round: first, as Gavel's unserved jobs
        return max((self.priority(job, t, now) for t in layout.types), default=0.0)

    def _backfill(self, snapshot: ClusterSnapshot) -> tuple[Start, ...]:
        if not snapshot.queued or snapshot.free_gpus == 0:
            return ()
        return tuple(self._fill(FreeGpus(snapshot), snapshot.queued, snapshot.now))


def one_type(job: JobView, layout: ClusterLayout) -> bool:
    kinds = layout.node_type
    first = kinds[job.placement[0][0]]
    return all(kinds[node] == first for node, _ in job.placement)


def on_type(free: FreeGpus, kind: str, num_gpus: int) -> Placement | None:
    """The most consolidated placement of ``num_gpus`` GPUs on nodes of type ``kind`` alone."""
    layout = free.layout
    by_node = [f if t == kind else 0 for f, t in zip(free.by_node, layout.node_type, strict=True)]
    if sum(by_node) < num_gpus:
        return None
    by_rack = [sum(by_node[n] for n in nodes) for nodes in layout.rack_nodes]
    return pl.at_level(pl.Locality.CLUSTER, by_node, by_rack, layout, num_gpus)
