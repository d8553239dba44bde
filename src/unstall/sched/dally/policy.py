"""The Dally policy: queue order, then per job: best level if free, else network-sensitive
preemption if it pays, else the delay timer decides between waiting and a worse level; finally
spread jobs are re-consolidated when blocks free up. The tuned timer factor is reported as
telemetry (``dally.wait_factor``) so its course over time is part of the result."""

from __future__ import annotations

import bisect
import functools
import random
from dataclasses import dataclass, field

from unstall.sched.base import (
    ClusterSnapshot,
    Decision,
    JobView,
    Migrate,
    Preempt,
    SetTimer,
    Start,
)
from unstall.sched.dally.autotune import DelayTuner
from unstall.sched.dally.config import DallyConfig
from unstall.sched.dally.delay import accept_after_s
from unstall.sched.dally.preemption import cheapest_node_room, reconsolidation
from unstall.sched.dally.sensitivity import is_consolidated, is_sensitive, placement_slowdown
from unstall.sched.free import FreeGpus
from unstall.sched.placement import Locality


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
        self._timers_set: set[tuple[str, float]] = set()
        self._congestion = 0.0
        self._consolidated_since: dict[str, float] = {}
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
        return self.tuner.expected_remaining_s(job.attained_gpu_s(now) / job.num_gpus, job.num_gpus)

    def _observe_finishes(self, snapshot: ClusterSnapshot) -> None:
        for view in snapshot.finished:
            self._consolidated_since.pop(view.job_id, None)
            self.tuner.observe_finish(
                view.attained_gpu_s(snapshot.now) / view.num_gpus, view.num_gpus
            )

    # --- the decision --------------------------------------------------------------------------

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        self._observe_finishes(snapshot)
        self._congestion = snapshot.congestion
        now = snapshot.now
        free = FreeGpus(snapshot)
        plan = _Round()
        for job in sorted(snapshot.queued, key=lambda j: self._priority(j, now)):
            if free.total == 0 and not self.config.preemption:
                break
            self._place(job, snapshot, free, plan)
        if self.config.preemption and snapshot.spread_running:
            self._reconsolidate(snapshot, free, plan)
        if self._held or self._timers_set:  # forget jobs that left the queue
            live = {j.job_id for j in snapshot.queued}
            self._held = {k: v for k, v in self._held.items() if k in live}
            self._timers_set = {t for t in self._timers_set if t[0] in live}
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

    def _place(self, job: JobView, snapshot: ClusterSnapshot, free: FreeGpus, plan: _Round) -> None:
        c = self.config
        now = snapshot.now
        placement = free.consolidated(job.num_gpus)
        if placement is None and c.preemption and job.num_gpus <= free.layout.gpus_per_node:
            placement = self._preempt_for(job, snapshot, free, plan)
        if placement is not None:
            self._start(job, placement, 1.0, free, plan, now)
            return
        # The least-bad placement free now: within one rack if possible, else anywhere.
        fallback = free.at_level(Locality.RACK, job.num_gpus) or free.best(job.num_gpus)
        if fallback is None:
            return  # no room at any level: wait for GPUs
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
        if job.waiting_s(now) >= after:
            if slowdown >= c.insensitive_below:
                self.gave_up += 1  # a sensitive job accepted a worse level
            self._start(job, fallback, slowdown, free, plan, now)
            return
        held = self._held.setdefault(job.job_id, _Held(since_s=now, turned_down=1.0))
        held.turned_down = max(held.turned_down, slowdown)
        wake = job.changed_s + after
        if (job.job_id, wake) not in self._timers_set:
            self._timers_set.add((job.job_id, wake))
            plan.timers.append(SetTimer(at_s=wake, key=f"dally:{job.job_id}"))

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
        if held is None and slowdown < self.config.insensitive_below:
            return  # neither held nor hurt: nothing for the tuner to learn
        self.tuner.observe_start(
            gpus=job.num_gpus,
            held_s=0.0 if held is None else now - held.since_s,
            avoided=held.turned_down if held is not None and slowdown <= 1.0 else 1.0,
            suffered=slowdown,
            expected_s=self._expected_remaining(job, now),
        )

    def _preempt_for(
        self, job: JobView, snapshot: ClusterSnapshot, free: FreeGpus, plan: _Round
    ) -> tuple[tuple[int, int], ...] | None:
        c = self.config
        if len(plan.preempts) + len(plan.migrations) >= c.max_preemptions_per_round:
            return None
        if plan.attempts >= c.max_preemption_attempts_per_round:
            return None  # each attempt looks at every running job: bound the work per round
        plan.attempts += 1
        if not is_sensitive(job, c.insensitive_below, snapshot.congestion):
            return None
        now = snapshot.now
        sensitivity = job.sensitivity.at(False, snapshot.congestion)

        def may_move(victim: JobView) -> bool:
            if victim.job_id in plan.taken:
                return False
            return victim.sensitivity.at(False, snapshot.congestion) < sensitivity

        def may_preempt(victim: JobView) -> bool:
            if victim.job_id in plan.taken:
                return False
            return self._outranks(job, victim, now)

        room = cheapest_node_room(
            job,
            free,
            snapshot.running,
            may_move,
            may_preempt,
            move_cost_s=c.restore_s,
            # A preempted job restores its checkpoint and first waits in the queue again.
            preempt_cost_s=c.restore_s + self.tuner.expected_requeue_wait_s(c.learn_requeue),
        )
        if room is None:
            return None
        gain = job.num_gpus * (sensitivity - 1.0) * self._expected_remaining(job, now)
        if gain <= c.gain_margin * room.cost_gpu_s:
            return None
        for victim, dest in room.moves:
            free.give(victim.placement)
            free.take(dest)
            plan.taken.add(victim.job_id)
            plan.migrations.append(Migrate(victim.job_id, dest, f"room for {job.job_id}"))
        for victim in room.preempts:
            free.give(victim.placement)
            plan.taken.add(victim.job_id)
            plan.preempts.append(Preempt(victim.job_id, f"consolidated node for {job.job_id}"))
        return ((room.node, job.num_gpus),)

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
            target = reconsolidation(
                job,
                free,
                functools.partial(self._expected_remaining, job, now),
                c.restore_s,
                c.gain_margin,
                snapshot.congestion,
                snapshot.spread_jobs_by_node,
            )
            if target is not None:
                free.take(target)
                plan.taken.add(job.job_id)
                plan.migrations.append(Migrate(job.job_id, target, "re-consolidate"))
