"""Dally on a busy cluster of several GPU types (issue 49, item 3): a waiting job clears a node
of a faster type by moving its tenants within that type (never to another one), and a job that
finds no room on any type it may take preempts jobs ranked below it (time-sharing of the types,
on by default there), which a cluster of one type never does."""

from __future__ import annotations

import dataclasses
import random

from snapshots import cluster_snapshot, job_view
from unstall.sched.base import ClusterLayout, JobView, Migrate, Placement, Sensitivity
from unstall.sched.dally import Dally, DallyConfig

RNG = random.Random(0)
INSENSITIVE = Sensitivity.flat(1.0, 1.0)
SENSITIVE = Sensitivity.flat(3.0, 4.0)

# One rack: nodes 0-1 of 8 V100s, node 2 of 8 K80s.
BIG = ClusterLayout.from_nodes(
    node_rack=(0, 0, 0), node_gpus=(8, 8, 8), node_type=("v100", "v100", "k80")
)


def job(
    jid: str,
    gpus: int,
    *,
    placement: Placement = (),
    sens: Sensitivity = INSENSITIVE,
    k80: float = 0.3,
    changed_s: float = 0.0,
    submit: float = 0.0,
) -> JobView:
    return job_view(
        jid,
        gpus,
        submit_s=submit,
        sensitivity=sens,
        placement=placement,
        changed_s=changed_s,
        speeds={"v100": 1.0, "k80": k80},
    )


def test_a_fragmented_fast_type_is_cleared_by_a_move_within_the_type() -> None:
    # 8 V100s are free but over two nodes (6 + 2): the sensitive 8-GPU job would run 3x slower
    # spread, and the K80 node is full. Moving the 2-GPU tenant of node 0 onto node 1's two free
    # V100s clears node 0 for it at the cost of one restore.
    small = job("r1", 2, placement=((0, 2),))
    rest = job("r2", 6, placement=((1, 6),))
    k80 = job("r3", 8, placement=((2, 8),))
    waiting = job("w4", 8, sens=SENSITIVE, submit=10.0)
    snap = cluster_snapshot(BIG, (6, 2, 0), [waiting], [small, rest, k80], now=20.0)
    decision = Dally().decide(snap, RNG)
    assert decision.migrations == (Migrate("r1", ((1, 2),), "room for w4"),)
    assert {s.job_id: s.placement for s in decision.starts} == {"w4": ((0, 8),)}
    assert decision.preemptions == ()


def test_tenants_are_never_moved_to_another_type_to_clear_a_node() -> None:
    # The only room for the 2-GPU tenant of node 0 is on the K80s: it stays (it would run 3x
    # slower there), and the 8-GPU job takes the K80 node, free and consolidated.
    small = job("r1", 2, placement=((0, 2),))
    full = job("r2", 8, placement=((1, 8),))
    waiting = job("w3", 8, sens=SENSITIVE, submit=10.0)
    snap = cluster_snapshot(BIG, (6, 0, 8), [waiting], [small, full], now=20.0)
    decision = Dally().decide(snap, RNG)
    assert decision.migrations == ()
    assert decision.preemptions == ()
    assert {s.job_id: s.placement for s in decision.starts} == {"w3": ((2, 8),)}


def _busy(layout: ClusterLayout, now: float) -> tuple[list[JobView], JobView]:
    """Every GPU held by jobs that have run since 0 (expected to hold theirs long), and a new
    insensitive 1-GPU job."""
    running = [job(f"r{n}", 8, placement=((n, 8),), changed_s=0.0) for n in range(layout.num_nodes)]
    return running, job("w9", 1, submit=now)


def test_with_no_room_on_any_type_a_new_job_preempts_a_long_one_on_several_types() -> None:
    now = 100_000.0
    running, waiting = _busy(BIG, now)
    snap = cluster_snapshot(BIG, (0, 0, 0), [waiting], running, now=now)
    decision = Dally().decide(snap, RNG)
    assert len(decision.preemptions) == 1
    victim = decision.preemptions[0].job_id
    start = {s.job_id: s.placement for s in decision.starts}["w9"]
    (node, gpus) = start[0]
    assert gpus == 1 and len(start) == 1
    assert next(j for j in running if j.job_id == victim).placement[0][0] == node
    # Off (as on one type), the job waits.
    off = Dally(DallyConfig(service_preemption_on_types=False)).decide(snap, RNG)
    assert off.preemptions == () and off.starts == ()


def test_a_cluster_of_one_type_never_preempts_for_service_by_default() -> None:
    one = ClusterLayout.from_nodes(
        node_rack=(0, 0, 0), node_gpus=(8, 8, 8), node_type=("v100",) * 3
    )
    now = 100_000.0
    running, waiting = _busy(one, now)
    snap = cluster_snapshot(one, (0, 0, 0), [waiting], running, now=now)
    decision = Dally().decide(snap, RNG)
    assert decision.preemptions == () and decision.starts == ()


# One rack: nodes 0-1 of 4 V100s, node 2 of 8 K80s.
SMALL_FAST = ClusterLayout.from_nodes(
    node_rack=(0, 0, 0), node_gpus=(4, 4, 8), node_type=("v100", "v100", "k80")
)


def test_a_ring_over_fast_nodes_loses_to_one_slow_node_under_congestion() -> None:
    # An 8-GPU job consolidated on the V100s spans both V100 nodes: its ring runs 1.2x slower at
    # congestion 0.8 than on idle links and 3x at 0.95; on the K80 node (half as fast) it
    # crosses no NIC. Idle-ish, the V100s are cheaper; under heavy congestion the K80 node is.
    ring = Sensitivity(
        node=(2.0,) * 7, rack=(3.0,) * 7, consolidated=(1.0, 1.0, 1.0, 1.1, 1.2, 2.0, 3.0)
    )
    waiting = job("w1", 8, sens=ring, k80=0.5)
    for congestion, where in ((0.0, ((0, 4), (1, 4))), (0.95, ((2, 8),))):
        snap = cluster_snapshot(SMALL_FAST, (4, 4, 8), [waiting], [], now=0.0)
        snap = dataclasses.replace(snap, congestion=congestion)
        decision = Dally().decide(snap, RNG)
        assert {s.job_id: s.placement for s in decision.starts} == {"w1": where}
