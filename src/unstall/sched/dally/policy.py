"""The Dally policy: queue order, then per job: best level if free, else network-sensitive
preemption if it pays, else the delay timer decides between waiting and a worse level; finally
spread jobs are re-consolidated when blocks free up. The tuned timer factor is reported as
telemetry (``dally.wait_factor``) so its course over time is part of the result."""

from __future__ import annotations

import bisect
import functools
import heapq
import itertools
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from unstall.sched.base import (
    ClusterLayout,
    ClusterSnapshot,
    Decision,
    JobView,
    Migrate,
    Placement,
    PolicyBase,
    Preempt,
    SetTimer,
    Start,
)
from unstall.sched.dally.autotune import DelayTuner
from unstall.sched.dally.config import DallyConfig
from unstall.sched.dally.delay import accept_after_s
from unstall.sched.dally.expected_runtimes import ExpectedRemaining
from unstall.sched.dally.preemption import RoomPlan, cheapest_node_room, reconsolidation
from unstall.sched.dally.queue_index import Group, QueueIndex, group_of
from unstall.sched.dally.sensitivity import is_consolidated, is_sensitive, placement_slowdown
from unstall.sched.dally.service import service_room
from unstall.sched.dally.types import consolidated_option, spread_option, upgrade_target
from unstall.sched.dally.victim_figures import VictimFigures
from unstall.sched.free import FreeGpus
from unstall.sched.placement import Locality, TypeClaims


@dataclass
class _Held:
    """A job the delay mechanism is holding back: since when, and what it turned down."""

    since_s: float
    turned_down: float  # slowdown of the worst level it refused


@dataclass
class _Round:
    starts: list[Start] = field(default_factory=list)
    preempts: list[Preempt] = field(default_factory=list)
    migrations: list[Migrate] = field(default_factory=list)
    timers: list[SetTimer] = field(default_factory=list)
    taken: set[str] = field(default_factory=set)  # running jobs preempted or moved this round
    attempts: int = 0  # jobs for which a node was sought by preemption this round
    # Groups (size, service) for which priority preemption failed this round.
    priority_failed: set[Group] = field(default_factory=set)
    # Several GPU types: which waiting jobs the fast GPUs are kept for (see ``_place_typed``).
    claims: TypeClaims | None = None


