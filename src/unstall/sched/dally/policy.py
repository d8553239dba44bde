"""The Dally policy: queue order, then per job: best level if free, else network-sensitive
preemption if it pays, else the delay timer decides between waiting and a worse level; finally
spread jobs are re-consolidated when blocks free up. The tuned timer factor is reported as
telemetry (``dally.wait_factor``) so its course over time is part of the result."""

from __future__ import annotations

import bisect
import functools
import heapq
import random
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field

from unstall.sched.base import (
    ClusterSnapshot,
    Decision,
    JobView,
    Migrate,
    Placement,
    Preempt,
    SetTimer,
    Start,
)
from unstall.sched.dally.autotune import DelayTuner
from unstall.sched.dally.config import DallyConfig
from unstall.sched.dally.delay import accept_after_s
from unstall.sched.dally.preemption import (
    Tenants,
    cheapest_node_room,
    reconsolidation,
    single_node_tenants,
)
from unstall.sched.dally.sensitivity import is_consolidated, is_sensitive, placement_slowdown
from unstall.sched.free import FreeGpus
from unstall.sched.placement import Locality


def _group_of(job: JobView) -> tuple[int, float]:
    """A waiting job's group in the gittins order: its size and the service it has had (fixed
    while it waits)."""
    return (job.num_gpus, job.attained_gpu_s_at_change)


@dataclass
class _Held:
    """A job the delay mechanism is holding back: since when, and what it turned down."""

    since_s: float
    turned_down: float  # slowdown of the worst level it refused


@dataclass
class _PriorityVictims:
    """Running jobs for priority preemption in one round: (expected remaining seconds, GPUs)
    ascending, and (expected GPU-time, index, job) from the longest-holding down."""

    by_remaining: list[tuple[float, int]]
    by_gpu_s: list[tuple[float, int, JobView]]


@dataclass
class _Round:
    starts: list[Start] = field(default_factory=list)
    preempts: list[Preempt] = field(default_factory=list)
    migrations: list[Migrate] = field(default_factory=list)
    timers: list[SetTimer] = field(default_factory=list)
    taken: set[str] = field(default_factory=set)  # running jobs preempted or moved this round
    attempts: int = 0  # jobs for which a node was sought by preemption this round
    # Groups (size, service) for which priority preemption failed this round.
    priority_failed: set[tuple[int, float]] = field(default_factory=set)


