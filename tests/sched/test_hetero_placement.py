"""Placements that know GPU types (issue #38 item 2): the shared placement rules and Dally keep
a job on one type, give the fast GPUs to the jobs that gain most from them, weigh a type's speed
against the network, and move a job to a faster type only when the move pays."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from snapshots import cluster_snapshot, job_view
from unstall.sched import placement as pl
from unstall.sched.base import (
    ClusterLayout,
    ClusterSnapshot,
    JobView,
    Placement,
    Sensitivity,
)
from unstall.sched.dally import Dally
from unstall.sched.fifo import Consolidate, Fifo
from unstall.sched.free import FreeGpus
from unstall.sched.tiresias import Tiresias

RNG = random.Random(0)
INSENSITIVE = Sensitivity.flat(1.0, 1.0)

# One rack: node 0 holds 4 V100s, node 1 4 K80s.
SMALL = ClusterLayout.from_nodes(node_rack=(0, 0), node_gpus=(4, 4), node_type=("v100", "k80"))
# One rack: nodes 0-1 of 4 V100s, node 2 of 8 K80s.
WIDE = ClusterLayout.from_nodes(
    node_rack=(0, 0, 0), node_gpus=(4, 4, 8), node_type=("v100", "v100", "k80")
)

# One rack: nodes 0-1 of 8 V100s, node 2 of 8 K80s.
BIG = ClusterLayout.from_nodes(
    node_rack=(0, 0, 0), node_gpus=(8, 8, 8), node_type=("v100", "v100", "k80")
)


def job(
    jid: str,
    gpus: int,
    k80: float,
    *,
    placement: Placement = (),
    sens: Sensitivity = INSENSITIVE,
    submit: float = 0.0,
) -> JobView:
    return job_view(
        jid,
        gpus,
        submit_s=submit,
        sensitivity=sens,
        placement=placement,
        speeds={"v100": 1.0, "k80": k80},
    )


def snap(
    layout: ClusterLayout,
    free: tuple[int, ...],
    queued: list[JobView],
    running: list[JobView] = (),  # type: ignore[assignment]
    now: float = 0.0,
) -> ClusterSnapshot:
    return cluster_snapshot(layout, free, queued, running, now)


def starts_of(decision: object) -> dict[str, Placement]:
    return {s.job_id: s.placement for s in decision.starts}  # type: ignore[attr-defined]


def test_the_job_that_gains_most_gets_the_fast_gpu_under_every_policy() -> None:
    # One V100 and one K80 free, two 1-GPU jobs: the first in every order loses little on a
    # K80 (0.8 of its V100 speed), the second much (0.1). The second gets the V100.
    queued = [job("j0", 1, 0.8), job("j1", 1, 0.1, submit=1.0)]
    free = (1, 1)
    for policy in (Fifo(), Consolidate(), Tiresias(), Dally()):
        got = starts_of(policy.decide(snap(SMALL, free, queued), RNG))
        assert got == {"j0": ((1, 1),), "j1": ((0, 1),)}, (policy.name, got)


def test_uncontended_a_job_takes_its_fastest_type() -> None:
    # One job, both types free: the V100, even though best fit alone would pick either node.
    queued = [job("j0", 1, 0.5)]
    for policy in (Fifo(), Consolidate(), Tiresias(), Dally()):
        assert starts_of(policy.decide(snap(SMALL, (4, 1), queued), RNG)) == {"j0": ((0, 1),)}


def test_a_job_faster_on_the_other_type_takes_that_one() -> None:
    queued = [job("j0", 1, 1.5)]  # faster on K80 than on V100 (the speeds decide, not names)
    for policy in (Fifo(), Consolidate(), Dally()):
        assert starts_of(policy.decide(snap(SMALL, (1, 1), queued), RNG)) == {"j0": ((1, 1),)}


def test_a_job_is_never_placed_across_types() -> None:
    # 2 V100s and 2 K80s free, a 4-GPU job: it waits rather than span both types.
    queued = [job("j0", 4, 0.5)]
    for policy in (Fifo(), Consolidate(), Tiresias(), Dally()):
        assert starts_of(policy.decide(snap(SMALL, (2, 2), queued), RNG)) == {}, policy.name


@settings(max_examples=200, deadline=None)
@given(
    free=st.tuples(*(st.integers(0, 4),) * 2, st.integers(0, 8)),
    gpus=st.integers(1, 8),
    k80=st.sampled_from([0.1, 0.5, 2.0]),
)
def test_the_shared_rules_keep_a_job_on_one_type(
    free: tuple[int, int, int], gpus: int, k80: float
) -> None:
    view = job("j0", gpus, k80)
    s = snap(WIDE, free, [view])
    # Worked out here, not by the code under test: the job's speed is 1 on a V100, k80 on a K80.
    kinds = ("k80", "v100") if k80 > 1.0 else ("v100", "k80")
    assert pl.types_by_speed(view, WIDE) == kinds
    for strict in (False, True):
        scratch = FreeGpus(s)
        placement = scratch.consolidated(gpus, kinds) if strict else scratch.best(gpus, kinds)
        # The fastest type for the job that holds it alone, or none at all (no mixed types).
        first = next((t for t in kinds if _holds(t, free, gpus, strict)), None)
        if first is None:
            assert placement is None
            continue
        assert placement is not None and sum(k for _, k in placement) == gpus
        assert {WIDE.node_type[n] for n, _ in placement} == {first}


def _holds(kind: str, free: tuple[int, int, int], gpus: int, strict: bool) -> bool:
    """Whether WIDE's free GPUs of ``kind`` hold a job of ``gpus`` GPUs: anywhere on them, or
    (``strict``) on as few nodes as the job could ever take on WIDE: one, up to 8 GPUs (the K80
    node has 8), so on one node of that type."""
    on_kind = [f for f, t in zip(free, WIDE.node_type, strict=True) if t == kind]
    return max(on_kind) >= gpus if strict else sum(on_kind) >= gpus
