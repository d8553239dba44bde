"""Network-sensitive preemption and re-consolidation, each only when its predicted gain beats
its predicted cost by a margin.

- Preemption: a waiting sensitive job whose best level (one node) is not free may take a node
  from running jobs that are less sensitive than it. Those that fit on another node are
  migrated there (they keep running, and their locality); the rest are preempted back to the
  queue, but only if they also have lower priority. Gain: the slowdown the job avoids over its
  expected remaining run time; cost: the victims' checkpoint/restore time.
- Re-consolidation: a running job placed worse than its best level moves to a consolidated block
  when one is free. Gain: the time its expected remainder saves at consolidated speed; cost: its
  own restore time.
All figures are GPU-seconds, so a 1-GPU victim weighs less than an 8-GPU one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from unstall.sched.base import JobView, Placement
from unstall.sched.dally.sensitivity import placement_slowdown
from unstall.sched.free import FreeGpus
from unstall.sched.placement import on_one_node


@dataclass(frozen=True)
class RoomPlan:
    """Free ``node`` for a job: move some tenants to other nodes, preempt others."""

    node: int
    moves: tuple[tuple[JobView, Placement], ...]
    preempts: tuple[JobView, ...]
    cost_gpu_s: float


def _destination(free: FreeGpus, victim: JobView, avoid: int) -> Placement | None:
    """A single node other than ``avoid`` with room for all of ``victim``'s GPUs (best fit)."""
    held = free.by_node[avoid]
    free.by_node[avoid] = 0
    try:
        return on_one_node(free.by_node, victim.num_gpus)
    finally:
        free.by_node[avoid] = held


def _plan_node(
    node: int,
    job: JobView,
    tenants: Sequence[JobView],
    free: FreeGpus,
    may_move: Callable[[JobView], bool],
    may_preempt: Callable[[JobView], bool],
    move_cost_s: float,
    preempt_cost_s: float,
    history: Callable[[JobView], float],
    tenant_gpus: int,
    give_up_above: float = math.inf,
    most_free: int | None = None,
) -> RoomPlan | None:
    """Clear room on ``node``: its tenants (``tenant_gpus`` GPUs in all), smallest first, each
    moved if a node has room for it (it keeps its locality), else preempted if it may be, else
    left; None if the room cannot be made, or as soon as the plan's cost passes
    ``give_up_above`` (a cost only grows as victims are added, and such a plan is not wanted).
    ``most_free``: at least the free GPUs of any node (a victim larger cannot be moved)."""
    need = job.num_gpus
    room = free.by_node[node]
    if most_free is None:
        most_free = max(free.by_node, default=0)
    # The tenants' GPUs not yet looked at: once the room and all of them cannot make the job's
    # GPUs, the plan has failed (the rest of the tenants need not be asked about at all).
    rest = tenant_gpus
    moves: list[tuple[JobView, Placement]] = []
    preempts: list[JobView] = []
    moved_weight: float = 0  # GPUs times history, summed as the cost is (from int 0)
    preempted_weight: float = 0
    for victim in tenants:  # smallest first (single_node_tenants' order)
        if room >= need or room + rest < need:
            break
        gpus = victim.num_gpus
        rest -= gpus
        dest = None
        if gpus <= most_free and may_move(victim):
            dest = _destination(free, victim, node)
        if dest is not None:
            free.take(dest)  # reserved while planning; given back below
            moves.append((victim, dest))
            moved_weight += gpus * history(victim)
        elif may_preempt(victim):
            preempts.append(victim)
            preempted_weight += gpus * history(victim)
        else:
            continue
        room += gpus
        if moved_weight * move_cost_s + preempted_weight * preempt_cost_s > give_up_above:
            room = -1  # too dear already
            break
    for _, dest in moves:
        free.give(dest)
    if room < need:
        return None
    cost = moved_weight * move_cost_s + preempted_weight * preempt_cost_s
    return RoomPlan(node, tuple(moves), tuple(preempts), cost)


class Tenants(dict[int, list[JobView]]):
    """Running jobs on one node, by node (ascending), smallest first (GPUs, then index), and
    ``gpus``, their GPUs by node: the candidates :func:`cheapest_node_room` clears a node of."""

    gpus: dict[int, int]


def single_node_tenants(running: Iterable[JobView]) -> Tenants:
    """The :class:`Tenants` of ``running``. (Built again whenever the tenancy changes: one
    sort of them all, by node and then smallest first, gives the nodes and each node's list in
    their order, and the GPUs are counted on the way.)"""
    tenants = Tenants()
    gpus: dict[int, int] = {}
    single = [r for r in running if len(r.placement) == 1]
    single.sort(key=lambda v: (v.placement[0][0], v.num_gpus, v.index))
    for r in single:
        node = r.placement[0][0]
        victims = tenants.get(node)
        if victims is None:
            tenants[node] = [r]
            gpus[node] = r.num_gpus
        else:
            victims.append(r)
            gpus[node] += r.num_gpus
    tenants.gpus = gpus
    return tenants