class Dally:
    """Network-sensitive scheduling (delay timers per locality level, network-sensitive
    preemption and re-consolidation, an auto-tuner for the timers); knobs in :class:`DallyConfig`,
    ``name`` labels the results (ablation variants keep their own)."""

    name = "dally"
    needs_oracle = False

    def __init__(self, config: DallyConfig | None = None, name: str = "dally") -> None:
        self.config = config or DallyConfig()
        self.name = name
        self.tick_s = self.config.tick_s
        self.reset()

    def reset(self) -> None:
        c = self.config
        self.tuner = DelayTuner(
            factor=c.wait_factor,
            enabled=c.autotune,
            tune_every=c.tune_every,
            step=c.tune_step,
            min_factor=c.tune_min,
            max_factor=c.tune_max,
            prior_runtime_s=c.prior_runtime_s,
        )
        self._held: dict[str, _Held] = {}
        self._timers_set: dict[str, set[float]] = {}  # wake-up times asked for, by job
        self._consolidated_since: dict[str, float] = {}
        self._moved: dict[str, int] = {}  # preemptions and migrations this policy made, by job
        # Spread jobs for which no consolidated block was free, and the tenancy version then.
        self._no_block: dict[str, int] = {}
        # By GPU count, then (GPU count, service): a finish changes the figures of one size
        # class only (and of the classes with no finished job yet, which use every class's).
        self._expected_memo: dict[int, dict[tuple[int, float], float]] = {}
        # Incremental rounds (see ``decide``): the tenancy's version and what it was, and the
        # version under which the whole queue was last gone through.
        self._version = 0
        self._tenancy: tuple[tuple[int, ...], int, float] = ((), -1, -1.0)
        self._waiting_version = -1
        self._acted = False
        # The queue as this policy knows it (kept in step with the snapshot's, see
        # ``_sync_queue``), and its jobs by group of one size and service (gittins), each in
        # arrival order; a group's list keeps jobs that have started until it is compacted.
        self._queue: dict[str, JobView] = {}
        self._groups: dict[tuple[int, float], list[JobView]] = {}
        self._started_in_group: dict[tuple[int, float], int] = {}
        self._head_of_group: dict[tuple[int, float], int] = {}  # index of its oldest waiting job
        self._sensitive_at: dict[str, tuple[float, bool]] = {}  # by job: (congestion, answer)
        # Preemption retries: the earliest time each job tries again, and a heap of them.
        self._retry_at: dict[str, float] = {}
        self._retry_due: list[tuple[float, str]] = []
        # Single-node running jobs by node, built at the first preemption attempt under a
        # tenancy (kept while it lasts), and the victims' figures: slowdowns under that
        # tenancy; expected GPU-time by job, and the running jobs as priority preemption sorts
        # them, for the round (``_victims_round``: time and tenancy, see ``_new_victims_round``).
        self._tenants: Tenants | None = None
        self._tenants_version = -1
        self._victim_sensitivity: dict[str, float] = {}
        self._victim_gpu_s: dict[str, float] = {}
        self._priority_victims_kept: _PriorityVictims | None = None
        self._victims_round = (-1.0, -1)
        self.gave_up = 0  # sensitive jobs started below their best level so far

    # --- helpers -------------------------------------------------------------------------------

    def _priority(self, job: JobView, now: float) -> tuple[float, float, int]:
        if self.config.order == "fifo":
            return (0, job.submit_s, job.index)
        if self.config.order == "gittins":
            return (self._expected_gpu_s(job, now), job.submit_s, job.index)
        level = bisect.bisect_right(self.config.las_thresholds_gpu_s, job.attained_gpu_s(now))
        return (level, job.submit_s, job.index)

    def _expected_gpu_s(self, job: JobView, now: float) -> float:
        """GPU-seconds the job is expected to hold still, from finished jobs of its size."""
        return job.num_gpus * self._expected_remaining(job, now)

    def _outranks(self, job: JobView, victim: JobView, now: float) -> bool:
        """May ``job`` preempt ``victim`` for priority? (LAS: a lower level; gittins: expected
        to hold its GPUs ``preempt_ratio`` times less long; fifo: never.)"""
        if self.config.order == "gittins":
            return self._expected_gpu_s(victim, now) > self.config.preempt_ratio * (
                self._expected_gpu_s(job, now)
            )
        return self._priority(victim, now)[0] > self._priority(job, now)[0]

    def _expected_remaining(self, job: JobView, now: float) -> float:
        # Asked many times a round (queue order, every preemption attempt's victims), and the
        # same for every job of one size and service attained (most queued jobs have none):
        # memoised by those, until the tuner learns a new run time.
        key = (job.num_gpus, job.attained_gpu_s(now))
        memo = self._expected_memo.get(key[0])
        if memo is None:
            memo = self._expected_memo[key[0]] = {}
        expected = memo.get(key)
        if expected is None:
            if len(memo) > 100_000:  # running jobs' service is new every round
                memo.clear()
            expected = memo[key] = self.tuner.expected_remaining_s(key[1] / key[0], key[0])
        return expected

    def _observe_finishes(self, snapshot: ClusterSnapshot) -> None:
        if snapshot.finished:
            tuner = self.tuner
            learnt = {tuner.size_class(v.num_gpus) for v in snapshot.finished}
            for gpus in list(self._expected_memo):
                size_class = tuner.size_class(gpus)
                if size_class in learnt or not tuner.has_runtimes(size_class):
                    del self._expected_memo[gpus]
        for view in snapshot.finished:
            self._consolidated_since.pop(view.job_id, None)
            self._moved.pop(view.job_id, None)
            self._no_block.pop(view.job_id, None)
            self.tuner.observe_finish(
                view.attained_gpu_s(snapshot.now) / view.num_gpus, view.num_gpus
            )

    # --- the decision --------------------------------------------------------------------------

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        self._observe_finishes(snapshot)
        c = self.config
        # The tenancy (who runs where, what is free) changes only when a job finishes, when
        # this policy acted in the previous round, or with the congestion. A job left waiting
        # under the same tenancy would be left waiting again, so a round looks only at the jobs
        # new to the queue, those whose delay timer fired and those due to try preemption
        # again (see ``_preempt_for``) unless the tenancy changed: its work follows what
        # changed, not the length of the queue.
        # (The free GPUs are compared too: a backend that does not report every finish in
        # ``finished`` still gets a decision on the cluster as it is.)
        tenancy = (snapshot.free_by_node, len(snapshot.running), snapshot.congestion)
        if snapshot.finished or self._acted or tenancy != self._tenancy:
            self._version += 1
        self._tenancy = tenancy
        free = FreeGpus(snapshot)
        plan = _Round()
        now = snapshot.now
        fresh = self._sync_queue(snapshot.queued)
        due = self._due_retries(now)
        if self._waiting_version != self._version:
            # The tenancy changed: any waiting job may start now, so the whole queue is gone
            # through in order.
            self._waiting_version = self._version
            self._pass_all(snapshot, free, plan)
        else:
            todo = {j.job_id: j for j in fresh}
            for key in snapshot.fired_timers:
                view = self._queue.get(key.removeprefix("dally:"))
                if view is not None:
                    todo.setdefault(view.job_id, view)
            for view in due:
                todo.setdefault(view.job_id, view)
            for job in self._in_priority_order(list(todo.values()), now):
                if free.total == 0 and not c.preemption:
                    break
                if self._may_start(job, free, snapshot):
                    self._place(job, snapshot, free, plan)
        if c.preemption and snapshot.spread_running:
            self._reconsolidate(snapshot, free, plan)
        self._acted = bool(plan.starts or plan.preempts or plan.migrations)
        return Decision(
            starts=tuple(plan.starts),
            preemptions=tuple(plan.preempts),
            migrations=tuple(plan.migrations),
            timers=tuple(plan.timers),
            telemetry=(
                ("dally.wait_factor", self.tuner.factor),
                ("dally.sensitive_spread_starts", float(self.gave_up)),
            ),
        )

    def _in_priority_order(self, jobs: list[JobView], now: float) -> list[JobView]:
        """``jobs`` (waiting ones) sorted by :meth:`_priority`, by way of their groups (see
        :meth:`_groups_in_order`)."""
        if self.config.order != "gittins":
            return sorted(jobs, key=lambda j: self._priority(j, now))
        groups: dict[tuple[int, float], list[JobView]] = {}
        for j in sorted(jobs, key=lambda j: (j.submit_s, j.index)):
            groups.setdefault(_group_of(j), []).append(j)
        return [j for members, _ in self._groups_in_order(groups, now) for j in members]

    def _pass_all(self, snapshot: ClusterSnapshot, free: FreeGpus, plan: _Round) -> None:
        """Every waiting job in priority order, each placed if it may start; a group of one
        size whose next job cannot start is passed over whole (nothing its jobs could try frees
        GPUs), so the work follows the jobs that may start, not the length of the queue."""
        c = self.config
        queue = self._queue
        node_size = free.layout.gpus_per_node
        for members, one_size in self._queue_in_order(snapshot.now):
            for job in members:
                if queue.get(job.job_id) is not job:
                    continue  # started since it joined the group
                if free.total == 0 and not c.preemption:
                    return
                # Another job of a group that fits a node may be sensitive and seek one.
                group_may_seek_node = c.preemption and job.num_gpus <= node_size
                if not self._may_start(job, free, snapshot):
                    if one_size and not group_may_seek_node:
                        break  # the group's other jobs are as large, and may not preempt either
                    continue
                if (
                    not self._place(job, snapshot, free, plan)
                    and one_size
                    and not group_may_seek_node
                    and job.num_gpus > free.total
                ):
                    # It found too few GPUs free and priority preemption failed for it: its
                    # group's other jobs would ask the same, with the same answer.
                    break

    def _may_start(self, job: JobView, free: FreeGpus, snapshot: ClusterSnapshot) -> bool:
        """False when ``job`` cannot start this round, whatever is tried: it is larger than the
        free GPUs, and it may seek GPUs by neither kind of preemption now (see
        ``_may_try_priority``, and ``_may_try_preemption``: that one is only for sensitive
        jobs)."""
        if job.num_gpus <= free.total:
            return True
        if self._may_try_priority(job, free, snapshot.now):
            return True
        return self._may_try_preemption(job, free, snapshot.now) and self._sensitive(
            job, snapshot.congestion
        )

    def _sensitive(self, job: JobView, congestion: float) -> bool:
        """:func:`is_sensitive` of a waiting job, kept while the congestion stays the same."""
        known = self._sensitive_at.get(job.job_id)
        if known is None or known[0] != congestion:
            known = (congestion, is_sensitive(job, self.config.insensitive_below, congestion))
            self._sensitive_at[job.job_id] = known
        return known[1]

    def _sync_queue(self, queued: Collection[JobView]) -> list[JobView]:
        """Bring the kept queue in step with ``queued`` and return the jobs that joined it since
        the last round, in arrival order. The snapshot's queue is in arrival order, so those are
        found from its newest end; anything else (jobs gone or changed that this policy did not
        start) makes it start over from the snapshot."""
        known = self._queue
        fresh: list[JobView] = []
        newest_first: Iterator[JobView] | None
        try:
            newest_first = reversed(queued)  # type: ignore[call-overload]
        except TypeError:
            newest_first = None
        if newest_first is not None:
            for view in newest_first:
                if known.get(view.job_id) is view:
                    break
                fresh.append(view)
            fresh.reverse()
            if len(known) + len(fresh) == len(queued) and not any(v.job_id in known for v in fresh):
                for view in fresh:
                    self._join(view)
                return fresh
        fresh = [v for v in queued if known.get(v.job_id) is not v]
        self._queue, self._groups, self._started_in_group = {}, {}, {}
        self._head_of_group = {}
        for view in queued:
            self._join(view)
        return fresh

    def _join(self, job: JobView) -> None:
        self._queue[job.job_id] = job
        key = _group_of(job)
        members = self._groups.setdefault(key, [])
        if members and (members[-1].submit_s, members[-1].index) > (job.submit_s, job.index):
            bisect.insort(members, job, key=lambda j: (j.submit_s, j.index))
            self._head_of_group.pop(key, None)  # it may now come first
        else:
            members.append(job)

    def _leave(self, job: JobView) -> None:
        """``job`` starts: out of the kept queue; its group's list is compacted once more than
        half of it has started."""
        if self._queue.pop(job.job_id, None) is None:
            return
        key = _group_of(job)
        started = self._started_in_group.get(key, 0) + 1
        members = self._groups.get(key, [])
        if 2 * started > len(members):
            # A new list: a pass may be going through the old one.
            alive = [m for m in members if self._queue.get(m.job_id) is m]
            if alive:
                self._groups[key] = alive
            else:
                self._groups.pop(key, None)
            self._started_in_group.pop(key, None)
            self._head_of_group.pop(key, None)
        else:
            self._started_in_group[key] = started

    def _queue_in_order(self, now: float) -> list[tuple[list[JobView], bool]]:
        """The kept queue in :meth:`_priority` order as lists of jobs, each with whether its
        jobs are all of one size."""
        if self.config.order != "gittins":
            jobs = sorted(self._queue.values(), key=lambda j: self._priority(j, now))
            return [(jobs, False)]
        return self._groups_in_order(self._groups, now, kept=True)

    def _oldest_waiting(self, key: tuple[int, float], members: list[JobView]) -> JobView:
        """The first job of a kept group's list that still waits (the list keeps started jobs
        until it is compacted; an index a group, moved on as they start, keeps this cheap)."""
        queue = self._queue
        i = self._head_of_group.get(key, 0)
        while queue.get(members[i].job_id) is not members[i]:
            i += 1
        self._head_of_group[key] = i
        return members[i]

    def _groups_in_order(
        self, groups: dict[tuple[int, float], list[JobView]], now: float, *, kept: bool = False
    ) -> list[tuple[list[JobView], bool]]:
        """Groups of waiting jobs (one size and service each, members in arrival order) in the
        gittins order, each with whether its jobs are all of one size. A group's jobs share
        their expected GPU-time, so it is worked out once a group and the groups are sorted,
        not the jobs; groups that tie are merged in arrival order. With ``age_weight`` a group
        ranks by its expected GPU-time over ``1 + age_weight x wait / expected run time`` of its
        oldest waiting job (``kept``: ``groups`` is the kept queue's, whose lists hold started
        jobs too)."""
        by_rank: dict[float, list[tuple[int, float]]] = {}
        memo = self._expected_memo  # keyed like the groups: one look-up a group, mostly
        age_weight = self.config.age_weight
        for key, members in groups.items():
            of_size = memo.get(key[0])
            expected = None if of_size is None else of_size.get(key)
            if expected is None:
                expected = self._expected_remaining(members[0], now)
            rank = key[0] * expected  # _expected_gpu_s
            if age_weight and expected > 0:
                oldest = self._oldest_waiting(key, members) if kept else members[0]
                rank /= 1.0 + age_weight * oldest.waiting_s(now) / expected
            by_rank.setdefault(rank, []).append(key)
        ordered: list[tuple[list[JobView], bool]] = []
        for rank in sorted(by_rank):
            keys = by_rank[rank]
            if len(keys) == 1:
                ordered.append((groups[keys[0]], True))
                continue
            merged = [j for k in keys for j in groups[k]]
            merged.sort(key=lambda j: (j.submit_s, j.index))
            ordered.append((merged, len({k[0] for k in keys}) == 1))
        return ordered

    def _due_retries(self, now: float) -> list[JobView]:
        """Waiting jobs whose next preemption attempt is due (see ``_preempt_for``)."""
        due: list[JobView] = []
        heap = self._retry_due
        while heap and heap[0][0] <= now:
            at, job_id = heapq.heappop(heap)
            view = self._queue.get(job_id)
            if self._retry_at.get(job_id) == at and view is not None:
                due.append(view)
        return due

    def _place(self, job: JobView, snapshot: ClusterSnapshot, free: FreeGpus, plan: _Round) -> bool:
        """Start ``job`` if it should start now (True), else leave it waiting (False)."""
        c = self.config
        now = snapshot.now
        placement = free.consolidated(job.num_gpus)
        if placement is None and self._may_try_preemption(job, free, now):
            placement = self._preempt_for(job, snapshot, free, plan)
        if placement is not None:
            self._start(job, placement, 1.0, free, plan, now)
            return True
        fallback = self._fallback(job, free)
        if (
            fallback is None
            and self._may_try_priority(job, free, now)
            and _group_of(job) not in plan.priority_failed
        ):
            placement = self._preempt_for_priority(job, snapshot, free, plan)
            if placement is not None:
                self._start(job, placement, 1.0, free, plan, now)
                return True
        if fallback is None:
            return False  # no room at any level: wait for GPUs
        slowdown = placement_slowdown(
            job, fallback, free.layout, snapshot.congestion, snapshot.spread_jobs_by_node
        )
        after = 0.0
        if c.delay:
            after = accept_after_s(
                slowdown,
                factor=self.tuner.factor,
                expected_runtime_s=self._expected_remaining(job, now),
                max_wait_s=c.max_wait_s,
                insensitive_below=c.insensitive_below,
            )
        # The timer runs from when the job was first held back for locality, not from when it
        # queued: a job that waited behind higher-priority jobs (long, on a loaded cluster, and
        # longest for the large jobs the aging of the order then lifts) has not yet waited for
        # a better placement, and would otherwise take the first spread one it is offered,
        # sharing NICs with other spread jobs it slows too.
        held = self._held.get(job.job_id)
        if (0.0 if held is None else now - held.since_s) >= after:
            if slowdown >= c.insensitive_below:
                self.gave_up += 1  # a sensitive job accepted a worse level
            self._start(job, fallback, slowdown, free, plan, now)
            return True
        held = self._held.setdefault(job.job_id, _Held(since_s=now, turned_down=1.0))
        held.turned_down = max(held.turned_down, slowdown)
        wake = held.since_s + after
        wakes = self._timers_set.setdefault(job.job_id, set())
        if wake not in wakes:
            wakes.add(wake)
            plan.timers.append(SetTimer(at_s=wake, key=f"dally:{job.job_id}"))
        return False

    def _fallback(self, job: JobView, free: FreeGpus) -> Placement | None:
        """The least-bad placement free now: within one rack if possible, else anywhere, but
        over several racks only for a job that no rack can hold, unless ``span_racks``."""
        found = free.at_level(Locality.RACK, job.num_gpus)
        if found is not None or not (
            self.config.span_racks or job.num_gpus > max(free.layout.rack_gpus)
        ):
            return found
        return free.best(job.num_gpus)

    def _start(
        self,
        job: JobView,
        placement: tuple[tuple[int, int], ...],
        slowdown: float,
        free: FreeGpus,
        plan: _Round,
        now: float,
    ) -> None:
        free.take(placement)
        plan.starts.append(Start(job.job_id, placement))
        self.tuner.observe_wait(job.waiting_s(now), requeued=job.preemptions > 0)
        held = self._held.pop(job.job_id, None)
        self._timers_set.pop(job.job_id, None)
        self._leave(job)
        self._sensitive_at.pop(job.job_id, None)
        self._retry_at.pop(job.job_id, None)
        if held is None and slowdown < self.config.insensitive_below:
            return  # neither held nor hurt: nothing for the tuner to learn
        self.tuner.observe_start(
            gpus=job.num_gpus,
            held_s=0.0 if held is None else now - held.since_s,
            avoided=held.turned_down if held is not None and slowdown <= 1.0 else 1.0,
            suffered=slowdown,
            expected_s=self._expected_remaining(job, now),
        )

    def _may_try_preemption(self, job: JobView, free: FreeGpus, now: float) -> bool:
        """Whether ``job`` may seek a node by preemption now: it fits one node, and it is not
        waiting out a retry after a failed attempt (see ``_preempt_for``)."""
        return (
            self.config.preemption
            and job.num_gpus <= free.layout.gpus_per_node
            and now >= self._retry_at.get(job.job_id, now)
        )

    def _may_try_priority(self, job: JobView, free: FreeGpus, now: float) -> bool:
        """Whether ``job`` may seek GPUs by priority preemption now (see
        :meth:`_preempt_for_priority`): the gittins order with it on (and preemption at all),
        the job is larger than a node, and it is not waiting out a retry after a failed
        attempt. Only jobs larger than a node: they need several nodes' GPUs free at once,
        which the smaller jobs behind them keep taking as they free, while a job that fits a
        node gets one as soon as any tenant of it finishes (or, if sensitive, by the
        preemption for locality); on traces like the embedded one, letting every job preempt
        for priority gained nothing more and cost time (Philly: 6,200 attempts, 1 preemption)."""
        c = self.config
        return (
            c.priority_preemption
            and c.preemption
            and c.order == "gittins"
            and job.num_gpus > free.layout.gpus_per_node
            and now >= self._retry_at.get(job.job_id, now)
        )

    def _priority_victims(self, snapshot: ClusterSnapshot) -> _PriorityVictims:
        """The running jobs as priority preemption sees them this round (built at its first
        attempt of the round, kept for the round)."""
        now = snapshot.now
        self._new_victims_round(now)
        kept = self._priority_victims_kept
        if kept is not None:
            return kept
        tuner, gpu_s = self.tuner, self._victim_gpu_s
        by_remaining: list[tuple[float, int]] = []
        by_gpu_s: list[tuple[float, int, JobView]] = []
        for v in snapshot.running:
            g = v.num_gpus
            remaining = tuner.expected_remaining_s(v.attained_gpu_s(now) / g, g)
            by_remaining.append((remaining, g))
            # The same figure the preemption for locality asks for (see ``_preempt_for``).
            expected = gpu_s[v.job_id] = g * remaining
            by_gpu_s.append((expected, v.index, v))
        by_remaining.sort()
        by_gpu_s.sort(key=lambda t: (-t[0], t[1]))  # the lowest in the order first
        kept = self._priority_victims_kept = _PriorityVictims(by_remaining, by_gpu_s)
        return kept

    def _new_victims_round(self, now: float) -> None:
        """Forget the running jobs' figures kept for the last round when this is a new one
        (another time or tenancy): running jobs' service grows, and the tuner learns at
        finishes."""
        if self._victims_round != (now, self._version):
            self._victims_round = (now, self._version)
            self._victim_gpu_s.clear()
            self._priority_victims_kept = None

    def _preemptions_spent(self, plan: _Round) -> bool:
        """Whether this round's preemption budget is spent (moves made, or jobs that sought
        room): each attempt looks at every running job, so the work per round is bounded."""
        c = self.config
        return (
            len(plan.preempts) + len(plan.migrations) >= c.max_preemptions_per_round
            or plan.attempts >= c.max_preemption_attempts_per_round
        )

    def _retry_after_failure(self, job: JobView, now: float) -> None:
        """A failed preemption attempt (of either kind) is tried again after a share of the
        time the job has waited so far (at least ``retry_min_s``): running jobs age (their
        expected remaining time changes), so it may succeed later even if nothing else changes,
        but a job that has waited for hours loses little by trying once an hour, and the work
        stays small."""
        c = self.config
        self._retry_later(
            job.job_id, now + max(c.retry_min_s, c.retry_fraction * job.waiting_s(now))
        )

    def _preempt_for_priority(
        self, job: JobView, snapshot: ClusterSnapshot, free: FreeGpus, plan: _Round
    ) -> tuple[tuple[int, int], ...] | None:
        """Priority preemption (gittins order): ``job``, larger than a node, finds too few GPUs
        free; running jobs expected to hold their GPUs ``priority_ratio`` times longer than it
        (the lowest in the order first) are preempted to start it now, when the wait that saves
        it beats what they lose by ``gain_margin``. Gain: its GPUs times its expected wait,
        until enough running jobs are expected to finish to free its GPUs (an underestimate:
        jobs ahead of it would take some). Cost: per victim, its GPUs times its restore (more
        for a job moved before) plus the job's expected run time (the least it waits to get its
        GPUs back). Returns the job's placement, with the victims' preemptions added to
        ``plan``."""
        c = self.config
        now = snapshot.now
        if self._preemptions_spent(plan):
            # A round that preempted is followed by a pass over the whole queue, where the job
            # is asked again.
            return None
        plan.attempts += 1
        victims = self._priority_victims(snapshot)
        need = job.num_gpus
        expected_s = self._expected_remaining(job, now)
        threshold = c.priority_ratio * need * expected_s  # _outranks' test, priority's ratio
        moved, taken, cap = self._moved, plan.taken, c.max_moves_per_job
        chosen: list[JobView] = []
        cost = 0.0
        got = free.total
        for gpu_s, _, victim in victims.by_gpu_s:
            if got >= need or gpu_s <= threshold:
                break
            times_moved = moved.get(victim.job_id, 0)
            if victim.job_id in taken or times_moved >= cap:
                continue
            chosen.append(victim)
            got += victim.num_gpus
            cost += victim.num_gpus * (c.restore_s * (1 + times_moved) + expected_s)
        wait = 0.0
        have = free.total
        for remaining, gpus in victims.by_remaining:
            if have >= need:
                break
            have += gpus
            wait = remaining
        placement = None
        if got >= need and need * wait > c.gain_margin * cost:
            for victim in chosen:
                free.give(victim.placement)
            # Its best level (victims free whole placements, mostly consolidated), else a worse
            # one only if that costs it nothing to speak of: a sensitive job is not started
            # spread here, past its delay timer.
            placement = free.consolidated(need)
            if placement is None:
                placement = self._fallback(job, free)
                if placement is not None and (
                    placement_slowdown(
                        job,
                        placement,
                        free.layout,
                        snapshot.congestion,
                        snapshot.spread_jobs_by_node,
                    )
                    >= c.insensitive_below
                ):
                    placement = None
            if placement is None:
                for victim in chosen:
                    free.take(victim.placement)
        if placement is None:
            # The jobs of its group (its size and service) would get the same answer this round.
            plan.priority_failed.add(_group_of(job))
            self._retry_after_failure(job, now)
            return None
        for victim in chosen:
            taken.add(victim.job_id)
            moved[victim.job_id] = moved.get(victim.job_id, 0) + 1
            plan.preempts.append(Preempt(victim.job_id, f"priority for {job.job_id}"))
        return placement

    def _preempt_for(
        self, job: JobView, snapshot: ClusterSnapshot, free: FreeGpus, plan: _Round
    ) -> tuple[tuple[int, int], ...] | None:
        c = self.config
        now = snapshot.now
        if not self._sensitive(job, snapshot.congestion):
            return None
        if self._preemptions_spent(plan):
            self._retry_later(job.job_id, now)  # the jobs turned away try in the next round
            return None
        plan.attempts += 1
        sensitivity = job.sensitivity.at(False, snapshot.congestion)
        if self._tenants is None or self._tenants_version != self._version:
            self._tenants = single_node_tenants(snapshot.running)
            self._tenants_version = self._version
            self._victim_sensitivity.clear()
        self._new_victims_round(now)
        taken = plan.taken
        slowdowns, gpu_s = self._victim_sensitivity, self._victim_gpu_s
        gittins = c.order == "gittins"
        threshold = c.preempt_ratio * self._expected_gpu_s(job, now) if gittins else 0.0

        # The victims' figures are asked for by every attempt of the round: kept for the round.
        moved = self._moved
        cap = c.max_moves_per_job

        def may_move(victim: JobView) -> bool:
            if not c.move_victims or victim.job_id in taken or moved.get(victim.job_id, 0) >= cap:
                return False
            slowdown = slowdowns.get(victim.job_id)
            if slowdown is None:
                slowdown = victim.sensitivity.at(False, snapshot.congestion)
                slowdowns[victim.job_id] = slowdown
            return slowdown < sensitivity

        def may_preempt(victim: JobView) -> bool:
            if victim.job_id in taken or moved.get(victim.job_id, 0) >= cap:
                return False
            if not gittins:
                return self._outranks(job, victim, now)
            expected = gpu_s.get(victim.job_id)
            if expected is None:
                # _expected_gpu_s without its memo: a running job's service is new each round.
                g = victim.num_gpus
                expected = g * self.tuner.expected_remaining_s(victim.attained_gpu_s(now) / g, g)
                gpu_s[victim.job_id] = expected
            return expected > threshold  # _outranks, from the round's figures

        gain = job.num_gpus * (sensitivity - 1.0) * self._expected_remaining(job, now)
        room = cheapest_node_room(
            job,
            free,
            self._tenants,
            may_move,
            may_preempt,
            move_cost_s=c.restore_s,
            # A preempted job restores its checkpoint and first waits in the queue again.
            preempt_cost_s=c.restore_s + self.tuner.expected_requeue_wait_s(c.learn_requeue),
            max_cost_gpu_s=gain / c.gain_margin,
            # A job moved before pays more for each move: churn is not free to its owner.
            history=lambda victim: 1.0 + moved.get(victim.job_id, 0),
            tenant_gpus=self._tenants.gpus,
        )
        if room is None or gain <= c.gain_margin * room.cost_gpu_s:
            self._retry_after_failure(job, now)
            return None
        for victim, dest in room.moves:
            free.give(victim.placement)
            free.take(dest)
            plan.taken.add(victim.job_id)
            moved[victim.job_id] = moved.get(victim.job_id, 0) + 1
            plan.migrations.append(Migrate(victim.job_id, dest, f"room for {job.job_id}"))
        for victim in room.preempts:
            free.give(victim.placement)
            plan.taken.add(victim.job_id)
            moved[victim.job_id] = moved.get(victim.job_id, 0) + 1
            plan.preempts.append(Preempt(victim.job_id, f"consolidated node for {job.job_id}"))
        return ((room.node, job.num_gpus),)

    def _retry_later(self, job_id: str, at_s: float) -> None:
        self._retry_at[job_id] = at_s
        heapq.heappush(self._retry_due, (at_s, job_id))

    def _reconsolidate(self, snapshot: ClusterSnapshot, free: FreeGpus, plan: _Round) -> None:
        c = self.config
        now = snapshot.now
        for job in snapshot.spread_running:
            if len(plan.migrations) >= c.max_migrations_per_round or free.total == 0:
                return
            if job.job_id in plan.taken or len(job.placement) <= 1:
                continue
            # A running job's placement only changes with its state (``changed_s``): most spread
            # jobs are consolidated over a rack already, so remember that instead of re-checking.
            if self._consolidated_since.get(job.job_id) == job.changed_s:
                continue
            if is_consolidated(job.placement, job.num_gpus, snapshot.layout):
                self._consolidated_since[job.job_id] = job.changed_s
                continue
            # Moving a job to a consolidated block is for its own good: its history raises the
            # bar (the restore it pays again) but no cap applies, or a job spread badly after
            # being moved for others could stay spread for good.
            if self._no_block.get(job.job_id) == self._version:
                continue  # no block was free for it, and no GPU has been freed since
            times_moved = self._moved.get(job.job_id, 0)
            target = reconsolidation(
                job,
                free,
                functools.partial(self._expected_remaining, job, now),
                c.restore_s * (1 + times_moved),
                c.gain_margin,
                snapshot.congestion,
                snapshot.spread_jobs_by_node,
                on_no_block=functools.partial(
                    self._no_block.__setitem__, job.job_id, self._version
                ),
            )
            if target is not None:
                free.take(target)
                plan.taken.add(job.job_id)
                self._moved[job.job_id] = times_moved + 1
                plan.migrations.append(Migrate(job.job_id, target, "re-consolidate"))
