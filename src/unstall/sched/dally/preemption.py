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
) -> RoomPlan | None:
    """Clear room on ``node``: its tenants (``tenant_gpus`` GPUs in all), smallest first, each
    moved if a node has room for it (it keeps its locality), else preempted if it may be, else
    left; None if the room cannot be made."""
    room = free.by_node[node]
    # The tenants' GPUs not yet looked at: once the room and all of them cannot make the job's
    # GPUs, the plan has failed (the rest of the tenants need not be asked about at all).
    rest = tenant_gpus
    moves: list[tuple[JobView, Placement]] = []
    preempts: list[JobView] = []
    for victim in tenants:  # smallest first (single_node_tenants' order)
        if room >= job.num_gpus or room + rest < job.num_gpus:
            break
        rest -= victim.num_gpus
        dest = _destination(free, victim, node) if may_move(victim) else None
        if dest is not None:
            free.take(dest)  # reserved while planning; given back below
            moves.append((victim, dest))
        elif may_preempt(victim):
            preempts.append(victim)
        else:
            continue
        room += victim.num_gpus
    for _, dest in moves:
        free.give(dest)
    if room < job.num_gpus:
        return None
    cost = sum(v.num_gpus * history(v) for v, _ in moves) * move_cost_s
    cost += sum(v.num_gpus * history(v) for v in preempts) * preempt_cost_s
    return RoomPlan(node, tuple(moves), tuple(preempts), cost)


class Tenants(dict[int, list[JobView]]):
    """Running jobs on one node, by node (ascending), smallest first (GPUs, then index), and
    ``gpus``, their GPUs by node: the candidates :func:`cheapest_node_room` clears a node of."""

    gpus: dict[int, int]


def single_node_tenants(running: Iterable[JobView]) -> Tenants:
    """The :class:`Tenants` of ``running``."""
    by_node: dict[int, list[JobView]] = {}
    for r in running:
        if len(r.placement) == 1:
            by_node.setdefault(r.placement[0][0], []).append(r)
    tenants = Tenants(sorted(by_node.items()))
    for victims in tenants.values():
        victims.sort(key=lambda v: (v.num_gpus, v.index))
    tenants.gpus = {node: sum(v.num_gpus for v in victims) for node, victims in tenants.items()}
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
    victim's cost (at least 1: a job moved before pays more). Every GPU cleared costs at
    least the cheaper of the two unit costs, so a node short of ``k`` free GPUs costs at least
    ``k`` times that: nodes whose bound already loses to the best plan or to ``max_cost_gpu_s``
    are not planned at all (the plans they would give could not be chosen, so the answer is the
    one planning every node gives, at a fraction of the work).
    """
    unit = min(move_cost_s, preempt_cost_s)
    # Nodes closest to having room first: their plans tend to be the cheapest, and every node
    # whose bound cannot beat the best plan so far is then not planned at all.
    by_node = free.by_node
    order = sorted((job.num_gpus - by_node[node], node) for node in tenants)
    best: RoomPlan | None = None
    for short, node in order:
        bound = short * unit
        if bound >= max_cost_gpu_s:
            break  # the rest are shorter of room still
        if best is not None and (
            bound > best.cost_gpu_s or (bound == best.cost_gpu_s and node > best.node)
        ):
            break
        candidates = tenants[node]
        gpus = tenant_gpus[node] if tenant_gpus is not None else sum(v.num_gpus for v in candidates)
        if gpus < short:
            continue  # even clearing every single-node tenant would not make room
        plan = _plan_node(
            node,
            job,
            candidates,
            free,
            may_move,
            may_preempt,
            move_cost_s,
            preempt_cost_s,
            history,
            gpus,
        )
        if plan is not None and (
            best is None
            or plan.cost_gpu_s < best.cost_gpu_s
            or (plan.cost_gpu_s == best.cost_gpu_s and node < best.node)
        ):
            best = plan
    return best


def reconsolidation(
    job: JobView,
    free: FreeGpus,
    expected_remaining_s: Callable[[], float],
    restore_s: float,
    margin: float,
    congestion: float,
    spread_jobs_by_node: Sequence[int] = (),
    on_no_block: Callable[[], None] | None = None,
) -> Placement | None:
    """A consolidated placement to move ``job`` to, if one is free and the move pays.
    ``expected_remaining_s`` is asked only when the job is slowed down at all (it is the costly
    part, and most spread jobs are already consolidated over a rack). ``on_no_block`` is called
    when the move would pay but no consolidated block is free (fewer free GPUs cannot change
    that; time can change whether the move pays)."""
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
