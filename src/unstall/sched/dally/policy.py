"""The Dally policy: one round is its round steps in order (``retype``, ``pass``,
``reconsolidate``: :data:`~unstall.sched.dally.config.ROUND_STEPS`, those its settings turn on).
The ``pass`` goes through the queue in order; per job: its best level if free, else a
preemption step if one pays (``locality-preemption``, ``priority-preemption``,
``service-preemption``), else the ``delay`` timer decides between waiting and a worse level.
The delay factor is reported as telemetry (``dally.wait_factor``) so its course over time is
part of the result."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

from unstall.sched.base import ClusterSnapshot, Decision, JobView, SetTimer, Start
from unstall.sched.dally.delay import accept_after_s
from unstall.sched.dally.moves import Moves
from unstall.sched.dally.queue_index import group_of
from unstall.sched.dally.sensitivity import placement_slowdown
from unstall.sched.dally.state import Held, Round
from unstall.sched.dally.type_room import TypeRoom
from unstall.sched.dally.types import consolidated_option, spread_option
from unstall.sched.free import FreeGpus
from unstall.sched.placement import TypeClaims
from unstall.sched.reasons import duration_words, shortfall

# The steps by which a waiting job may get GPUs that are not free.
PREEMPTING_STEPS = frozenset(
    {
        "locality-preemption",
        "priority-preemption",
        "service-preemption",
        "service-preemption-on-types",
    }
)


class Dally(Moves, TypeRoom):
    """Network-sensitive scheduling (delay timers per locality level, network-sensitive
    preemption and re-consolidation); knobs in :class:`DallyConfig`, which turn its steps on
    and off; ``name`` labels the results (ablation variants keep their own)."""

    name = "dally"

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        state = self.state
        state.expected.forget_learnt(snapshot.finished)  # what the history learns next
        for view in snapshot.finished:
            state.finished(view, snapshot.now)
        # The tenancy (who runs where, what is free) changes only when a job finishes, when
        # this policy acted in the previous round, or with the congestion. A job left waiting
        # under the same tenancy would be left waiting again, so a round looks only at the jobs
        # new to the queue, those whose delay timer fired and those due to try preemption
        # again (see ``_preempt_for``) unless the tenancy changed: its work follows what
        # changed, not the length of the queue.
        # (The free GPUs are compared too: a backend that does not report every finish in
        # ``finished`` still gets a decision on the cluster as it is.)
        tenancy = (snapshot.free_by_node, len(snapshot.running), snapshot.congestion)
        if snapshot.finished or state.acted or tenancy != state.tenancy:
            state.version += 1
        state.tenancy = tenancy
        free = FreeGpus(snapshot)
        plan = Round(fresh=state.queue.sync(snapshot.queued), due=state.due_retries(snapshot.now))
        for name in self.round_steps:
            ROUND_STEP_FUNCTIONS[name](self, snapshot, free, plan)
        state.acted = bool(plan.starts or plan.preempts or plan.migrations)
        return Decision(
            starts=tuple(plan.starts),
            preemptions=tuple(plan.preempts),
            migrations=tuple(plan.migrations),
            timers=tuple(plan.timers),
            telemetry=(
                ("dally.wait_factor", state.delay.value),
                ("dally.sensitive_spread_starts", float(state.gave_up)),
            ),
        )

    def wait_reasons(self, snapshot: ClusterSnapshot) -> dict[str, str]:
        """Each waiting job's reason (:mod:`unstall.sched.reasons`): held back by its delay
        timer for a consolidated placement (with the time left, and how much slower the
        placement it turned down would run), else the GPUs it lacks."""
        now = snapshot.now
        reasons: dict[str, str] = {}
        for job in snapshot.queued:
            record = self.state.jobs.get(job.job_id)
            held = None if record is None else record.held
            if held is not None and record is not None and record.timers_set:
                left = max(record.timers_set) - now
                if left > 0:
                    reasons[job.job_id] = (
                        f"held for a consolidated placement: delay timer, {duration_words(left)} "
                        f"left (the placement free now would run {held.turned_down:.2f}x slower)"
                    )
                    continue
            short = shortfall(job, snapshot)
            if short is not None:
                reasons[job.job_id] = short
        return reasons

    @property
    def gave_up(self) -> int:
        """Sensitive jobs started below their best level so far."""
        return self.state.gave_up

    def _pass(self, snapshot: ClusterSnapshot, free: FreeGpus, plan: Round) -> None:
        """The ``pass`` step: the whole queue when the tenancy changed since the last whole
        pass (any waiting job may start now), else the jobs new to the queue, those whose delay
        timer fired and those due to retry preemption, in priority order."""
        state = self.state
        typed = not snapshot.layout.one_type
        if state.waiting_version != state.version:
            state.waiting_version = state.version
            if typed:
                plan.claims = self._claims(
                    (j for members, _ in self._queue_in_order(snapshot.now) for j in members),
                    free,
                )
            self._pass_all(snapshot, free, plan)
            return
        todo = {j.job_id: j for j in plan.fresh}
        for key in snapshot.fired_timers:
            view = state.queue.by_id.get(key.removeprefix("dally:"))
            if view is not None:
                todo.setdefault(view.job_id, view)
        for view in plan.due:
            todo.setdefault(view.job_id, view)
        ordered = self._in_priority_order(list(todo.values()), snapshot.now)
        if typed:
            plan.claims = self._claims(ordered, free)
        preempts = not self.steps.isdisjoint(PREEMPTING_STEPS)
        for job in ordered:
            if free.total == 0 and not preempts:
                break
            if self._may_start(job, free, snapshot):
                self._place(job, snapshot, free, plan)

    def _pass_all(self, snapshot: ClusterSnapshot, free: FreeGpus, plan: Round) -> None:
        """Every waiting job in priority order, each placed if it may start; a group of one
        size whose next job cannot start is passed over whole (nothing its jobs could try frees
        GPUs), so the work follows the jobs that may start, not the length of the queue."""
        # Without preemption no waiting job finds GPUs where none are free; without the one
        # for locality, no job of a group may seek a node where the group's first could not.
        preempts = not self.steps.isdisjoint(PREEMPTING_STEPS)
        seeks_node = "locality-preemption" in self.steps
        queue = self.state.queue.by_id
        node_size = free.layout.gpus_per_node
        for members, one_size in self._queue_in_order(snapshot.now):
            for job in members:
                if queue.get(job.job_id) is not job:
                    continue  # started since it joined the group
                if free.total == 0 and not preempts:
                    return
                # Another job of a group that fits a node may be sensitive and seek one.
                group_may_seek_node = seeks_node and job.num_gpus <= node_size
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
        if now < self.state.retry_at(job.job_id, now):
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

    def _place(self, job: JobView, snapshot: ClusterSnapshot, free: FreeGpus, plan: Round) -> bool:
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
                self.state.gave_up += 1  # a sensitive job accepted a worse level
            self._start(job, fallback, slowdown, free, plan, now)
            return True
        self._hold(job, slowdown, after, now, plan)
        return False

    def _delay_s(self, job: JobView, slowdown: float, now: float) -> float:
        """How long ``job`` waits for a better placement before it takes one ``slowdown``
        times slower (0 with the delay off)."""
        c = self.config
        if "delay" not in self.steps:
            return 0.0
        return accept_after_s(
            slowdown,
            factor=self.state.delay.value,
            expected_runtime_s=self.state.expected.of(job, now),
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
        record = self.state.jobs.get(job.job_id)
        held = None if record is None else record.held
        return (0.0 if held is None else now - held.since_s) >= after_s

    def _hold(self, job: JobView, slowdown: float, after_s: float, now: float, plan: Round) -> None:
        """Hold ``job`` back from a placement ``slowdown`` times slower, with a timer for when
        it may take one (set once per wake-up time)."""
        record = self.state.record(job.job_id)
        held = record.held
        if held is None:
            held = record.held = Held(since_s=now, turned_down=1.0)
        held.turned_down = max(held.turned_down, slowdown)
        wake = held.since_s + after_s
        wakes = record.timers_set
        if wake not in wakes:
            wakes.add(wake)
            plan.timers.append(SetTimer(at_s=wake, key=f"dally:{job.job_id}"))

    def _start(
        self,
        job: JobView,
        placement: tuple[tuple[int, int], ...],
        slowdown: float,
        free: FreeGpus,
        plan: Round,
        now: float,
    ) -> None:
        free.take(placement)
        plan.starts.append(Start(job.job_id, placement))
        state = self.state
        state.history.observe_wait(job.waiting_s(now), requeued=job.preemptions > 0)
        record = state.jobs.get(job.job_id)
        held = None
        if record is not None:
            held = record.held
            record.started()
        state.queue.leave(job)
        if held is None and slowdown < self.config.insensitive_below:
            return  # neither held nor hurt: nothing for the delay factor to learn
        state.delay.observe_start(
            gpus=job.num_gpus,
            held_s=0.0 if held is None else now - held.since_s,
            avoided=held.turned_down if held is not None and slowdown <= 1.0 else 1.0,
            suffered=slowdown,
            expected_s=self.state.expected.of(job, now),
        )

    def _claims(self, ordered: Iterable[JobView], free: FreeGpus) -> TypeClaims:
        """The round's :class:`TypeClaims` over the waiting jobs in priority order (``ordered``;
        only those the free GPUs can hold are looked at)."""
        queue = self.state.queue.by_id
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
        self, job: JobView, snapshot: ClusterSnapshot, free: FreeGpus, plan: Round
    ) -> bool:
        """:meth:`_place` on a cluster of several GPU types. The candidates are the most
        consolidated placement on each type the job may take (its claim first, see
        :class:`TypeClaims`) and the best spread one; each is weighed by its predicted time per
        unit of work over the job's best (1 / its speed on the type, times its network slowdown
        there: :mod:`~unstall.sched.dally.types`). The cheapest consolidated one starts at once
        unless a spread one is cheaper still; that one is taken when the delay timer (on its
        network slowdown) says so, and until then the job runs consolidated on a slower type if
        one is free (it moves up when a faster block frees and the move pays, ``_retype``), else
        waits. Before any of these, a node of a type faster for it than the best of them may be
        cleared for it (preemption for locality per type, ``_preempt_for_type``); with no room
        on any type it may take, priority preemption is as on one type, then preemption for
        service (``service-preemption-on-types``: time-sharing of the types)."""
        c = self.config
        now = snapshot.now
        assert plan.claims is not None
        kinds = plan.claims.types_for(job, free.by_node) or ()
        congestion = snapshot.congestion
        cons = consolidated_option(job, free, kinds, congestion)
        spread = spread_option(
            job, free, kinds, congestion, snapshot.spread_jobs_by_node, span_racks=c.span_racks
        )
        cleared = self._preempt_for_type(job, snapshot, free, plan, (cons, spread))
        if cleared is not None:
            self._start(job, cleared.placement, 1.0, free, plan, now)
            return True
        if cons is not None and (spread is None or cons.cost <= spread.cost):
            self._start(job, cons.placement, 1.0, free, plan, now)
            return True
        if spread is None:
            if self._may_try_priority(job, free, now) and group_of(job) not in plan.priority_failed:
                placement = self._preempt_for_priority(job, snapshot, free, plan)
                if placement is not None:
                    self._start(job, placement, 1.0, free, plan, now)
                    return True
            if self._may_try_service(job, free, now):
                # Time-sharing of the types it may take: jobs ranked below it make room.
                placement = self._preempt_for_service(job, snapshot, free, plan, kinds)
                if placement is not None:
                    self._start(job, placement, 1.0, free, plan, now)
                    return True
            return False  # no room on any type it may take: wait for GPUs
        after = self._delay_s(job, spread.net, now)
        if self._waited(job, after, now):
            if spread.net >= c.insensitive_below:
                self.state.gave_up += 1
            self._start(job, spread.placement, spread.net, free, plan, now)
            return True
        if cons is not None:
            # Held back from the spread placement: meanwhile it runs consolidated on a slower
            # type, and moves up when a faster block frees (``_retype``).
            self._start(job, cons.placement, 1.0, free, plan, now)
            return True
        self._hold(job, spread.net, after, now, plan)
        return False


RoundStep = Callable[[Dally, ClusterSnapshot, FreeGpus, Round], None]
# The round steps by name (config.ROUND_STEPS): each a method of Dally; those on run in order.
ROUND_STEP_FUNCTIONS: dict[str, RoundStep] = {
    "retype": Dally._retype,
    "pass": Dally._pass,
    "reconsolidate": Dally._reconsolidate,
}
