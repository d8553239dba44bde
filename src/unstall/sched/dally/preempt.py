"""Dally's preemption steps: for locality (a network-sensitive job that fits one node clears
the node cheapest to clear, when the slowdown it avoids beats the victims' cost), for priority
(gittins order: a job larger than a node preempts jobs expected to hold their GPUs much longer,
when the wait it saves beats their loss) and for service (Tiresias-like: rank alone decides).
Each counts the moves it makes of a job in the job's record."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from unstall.sched.base import ClusterSnapshot, JobView, Migrate, Placement, Preempt
from unstall.sched.dally.order import QueueOrder
from unstall.sched.dally.preemption import RoomPlan, Tenants, cheapest_node_room
from unstall.sched.dally.queue_index import group_of
from unstall.sched.dally.sensitivity import placement_slowdown
from unstall.sched.dally.service import service_room
from unstall.sched.dally.state import Round
from unstall.sched.free import FreeGpus


class Preemptions(QueueOrder):
    """The preemption steps of Dally (see the module docstring)."""

    def _preempt_for(
        self, job: JobView, snapshot: ClusterSnapshot, free: FreeGpus, plan: Round
    ) -> tuple[tuple[int, int], ...] | None:
        """Preemption for locality: a sensitive ``job`` that fits one node but finds none free
        takes the node cheapest to clear (see :func:`cheapest_node_room`), when the slowdown it
        avoids over its expected run time beats the victims' cost by ``gain_margin``. Returns
        the job's placement, with the victims' moves added to ``plan``; a failed attempt is
        retried later (see :meth:`_retry_after_failure`)."""
        now = snapshot.now
        if not self._sensitive(job, snapshot.congestion):
            return None
        sensitivity = job.sensitivity.at(False, snapshot.congestion)
        attempt = self._locality_attempt(job, sensitivity, snapshot, plan)
        if attempt is None:
            return None
        gain = job.num_gpus * (sensitivity - 1.0) * self.state.expected.of(job, now)
        room = self._room_that_pays(job, free, *attempt, gain)
        if room is None:
            self._retry_after_failure(job, now)
            return None
        self._clear_room(job, room, free, plan)
        return ((room.node, job.num_gpus),)

    def _locality_attempt(
        self, job: JobView, sensitivity: float, snapshot: ClusterSnapshot, plan: Round
    ) -> tuple[Tenants, Callable[[JobView], bool], Callable[[JobView], bool]] | None:
        """The start of an attempt to clear a node for ``job`` (spread slowdown
        ``sensitivity``): None when this round's preemptions are spent (it tries in the next
        round); else the attempt counted, and the single-node tenants with who of them may be
        moved and who preempted (:meth:`_victim_rules`)."""
        now = snapshot.now
        if self._preemptions_spent(plan):
            self.state.retry_later(job.job_id, now)  # the jobs turned away try in the next round
            return None
        plan.attempts += 1
        tenants = self.state.victims.tenants(snapshot.running, self.state.version)
        self.state.victims.start_round(now, self.state.version)
        may_move, may_preempt = self._victim_rules(job, sensitivity, snapshot, plan)
        return tenants, may_move, may_preempt

    def _room_that_pays(
        self,
        job: JobView,
        free: FreeGpus,
        tenants: Tenants,
        may_move: Callable[[JobView], bool],
        may_preempt: Callable[[JobView], bool],
        gain: float,
    ) -> RoomPlan | None:
        """The node of ``tenants`` cheapest to clear for ``job`` (:func:`cheapest_node_room` at
        Dally's costs) when ``gain`` (GPU-seconds) beats its cost by ``gain_margin``; else
        None."""
        c = self.config
        moves = self.state.moves
        room = cheapest_node_room(
            job,
            free,
            tenants,
            may_move,
            may_preempt,
            move_cost_s=c.restore_s,
            # A preempted job restores its checkpoint and first waits in the queue again.
            preempt_cost_s=c.restore_s + self.history.expected_requeue_wait_s(c.learn_requeue),
            max_cost_gpu_s=gain / c.gain_margin,
            # A job moved before pays more for each move: churn is not free to its owner.
            history=lambda victim: 1.0 + moves(victim.job_id),
            tenant_gpus=tenants.gpus,
        )
        if room is None or gain <= c.gain_margin * room.cost_gpu_s:
            return None
        return room

    def _victim_rules(
        self, job: JobView, sensitivity: float, snapshot: ClusterSnapshot, plan: Round
    ) -> tuple[Callable[[JobView], bool], Callable[[JobView], bool]]:
        """Which running jobs may be moved to clear a node for ``job`` (spread slowdown
        ``sensitivity``), and which preempted: neither one already moved this round or moved
        ``max_moves_per_job`` times; moved, one less sensitive than it (``move_victims``);
        preempted, one it outranks (see :meth:`_outranks`). The victims' figures are asked for
        by every attempt of the round: kept for the round (:class:`VictimFigures`)."""
        c = self.config
        now, congestion = snapshot.now, snapshot.congestion
        taken, moves, cap = plan.taken, self.state.moves, c.max_moves_per_job
        figures = self.state.victims
        gittins = c.order == "gittins"
        threshold = c.preempt_ratio * self._expected_gpu_s(job, now) if gittins else 0.0
        outranked = None if gittins else self._outranked_by(job, now)

        def may_move(victim: JobView) -> bool:
            if not c.move_victims or victim.job_id in taken or moves(victim.job_id) >= cap:
                return False
            return figures.slowdown(victim, congestion) < sensitivity

        def may_preempt(victim: JobView) -> bool:
            if victim.job_id in taken or moves(victim.job_id) >= cap:
                return False
            if outranked is not None:
                return outranked(victim)
            return figures.expected_gpu_s(victim, now) > threshold  # _outranks, kept figures

        return may_move, may_preempt

    def _clear_room(self, job: JobView, room: RoomPlan, free: FreeGpus, plan: Round) -> None:
        """Carry out ``room``: its tenants moved to their destinations or preempted, each
        counted against its ``max_moves_per_job``."""
        count_move = self.state.count_move
        for victim, dest in room.moves:
            free.give(victim.placement)
            free.take(dest)
            plan.taken.add(victim.job_id)
            count_move(victim.job_id)
            plan.migrations.append(Migrate(victim.job_id, dest, f"room for {job.job_id}"))
        for victim in room.preempts:
            free.give(victim.placement)
            plan.taken.add(victim.job_id)
            count_move(victim.job_id)
            plan.preempts.append(Preempt(victim.job_id, f"consolidated node for {job.job_id}"))

    def _preempt_for_priority(
        self, job: JobView, snapshot: ClusterSnapshot, free: FreeGpus, plan: Round
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
        victims = self.state.victims.for_priority(snapshot.running, now, self.state.version)
        need = job.num_gpus
        expected_s = self.state.expected.of(job, now)
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
        count_move = self.state.count_move
        for victim in chosen:
            plan.taken.add(victim.job_id)
            count_move(victim.job_id)
            plan.preempts.append(Preempt(victim.job_id, f"priority for {job.job_id}"))
        return placement

    def _priority_victims_of(
        self,
        job: JobView,
        by_gpu_s: list[tuple[float, int, JobView]],
        expected_s: float,
        free: FreeGpus,
        plan: Round,
    ) -> tuple[list[JobView], float]:
        """The running jobs ``job`` (expected to run ``expected_s`` more) would preempt for
        priority, the longest-holding first until its GPUs are free, among those expected to
        hold theirs ``priority_ratio`` times longer (``_outranks``' test with that ratio), not
        taken this round nor moved ``max_moves_per_job`` times; and what that costs them."""
        c = self.config
        need = job.num_gpus
        threshold = c.priority_ratio * need * expected_s
        moves, taken, cap = self.state.moves, plan.taken, c.max_moves_per_job
        chosen: list[JobView] = []
        cost = 0.0
        got = free.total
        for gpu_s, _, victim in by_gpu_s:
            if got >= need or gpu_s <= threshold:
                break
            times_moved = moves(victim.job_id)
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

    def _preempt_for_service(
        self,
        job: JobView,
        snapshot: ClusterSnapshot,
        free: FreeGpus,
        plan: Round,
        types: Sequence[str] | None = None,
    ) -> Placement | None:
        """Preemption for service: the running jobs ``job`` outranks (lowest first) make room
        for it (``types``: on one of these GPU types); their preemptions are added to
        ``plan``. None (and a retry later) when they cannot, or this round's preemption budget
        is spent."""
        now = snapshot.now
        if self._preemptions_spent(plan):
            return None
        plan.attempts += 1
        c = self.config
        count_move = self.state.count_move
        # _priority's rank of the victims (the job's side of _outranks is worked out once:
        # every running job is asked about).
        outranked = self._outranked_by(job, now)
        rank: Callable[[JobView], float]
        if c.order == "gittins":
            rank = functools.partial(self._expected_gpu_s, now=now)
        else:
            rank = functools.partial(self._level, now=now)
        moves, cap = self.state.moves, c.max_moves_per_job
        if not c.cap_all_moves:
            cap = 1 << 62  # as in Tiresias, rank alone decides
        found = service_room(
            job,
            snapshot.running,
            free,
            outranks=lambda _job, victim: moves(victim.job_id) < cap and outranked(victim),
            rank=rank,
            taken=plan.taken,
            max_victims=c.max_preemptions_per_round - len(plan.preempts) - len(plan.migrations),
            types=types,
        )
        if found is None:
            self._retry_after_failure(job, now)
            return None
        victims, placement = found
        for victim in victims:
            plan.taken.add(victim.job_id)
            count_move(victim.job_id)
            plan.preempts.append(Preempt(victim.job_id, f"service for {job.job_id}"))
        return placement


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