def cheapest_node_room(
    job: JobView,
    free: FreeGpus,
    tenants: Mapping[int, Sequence[JobView]],
    may_move: Callable[[JobView], bool],
    may_preempt: Callable[[JobView], bool],
    *,
    move_cost_s: float,
    preempt_cost_s: float,
    max_cost_gpu_s: float = math.inf,
    history: Callable[[JobView], float] = lambda victim: 1.0,
    tenant_gpus: Mapping[int, int] | None = None,
) -> RoomPlan | None:
    """The node that is cheapest (in victims' GPU-seconds lost) to clear for ``job``, among those
    that cost less than ``max_cost_gpu_s`` (what the gain can pay for), lowest node among equals.

    ``tenants`` is :func:`single_node_tenants` of the running jobs (``tenant_gpus``: their GPUs
    by node, else counted here). ``history`` scales a
    victim's cost (at least 1: a job moved before pays more). A node short of ``k`` free GPUs
    costs at least :func:`_least_cost` (each GPU cleared is moved or preempted, and only as many
    can be moved as other nodes have free): nodes whose bound already loses to the best plan or
    to ``max_cost_gpu_s`` are not planned at all, and a plan is given up as soon as its cost
    passes either (such plans could not be chosen, so the answer is the one planning every node
    in full gives, but for a plan dearer than ``max_cost_gpu_s``, which may come back as None;
    at a fraction of the work).
    """
    order = _nodes_by_bound(job.num_gpus, free, tenants, tenant_gpus, move_cost_s, preempt_cost_s)
    most_free = max(free.by_node, default=0)
    best: RoomPlan | None = None
    # Bounds and costs are sums of the same products, but not always in the same order:
    # a bound is taken as beaten only when it is above by more than rounding.
    slack = 1.0 - 1e-9
    for bound, node, gpus in order:
        if bound * slack >= max_cost_gpu_s:
            break  # the rest cost more still
        if best is not None and (
            bound * slack > best.cost_gpu_s or (bound >= best.cost_gpu_s and node > best.node)
        ):
            break  # (nodes come by bound, then index: a lower node wins a tie)
        # A plan dearer than the best so far, or than ``max_cost_gpu_s``, is given up on.
        limit = max_cost_gpu_s if best is None else min(max_cost_gpu_s, best.cost_gpu_s)
        plan = _plan_node(
            node,
            job,
            tenants[node],
            free,
            may_move,
            may_preempt,
            move_cost_s,
            preempt_cost_s,
            history,
            gpus,
            give_up_above=limit / slack,
            most_free=most_free,
        )
        if plan is not None and (
            best is None
            or plan.cost_gpu_s < best.cost_gpu_s
            or (plan.cost_gpu_s == best.cost_gpu_s and node < best.node)
        ):
            best = plan
    return best


def _nodes_by_bound(
    need: int,
    free: FreeGpus,
    tenants: Mapping[int, Sequence[JobView]],
    tenant_gpus: Mapping[int, int] | None,
    move_cost_s: float,
    preempt_cost_s: float,
) -> list[tuple[float, int, int]]:
    """The nodes a job of ``need`` GPUs could be given by clearing single-node tenants, as
    (bound on the cost, node, its tenants' GPUs), the lowest bound first (see
    :func:`_least_cost`): their plans tend to be the cheapest, and every node whose bound cannot
    beat the best plan so far is then not planned at all. Nodes whose tenants could not make the
    room even all cleared are left out. (This runs for every attempt over every node: kept to
    plain arithmetic.)"""
    by_node = free.by_node
    total = free.total
    order: list[tuple[float, int, int]] = []
    # A node's bound depends on its free GPUs alone (the job's and the cluster's are the same
    # for every node): worked out once for each count.
    bounds: dict[int, float] = {}
    for node, candidates in tenants.items():
        free_here = by_node[node]
        short = need - free_here
        gpus = tenant_gpus[node] if tenant_gpus is not None else sum(v.num_gpus for v in candidates)
        if gpus < short:
            continue  # even clearing every single-node tenant would not make room
        bound = bounds.get(free_here)
        if bound is None:
            bound = _least_cost(short, total - free_here, move_cost_s, preempt_cost_s)
            bounds[free_here] = bound
        order.append((bound, node, gpus))
    order.sort()
    return order


def _least_cost(
    short: int, free_elsewhere: int, move_cost_s: float, preempt_cost_s: float
) -> float:
    """A lower bound on what clearing ``short`` GPUs of a node costs: every GPU cleared is moved
    or preempted, at least once (a victim's history weighs at least 1), and the GPUs moved fit
    in the ``free_elsewhere`` GPUs of other nodes."""
    if short <= 0:
        return 0.0
    if preempt_cost_s <= move_cost_s:
        return short * preempt_cost_s
    moved = min(short, free_elsewhere)
    return moved * move_cost_s + (short - moved) * preempt_cost_s


def reconsolidation(
    job: JobView,
    free: FreeGpus,
    expected_remaining_s: Callable[[], float],
    restore_s: float,
    margin: float,
    congestion: float,
    spread_jobs_by_node: Sequence[int] = (),
    on_no_block: Callable[[], None] | None = None,
    slowdown: float | None = None,
) -> Placement | None:
    """A consolidated placement to move ``job`` to, if one is free and the move pays.
    ``expected_remaining_s`` is asked only when the job is slowed down at all (it is the costly
    part, and most spread jobs are already consolidated over a rack). ``on_no_block`` is called
    when the move would pay but no consolidated block is free (fewer free GPUs cannot change
    that; time can change whether the move pays). ``slowdown``: the job's where it runs, if the
    caller knows it (else worked out here, as below)."""
    if slowdown is None:
        # The job's own NIC use is among the counts: the others on its busiest NIC are one fewer.
        slowdown = placement_slowdown(
            job, job.placement, free.layout, congestion, spread_jobs_by_node, own_share=True
        )
    if slowdown <= 1.0:
        return None
    saved_s = expected_remaining_s() * (1.0 - 1.0 / slowdown)
    if saved_s <= margin * restore_s:
        return None
    free.give(job.placement)
    target = free.consolidated(job.num_gpus)
    if target is None:
        free.take(job.placement)
        if on_no_block is not None:
            on_no_block()
    return target