class Dally(PolicyBase):
    """Network-sensitive scheduling (delay timers per locality level, network-sensitive
    preemption and re-consolidation, an auto-tuner for the timers); knobs in :class:`DallyConfig`,
    ``name`` labels the results (ablation variants keep their own)."""

    name = "dally"

    def __init__(self, config: DallyConfig | None = None, name: str = "dally") -> None:
        self.config = config or DallyConfig()
        self.name = name
        self.tick_s = self.config.tick_s  # PolicyBase's, from the config
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
        # Spread running jobs' slowdown where they run, with what it was worked out from (see
        # ``_slowdown_where_running``).
        self._slowdown_where: dict[
            str, tuple[JobView, ClusterLayout, float, tuple[int, ...], float]
        ] = {}
        self._expected = ExpectedRemaining(self.tuner)  # memoised expected run times
        # Incremental rounds (see ``decide``): the tenancy's version and what it was, and the
        # version under which the whole queue was last gone through.
        self._version = 0
        self._tenancy: tuple[tuple[int, ...], int, float] = ((), -1, -1.0)
        self._waiting_version = -1
        self._acted = False
        # The queue as this policy knows it, kept in step with the snapshot's.
        self._queue = QueueIndex(self._queue_rank())
        self._sensitive_at: dict[str, tuple[float, bool]] = {}  # by job: (congestion, answer)
        # Preemption retries: the earliest time each job tries again, and a heap of them.
        self._retry_at: dict[str, float] = {}
        self._retry_due: list[tuple[float, str]] = []
        self._victims = VictimFigures(self.tuner)  # running jobs as preemption candidates
        self.gave_up = 0  # sensitive jobs started below their best level so far

    # --- helpers -------------------------------------------------------------------------------

    def _priority(self, job: JobView, now: float) -> tuple[float, float, int]:
        if self.config.order == "gittins":
            return (self._expected_gpu_s(job, now), job.submit_s, job.index)
        return (self._level(job, now), job.submit_s, job.index)

    def _level(self, job: JobView, now: float) -> int:
        """:meth:`_priority`'s rank in the fifo and las orders: 0 in fifo (no job ranks above
        another), the attained-service level in las."""
        if self.config.order == "fifo":
            return 0
        return _las_level(self.config.las_thresholds_gpu_s, job.attained_gpu_s(now))

    def _outranked_by(self, job: JobView, now: float) -> Callable[[JobView], bool]:
        """Which running jobs ``job`` outranks: :meth:`_outranks` with the job's side worked
        out once (every running job may be asked about). In las with its thresholds
        ascending, as they are meant to be, a job of level L outranks the jobs whose service
        has reached the L-th threshold (where the level's bisect passes L): one comparison a
        victim. Otherwise their levels are compared (fifo: all 0, none outranks another)."""
        c = self.config
        if c.order == "gittins":
            bar = c.preempt_ratio * self._expected_gpu_s(job, now)
            return lambda victim: self._expected_gpu_s(victim, now) > bar
        level = self._level(job, now)
        thresholds = c.las_thresholds_gpu_s
        if c.order == "las" and all(lo < hi for lo, hi in itertools.pairwise(thresholds)):
            if level >= len(thresholds):
                return lambda victim: False  # no level above the top one
            bar = thresholds[level]
            return lambda victim: victim.attained_gpu_s(now) >= bar
        return lambda victim: self._level(victim, now) > level

    def _queue_rank(self) -> Callable[[JobView], int] | None:
        """What the queue index keeps the waiting jobs by besides their groups: :meth:`_level`
        in the fifo and las orders (a waiting job's service, so its level, is fixed while it
        waits: the index keeps each level's jobs in arrival order, which is the priority
        order, and a pass over the queue needs no sort); nothing in gittins (it ranks groups).
        The thresholds are bound now: a job leaves the index under the rank it joined it with
        (:meth:`retune` brings in new ones)."""
        c = self.config
        if c.order == "gittins":
            return None
        if c.order == "fifo":
            return lambda job: 0
        return functools.partial(_las_waiting_level, c.las_thresholds_gpu_s)

    def _expected_gpu_s(self, job: JobView, now: float) -> float:
        """GPU-seconds the job is expected to hold still, from finished jobs of its size."""
        return job.num_gpus * self._expected.of(job, now)

    def _outranks(self, job: JobView, victim: JobView, now: float) -> bool:
        """May ``job`` preempt ``victim`` for priority? (LAS: a lower level; gittins: expected
        to hold its GPUs ``preempt_ratio`` times less long; fifo: never.)"""
        if self.config.order == "gittins":
            return self._expected_gpu_s(victim, now) > self.config.preempt_ratio * (
                self._expected_gpu_s(job, now)
            )
        return self._level(victim, now) > self._level(job, now)

    def _observe_finishes(self, snapshot: ClusterSnapshot) -> None:
        self._expected.forget_learnt(snapshot.finished)
        for view in snapshot.finished:
            self._consolidated_since.pop(view.job_id, None)
            self._moved.pop(view.job_id, None)
            self._no_block.pop(view.job_id, None)
            self._slowdown_where.pop(view.job_id, None)
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
        fresh = self._queue.sync(snapshot.queued)
        due = self._due_retries(now)
        typed = not snapshot.layout.one_type
        if typed and c.preemption:
            # Several GPU types: running jobs move to a faster type (or a consolidated block)
            # first, so that the slower GPUs they leave go to the waiting jobs this round.
            self._retype(snapshot, free, plan)
        if self._waiting_version != self._version:
            # The tenancy changed: any waiting job may start now, so the whole queue is gone
            # through in order.
            self._waiting_version = self._version
            if typed:
                plan.claims = self._claims(
                    (j for members, _ in self._queue_in_order(now) for j in members), free
                )
            self._pass_all(snapshot, free, plan)
        else:
            todo = {j.job_id: j for j in fresh}
            for key in snapshot.fired_timers:
                view = self._queue.by_id.get(key.removeprefix("dally:"))
                if view is not None:
                    todo.setdefault(view.job_id, view)
            for view in due:
                todo.setdefault(view.job_id, view)
            ordered = self._in_priority_order(list(todo.values()), now)
            if typed:
                plan.claims = self._claims(ordered, free)
            for job in ordered:
                if free.total == 0 and not c.preemption:
                    break
                if self._may_start(job, free, snapshot):
                    self._place(job, snapshot, free, plan)
        if c.preemption and snapshot.spread_running and not typed:
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
        groups: dict[Group, list[JobView]] = {}
        for j in sorted(jobs, key=lambda j: (j.submit_s, j.index)):
            groups.setdefault(group_of(j), []).append(j)
        return [j for members, _ in self._groups_in_order(groups, now) for j in members]

    def _pass_all(self, snapshot: ClusterSnapshot, free: FreeGpus, plan: _Round) -> None:
        """Every waiting job in priority order, each placed if it may start; a group of one
        size whose next job cannot start is passed over whole (nothing its jobs could try frees
        GPUs), so the work follows the jobs that may start, not the length of the queue."""
        c = self.config
        queue = self._queue.by_id
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
        now = snapshot.now
        if now < self._retry_at.get(job.job_id, now):
            # Waiting out a retry, it may try no kind of preemption (each ``_may_try_*`` says
            # so): most of a long queue is, and this is asked of every job of a pass.
            return False
        if self._may_try_priority(job, free, now):
            return True
        if self._may_try_service(job, free, now):
            return True
        return self._may_try_preemption(job, free, now) and self._sensitive(
            job, snapshot.congestion
        )

    def _sensitive(self, job: JobView, congestion: float) -> bool:
        """:func:`is_sensitive` of a waiting job, kept while the congestion stays the same."""
        known = self._sensitive_at.get(job.job_id)
        if known is None or known[0] != congestion:
            known = (congestion, is_sensitive(job, self.config.insensitive_below, congestion))
            self._sensitive_at[job.job_id] = known
        return known[1]

    def _queue_in_order(self, now: float) -> list[tuple[list[JobView], bool]]:
        """The kept queue in :meth:`_priority` order as lists of jobs, each with whether its
        jobs are all of one size."""
        if self.config.order != "gittins":
            # Each level's jobs in arrival order, kept by the index (see ``_queue_rank``).
            levels = self._queue.ranks
            return [(levels[level], False) for level in sorted(levels)]
        return self._groups_in_order(self._queue.groups, now, kept=True)

    def _groups_in_order(
        self, groups: dict[Group, list[JobView]], now: float, *, kept: bool = False
    ) -> list[tuple[list[JobView], bool]]:
        """Groups of waiting jobs (one size and service each, members in arrival order) in the
        gittins order, each with whether its jobs are all of one size. A group's jobs share
        their expected GPU-time, so it is worked out once a group and the groups are sorted,
        not the jobs; groups that tie are merged in arrival order. With ``age_weight`` a group
        ranks by its expected GPU-time over ``1 + age_weight x wait / expected run time`` of its
        oldest waiting job (``kept``: ``groups`` is the kept queue's, whose lists hold started
        jobs too)."""
        by_rank: dict[float, list[Group]] = {}
        expected_of = self._expected.of_group
        age_weight = self.config.age_weight
        for key, members in groups.items():
            expected = expected_of(key, members[0], now)
            rank = key[0] * expected  # _expected_gpu_s
            if age_weight and expected > 0:
                oldest = self._queue.oldest_waiting(key, members) if kept else members[0]
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
            view = self._queue.by_id.get(job_id)
            if self._retry_at.get(job_id) == at and view is not None:
                due.append(view)
        return due

    def _place(self, job: JobView, snapshot: ClusterSnapshot, free: FreeGpus, plan: _Round) -> bool:
        """Start ``job`` if it should start now (True), else leave it waiting (False)."""
        if plan.claims is not None:
            try:
                return self._place_typed(job, snapshot, free, plan)
            finally:
                plan.claims.done(job)
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
            and group_of(job) not in plan.priority_failed
        ):
            placement = self._preempt_for_priority(job, snapshot, free, plan)
            if placement is not None:
                self._start(job, placement, 1.0, free, plan, now)
                return True
        if fallback is None and self._may_try_service(job, free, now):
            placement = self._preempt_for_service(job, snapshot, free, plan)
            if placement is not None:
                self._start(job, placement, 1.0, free, plan, now)
                return True
        if fallback is None:
            return False  # no room at any level: wait for GPUs
        slowdown = placement_slowdown(
            job, fallback, free.layout, snapshot.congestion, snapshot.spread_jobs_by_node
        )
        after = self._delay_s(job, slowdown, now)
        if self._waited(job, after, now):
            if slowdown >= c.insensitive_below:
                self.gave_up += 1  # a sensitive job accepted a worse level
            self._start(job, fallback, slowdown, free, plan, now)
            return True
        self._hold(job, slowdown, after, now, plan)
        return False

    def _delay_s(self, job: JobView, slowdown: float, now: float) -> float:
        """How long ``job`` waits for a better placement before it takes one ``slowdown``
        times slower (0 with the delay off)."""
        c = self.config
        if not c.delay:
            return 0.0
        return accept_after_s(
            slowdown,
            factor=self.tuner.factor,
            expected_runtime_s=self._expected.of(job, now),
            max_wait_s=c.max_wait_s,
            insensitive_below=c.insensitive_below,
        )

    def _waited(self, job: JobView, after_s: float, now: float) -> bool:
        """Whether ``job`` has been held back for locality ``after_s`` already. The timer runs
        from when it was first held back, not from when it queued: a job that waited behind
        higher-priority jobs (long, on a loaded cluster, and longest for the large jobs the
        aging of the order then lifts) has not yet waited for a better placement, and would
        otherwise take the first spread one it is offered, sharing NICs with other spread jobs
        it slows too."""
        held = self._held.get(job.job_id)
        return (0.0 if held is None else now - held.since_s) >= after_s

    def _hold(
        self, job: JobView, slowdown: float, after_s: float, now: float, plan: _Round
    ) -> None:
        """Hold ``job`` back from a placement ``slowdown`` times slower, with a timer for when
        it may take one (set once per wake-up time)."""
        held = self._held.setdefault(job.job_id, _Held(since_s=now, turned_down=1.0))
        held.turned_down = max(held.turned_down, slowdown)
        wake = held.since_s + after_s
        wakes = self._timers_set.setdefault(job.job_id, set())
        if wake not in wakes:
            wakes.add(wake)
            plan.timers.append(SetTimer(at_s=wake, key=f"dally:{job.job_id}"))

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
        self._queue.leave(job)
        self._sensitive_at.pop(job.job_id, None)
        self._retry_at.pop(job.job_id, None)
        if held is None and slowdown < self.config.insensitive_below:
            return  # neither held nor hurt: nothing for the tuner to learn
        self.tuner.observe_start(
            gpus=job.num_gpus,
            held_s=0.0 if held is None else now - held.since_s,
            avoided=held.turned_down if held is not None and slowdown <= 1.0 else 1.0,
            suffered=slowdown,
            expected_s=self._expected.of(job, now),
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
        preemption for locality); letting every job preempt for priority gained nothing more
        and cost time (benchmarks/BENCHMARKS.md, "Dally against the baselines")."""
        c = self.config
        return (
            c.priority_preemption
            and c.preemption
            and c.order == "gittins"
            and job.num_gpus > free.layout.gpus_per_node
            and now >= self._retry_at.get(job.job_id, now)
        )

    def _may_try_service(self, job: JobView, free: FreeGpus, now: float) -> bool:
        """Whether ``job`` may seek GPUs by preemption for service now (``service_preemption``,
        see :mod:`~unstall.sched.dally.service`): it finds too few GPUs free, the order ranks
        by service (not fifo), and it is not waiting out a retry after a failed attempt."""
        c = self.config
        return (
            c.service_preemption
            and c.preemption
            and c.order != "fifo"
            and job.num_gpus > free.total
            and now >= self._retry_at.get(job.job_id, now)
        )

    def _preempt_for_service(
        self, job: JobView, snapshot: ClusterSnapshot, free: FreeGpus, plan: _Round
    ) -> Placement | None:
        """Preemption for service: the running jobs ``job`` outranks (lowest first) make room
        for it; their preemptions are added to ``plan``. None (and a retry later) when they
        cannot, or this round's preemption budget is spent."""
        now = snapshot.now
        if self._preemptions_spent(plan):
            return None
        plan.attempts += 1
        c = self.config
        moved = self._moved
        # _priority's rank of the victims (the job's side of _outranks is worked out once:
        # every running job is asked about).
        outranked = self._outranked_by(job, now)
        rank: Callable[[JobView], float]
        if c.order == "gittins":
            rank = functools.partial(self._expected_gpu_s, now=now)
        else:
            rank = functools.partial(self._level, now=now)
        found = service_room(
            job,
            snapshot.running,
            free,
            # As in Tiresias, rank alone decides: max_moves_per_job does not spare a victim
            # here (it did, measured: 1.064 of the best fixed setting per trace against 1.019
            # on the traces like the embedded one; BENCHMARKS.md, "Dally's look-ahead tuner").
            outranks=lambda _job, victim: outranked(victim),
            rank=rank,
            taken=plan.taken,
            max_victims=c.max_preemptions_per_round - len(plan.preempts) - len(plan.migrations),
        )
        if found is None:
            self._retry_after_failure(job, now)
            return None
        victims, placement = found
        for victim in victims:
            plan.taken.add(victim.job_id)
            moved[victim.job_id] = moved.get(victim.job_id, 0) + 1
            plan.preempts.append(Preempt(victim.job_id, f"service for {job.job_id}"))
        return placement

    def retune(self, config: DallyConfig) -> None:
        """Adopt ``config``'s settings from the next round on, keeping what was learnt (run
        times, waits, the queue): the look-ahead tuner (:mod:`unstall.sim.lookahead`) switches
        settings this way. The delay factor restarts at ``config.wait_factor``; the whole queue
        is gone through again in the next round."""
        self.config = config
        self.tick_s = config.tick_s
        self.tuner.factor = config.wait_factor
        self.tuner.enabled = config.autotune
        self._version += 1
        self._expected = ExpectedRemaining(self.tuner)
        self._queue.rank_by(self._queue_rank())  # the order or its levels may have changed

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
        victims = self._victims.for_priority(snapshot.running, now, self._version)
        need = job.num_gpus
        expected_s = self._expected.of(job, now)
        chosen, cost = self._priority_victims_of(job, victims.by_gpu_s, expected_s, free, plan)
        wait = _expected_wait(victims.by_remaining, free.total, need)
        freed = sum(v.num_gpus for v in chosen)
        placement = None
        if free.total + freed >= need and need * wait > c.gain_margin * cost:
            placement = self._placement_after(job, chosen, snapshot, free)
        if placement is None:
            # The jobs of its group (its size and service) would get the same answer this round.
            plan.priority_failed.add(group_of(job))
            self._retry_after_failure(job, now)
            return None
        moved = self._moved
        for victim in chosen:
            plan.taken.add(victim.job_id)
            moved[victim.job_id] = moved.get(victim.job_id, 0) + 1
            plan.preempts.append(Preempt(victim.job_id, f"priority for {job.job_id}"))
        return placement

    def _priority_victims_of(
        self,
        job: JobView,
        by_gpu_s: list[tuple[float, int, JobView]],
        expected_s: float,
        free: FreeGpus,
        plan: _Round,
    ) -> tuple[list[JobView], float]:
        """The running jobs ``job`` (expected to run ``expected_s`` more) would preempt for
        priority, the longest-holding first until its GPUs are free, among those expected to
        hold theirs ``priority_ratio`` times longer (``_outranks``' test with that ratio), not
        taken this round nor moved ``max_moves_per_job`` times; and what that costs them."""
        c = self.config
        need = job.num_gpus
        threshold = c.priority_ratio * need * expected_s
        moved, taken, cap = self._moved, plan.taken, c.max_moves_per_job
        chosen: list[JobView] = []
        cost = 0.0
        got = free.total
        for gpu_s, _, victim in by_gpu_s:
            if got >= need or gpu_s <= threshold:
                break
            times_moved = moved.get(victim.job_id, 0)
            if victim.job_id in taken or times_moved >= cap:
                continue
            chosen.append(victim)
            got += victim.num_gpus
            cost += victim.num_gpus * (c.restore_s * (1 + times_moved) + expected_s)
        return chosen, cost

    def _placement_after(
        self, job: JobView, chosen: list[JobView], snapshot: ClusterSnapshot, free: FreeGpus
    ) -> tuple[tuple[int, int], ...] | None:
        """Where ``job`` starts once ``chosen`` are preempted: its best level (victims free whole
        placements, mostly consolidated), else a worse one only if that costs it nothing to
        speak of (a sensitive job is not started spread here, past its delay timer). None, and
        the victims' GPUs taken again, when neither is free."""
        for victim in chosen:
            free.give(victim.placement)
        placement = free.consolidated(job.num_gpus)
        if placement is None:
            placement = self._fallback(job, free)
            if placement is not None and (
                placement_slowdown(
                    job, placement, free.layout, snapshot.congestion, snapshot.spread_jobs_by_node
                )
                >= self.config.insensitive_below
            ):
                placement = None
        if placement is None:
            for victim in chosen:
                free.take(victim.placement)
        return placement

    def _preempt_for(
        self, job: JobView, snapshot: ClusterSnapshot, free: FreeGpus, plan: _Round
    ) -> tuple[tuple[int, int], ...] | None:
        """Preemption for locality: a sensitive ``job`` that fits one node but finds none free
        takes the node cheapest to clear (see :func:`cheapest_node_room`), when the slowdown it
        avoids over its expected run time beats the victims' cost by ``gain_margin``. Returns
        the job's placement, with the victims' moves added to ``plan``; a failed attempt is
        retried later (see :meth:`_retry_after_failure`)."""
        c = self.config
        now = snapshot.now
        if not self._sensitive(job, snapshot.congestion):
            return None
        if self._preemptions_spent(plan):
            self._retry_later(job.job_id, now)  # the jobs turned away try in the next round
            return None
        plan.attempts += 1
        sensitivity = job.sensitivity.at(False, snapshot.congestion)
        tenants = self._victims.tenants(snapshot.running, self._version)
        self._victims.start_round(now, self._version)
        may_move, may_preempt = self._victim_rules(job, sensitivity, snapshot, plan)
        gain = job.num_gpus * (sensitivity - 1.0) * self._expected.of(job, now)
        moved = self._moved
        room = cheapest_node_room(
            job,
            free,
            tenants,
            may_move,
            may_preempt,
            move_cost_s=c.restore_s,
            # A preempted job restores its checkpoint and first waits in the queue again.
            preempt_cost_s=c.restore_s + self.tuner.expected_requeue_wait_s(c.learn_requeue),
            max_cost_gpu_s=gain / c.gain_margin,
            # A job moved before pays more for each move: churn is not free to its owner.
            history=lambda victim: 1.0 + moved.get(victim.job_id, 0),
            tenant_gpus=tenants.gpus,
        )
        if room is None or gain <= c.gain_margin * room.cost_gpu_s:
            self._retry_after_failure(job, now)
            return None
        self._clear_room(job, room, free, plan)
        return ((room.node, job.num_gpus),)

    def _victim_rules(
        self, job: JobView, sensitivity: float, snapshot: ClusterSnapshot, plan: _Round
    ) -> tuple[Callable[[JobView], bool], Callable[[JobView], bool]]:
        """Which running jobs may be moved to clear a node for ``job`` (spread slowdown
        ``sensitivity``), and which preempted: neither one already moved this round or moved
        ``max_moves_per_job`` times; moved, one less sensitive than it (``move_victims``);
        preempted, one it outranks (see :meth:`_outranks`). The victims' figures are asked for
        by every attempt of the round: kept for the round (:class:`VictimFigures`)."""
        c = self.config
        now, congestion = snapshot.now, snapshot.congestion
        taken, moved, cap = plan.taken, self._moved, c.max_moves_per_job
        figures = self._victims
        gittins = c.order == "gittins"
        threshold = c.preempt_ratio * self._expected_gpu_s(job, now) if gittins else 0.0
        outranked = None if gittins else self._outranked_by(job, now)

        def may_move(victim: JobView) -> bool:
            if not c.move_victims or victim.job_id in taken or moved.get(victim.job_id, 0) >= cap:
                return False
            return figures.slowdown(victim, congestion) < sensitivity

        def may_preempt(victim: JobView) -> bool:
            if victim.job_id in taken or moved.get(victim.job_id, 0) >= cap:
                return False
            if outranked is not None:
                return outranked(victim)
            return figures.expected_gpu_s(victim, now) > threshold  # _outranks, kept figures

        return may_move, may_preempt

    def _clear_room(self, job: JobView, room: RoomPlan, free: FreeGpus, plan: _Round) -> None:
        """Carry out ``room``: its tenants moved to their destinations or preempted, each
        counted against its ``max_moves_per_job``."""
        moved = self._moved
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
                functools.partial(self._expected.of, job, now),
                c.restore_s * (1 + times_moved),
                c.gain_margin,
                snapshot.congestion,
                snapshot.spread_jobs_by_node,
                on_no_block=functools.partial(
                    self._no_block.__setitem__, job.job_id, self._version
                ),
                slowdown=self._slowdown_where_running(job, snapshot),
            )
            if target is not None:
                free.take(target)
                plan.taken.add(job.job_id)
                self._moved[job.job_id] = times_moved + 1
                plan.migrations.append(Migrate(job.job_id, target, "re-consolidate"))

    def _slowdown_where_running(self, job: JobView, snapshot: ClusterSnapshot) -> float:
        """What :func:`reconsolidation` works out first: the running, spread ``job``'s
        slowdown where it runs (its own NIC use among the counts). Asked of every spread job in
        every round, it is kept while what it depends on stays the same: the job's view (its
        placement), the cluster, the congestion and the spread jobs by node."""
        layout, congestion = snapshot.layout, snapshot.congestion
        spread = snapshot.spread_jobs_by_node
        known = self._slowdown_where.get(job.job_id)
        if (
            known is not None
            and known[0] is job
            and known[1] is layout
            and known[2] == congestion
            and known[3] == spread
        ):
            return known[4]
        slowdown = placement_slowdown(
            job, job.placement, layout, congestion, spread, own_share=True
        )
        # A copy of the counts (a tuple's is itself): the snapshot's may be a list reused.
        self._slowdown_where[job.job_id] = (job, layout, congestion, tuple(spread), slowdown)
        return slowdown

    # --- several GPU types (sched/dally/types.py) -----------------------------------------------

    def _claims(self, ordered: Iterable[JobView], free: FreeGpus) -> TypeClaims:
        """The round's :class:`TypeClaims` over the waiting jobs in priority order (``ordered``;
        only those the free GPUs can hold are looked at)."""
        queue = self._queue.by_id
        starting: list[JobView] = []
        budget = free.total
        for job in ordered:
            if queue.get(job.job_id) is not job:
                continue
            if job.num_gpus > budget:
                break
            budget -= job.num_gpus
            starting.append(job)
        return TypeClaims(starting, free.by_node, free.layout)

    def _place_typed(
        self, job: JobView, snapshot: ClusterSnapshot, free: FreeGpus, plan: _Round
    ) -> bool:
        """:meth:`_place` on a cluster of several GPU types. The candidates are the most
        consolidated placement on each type the job may take (its claim first, see
        :class:`TypeClaims`) and the best spread one; each is weighed by its predicted time per
        unit of work over the job's best (1 / its speed on the type, times its network slowdown
        there: :mod:`~unstall.sched.dally.types`). The cheapest consolidated one starts at once
        unless a spread one is cheaper still; that one is taken when the delay timer (on its
        network slowdown) says so, and until then the job runs consolidated on a slower type if
        one is free (it moves up when a faster block frees and the move pays, ``_retype``), else
        waits. Priority preemption is as on one type; preemption for locality is not tried (it
        clears a node whatever its type)."""
        c = self.config
        now = snapshot.now
        assert plan.claims is not None
        kinds = plan.claims.types_for(job, free.by_node) or ()
        congestion = snapshot.congestion
        cons = consolidated_option(job, free, kinds, congestion)
        spread = spread_option(
            job, free, kinds, congestion, snapshot.spread_jobs_by_node, span_racks=c.span_racks
        )
        if cons is not None and (spread is None or cons.cost <= spread.cost):
            self._start(job, cons.placement, 1.0, free, plan, now)
            return True
        if spread is None:
            if self._may_try_priority(job, free, now) and group_of(job) not in plan.priority_failed:
                placement = self._preempt_for_priority(job, snapshot, free, plan)
                if placement is not None:
                    self._start(job, placement, 1.0, free, plan, now)
                    return True
            return False  # no room on any type it may take: wait for GPUs
        after = self._delay_s(job, spread.net, now)
        if self._waited(job, after, now):
            if spread.net >= c.insensitive_below:
                self.gave_up += 1
            self._start(job, spread.placement, spread.net, free, plan, now)
            return True
        if cons is not None:
            # Held back from the spread placement: meanwhile it runs consolidated on a slower
            # type, and moves up when a faster block frees (``_retype``).
            self._start(job, cons.placement, 1.0, free, plan, now)
            return True
        self._hold(job, spread.net, after, now, plan)
        return False

    def _retype(self, snapshot: ClusterSnapshot, free: FreeGpus, plan: _Round) -> None:
        """Type upgrades and re-consolidation on a cluster of several GPU types: a running job
        moves to the cheapest consolidated placement free (a faster type, or its own type
        consolidated) when the time it saves beats its restore by ``gain_margin``: its
        expected remaining run time times ``1 - new cost / current cost`` (costs as in
        :mod:`~unstall.sched.dally.types`) against ``restore_s`` times one more than its moves
        so far. Those that save the most a GPU move first, at most ``max_migrations_per_round``."""
        c = self.config
        now = snapshot.now
        if free.total == 0:
            return
        candidates: list[tuple[float, int, JobView]] = []
        for job in snapshot.running:
            if job.job_id in plan.taken:
                continue
            found = upgrade_target(job, free, snapshot.congestion, snapshot.spread_jobs_by_node)
            if found is None:
                continue
            current, target = found
            saved = self._expected.of(job, now) * (1.0 - target.cost / current.cost)
            if saved > c.gain_margin * c.restore_s * (1 + self._moved.get(job.job_id, 0)):
                candidates.append((-saved / job.num_gpus, job.index, job))
        candidates.sort(key=lambda item: item[:2])
        for _, _, job in candidates:
            if len(plan.migrations) >= c.max_migrations_per_round:
                return
            found = upgrade_target(job, free, snapshot.congestion, snapshot.spread_jobs_by_node)
            if found is None:
                continue  # an earlier move took its block
            current, target = found
            free.give(job.placement)
            free.take(target.placement)
            plan.taken.add(job.job_id)
            self._moved[job.job_id] = self._moved.get(job.job_id, 0) + 1
            why = "re-consolidate" if target.kind == current.kind else f"faster type {target.kind}"
            plan.migrations.append(Migrate(job.job_id, target.placement, why))


def _las_level(thresholds: tuple[float, ...], attained_gpu_s: float) -> int:
    """The las order's level of a job with ``attained_gpu_s`` of service: how many of the
    ``thresholds`` (ascending) it has reached."""
    return bisect.bisect_right(thresholds, attained_gpu_s)


def _las_waiting_level(thresholds: tuple[float, ...], job: JobView) -> int:
    """:func:`_las_level` of a waiting job (its service is fixed while it waits)."""
    return _las_level(thresholds, job.attained_gpu_s_at_change)


def _expected_wait(by_remaining: list[tuple[float, int]], free_gpus: int, need: int) -> float:
    """How long a job of ``need`` GPUs is expected to wait with ``free_gpus`` free, until enough
    running jobs (``by_remaining``: expected remaining seconds and GPUs, ascending) finish."""
    wait = 0.0
    have = free_gpus
    for remaining, gpus in by_remaining:
        if have >= need:
            break
        have += gpus
        wait = remaining
    return wait
