"""Dally's search for a node to clear (``cheapest_node_room``) against planning every node in
full: its bounds and early give-ups must never change the answer."""

from __future__ import annotations

import math
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from snapshots import job_view
from unstall.sched.base import ClusterLayout, ClusterSnapshot, JobView
from unstall.sched.dally.preemption import (
    RoomPlan,
    _plan_node,
    cheapest_node_room,
    single_node_tenants,
)
from unstall.sched.free import FreeGpus

GPUS_PER_NODE = 4
NODES = 5
LAYOUT = ClusterLayout.regular(racks=1, nodes_per_rack=NODES, gpus_per_node=GPUS_PER_NODE)


def _view(index: int, gpus: int, node: int | None) -> JobView:
    return job_view(f"j{index}", gpus, placement=() if node is None else ((node, gpus),))


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[JobView], list[int]]:
    """Single-node jobs packed onto the nodes at random; the rest of each node free or held by
    (unseen) multi-node jobs."""
    running: list[JobView] = []
    free: list[int] = []
    for node in range(NODES):
        left = GPUS_PER_NODE
        while left and draw(st.booleans()):
            gpus = draw(st.integers(1, left))
            running.append(_view(len(running) + 1, gpus, node))
            left -= gpus
        free.append(draw(st.integers(0, left)))
    return running, free


def _reference(
    job: JobView,
    free: FreeGpus,
    running: list[JobView],
    may_move: Callable[[JobView], bool],
    may_preempt: Callable[[JobView], bool],
    move_cost_s: float,
    preempt_cost_s: float,
    history: Callable[[JobView], float],
) -> RoomPlan | None:
    """Every node planned in full; the cheapest plan, the lowest node among equals."""
    best: RoomPlan | None = None
    for node, candidates in single_node_tenants(running).items():
        gpus = sum(v.num_gpus for v in candidates)
        plan = _plan_node(
            node, job, candidates, free, may_move, may_preempt, move_cost_s,
            preempt_cost_s, history, gpus,
        )  # fmt: skip
        if plan is not None and (
            best is None or (plan.cost_gpu_s, node) < (best.cost_gpu_s, best.node)
        ):
            best = plan
    return best


@settings(max_examples=400, deadline=None)
@given(
    cluster=clusters(),
    need=st.integers(1, GPUS_PER_NODE),
    movable=st.lists(st.booleans(), min_size=21, max_size=21),
    preemptable=st.lists(st.booleans(), min_size=21, max_size=21),
    moved_before=st.lists(st.integers(0, 3), min_size=21, max_size=21),
    preempt_cost_s=st.sampled_from([30.0, 60.0, 61.5, 600.0, 3600.0]),
    max_cost=st.one_of(st.just(math.inf), st.floats(0.0, 20_000.0)),
)
def test_the_search_finds_what_planning_every_node_finds(
    cluster: tuple[list[JobView], list[int]],
    need: int,
    movable: list[bool],
    preemptable: list[bool],
    moved_before: list[int],
    preempt_cost_s: float,
    max_cost: float,
) -> None:
    running, free_by_node = cluster
    snapshot = ClusterSnapshot(
        now=0.0,
        layout=LAYOUT,
        free_by_node=tuple(free_by_node),
        free_by_rack=(sum(free_by_node),),
        queued=(),
        running=tuple(running),
    )
    job = _view(99, need, None)

    def may_move(v: JobView) -> bool:
        return movable[v.index]

    def may_preempt(v: JobView) -> bool:
        return preemptable[v.index]

    def history(v: JobView) -> float:
        return 1.0 + moved_before[v.index]

    free = FreeGpus(snapshot)
    expected = _reference(job, free, running, may_move, may_preempt, 60.0, preempt_cost_s, history)
    tenants = single_node_tenants(running)
    found = cheapest_node_room(
        job,
        free,
        tenants,
        may_move,
        may_preempt,
        move_cost_s=60.0,
        preempt_cost_s=preempt_cost_s,
        max_cost_gpu_s=max_cost,
        history=history,
        tenant_gpus=tenants.gpus,
    )
    assert free.by_node == free_by_node  # every reservation given back
    if expected is not None and expected.cost_gpu_s < max_cost:
        assert found == expected
    else:  # nothing the caller could take: none, or a plan it turns down as too dear
        assert found is None or found.cost_gpu_s >= max_cost * (1 - 1e-9)
