"""Dally's mechanisms on small hand-made clusters where the right decision is known."""

from __future__ import annotations

import dataclasses
import random

import pytest

from snapshots import cluster_snapshot, job_view
from unstall.errors import ConfigError
from unstall.sched.base import (
    ClusterLayout,
    ClusterSnapshot,
    JobView,
    Placement,
    Sensitivity,
)
from unstall.sched.dally import Dally, DallyConfig
from unstall.sched.dally.delay import DelayFactor, accept_after_s
from unstall.sched.dally.history import RunHistory

LAYOUT = ClusterLayout.regular(racks=1, nodes_per_rack=3, gpus_per_node=4)
RNG = random.Random(0)
SENSITIVE = Sensitivity.flat(3.0, 4.0)
INSENSITIVE = Sensitivity.flat(1.01, 1.02)


def job(
    jid: str,
    gpus: int,
    *,
    sens: Sensitivity = SENSITIVE,
    placement: Placement = (),
    submit: float = 0.0,
    changed: float = 0.0,
    attained: float = 0.0,
) -> JobView:
    return job_view(
        jid,
        gpus,
        submit_s=submit,
        sensitivity=sens,
        attained=attained,
        changed_s=changed,
        placement=placement,
    )


def snap(free: tuple[int, ...], queued: list[JobView], running: list[JobView], now: float):
    return cluster_snapshot(LAYOUT, free, queued, running, now)


def quiet_dally(**overrides: object) -> Dally:
    """Dally with a known expected run time (no finished jobs yet: the prior)."""
    settings: dict[str, object] = {"prior_runtime_s": 3600.0, "autotune": False, "wait_factor": 2.0}
    settings.update(overrides)
    return Dally(DallyConfig(**settings))  # type: ignore[arg-type]


# Two GPUs free on nodes 0 and 1 each: a 4-GPU job can only start spread over two nodes.
FRAGMENTED = (2, 2, 0)
TENANTS = [
    job("r1", 2, sens=SENSITIVE, placement=((0, 2),)),
    job("r2", 2, sens=SENSITIVE, placement=((1, 2),)),
    job("r3", 4, sens=SENSITIVE, placement=((2, 4),)),
]


def test_a_sensitive_job_waits_for_a_node_and_sets_a_timer() -> None:
    d = quiet_dally(preemption=False).decide(snap(FRAGMENTED, [job("q1", 4)], TENANTS, 10.0), RNG)
    assert d.starts == ()
    (timer,) = d.timers
    # Timer: factor 2 x (slowdown 3 - 1) x expected run time 3600 s, from when it was first
    # held back (this round, at 10 s; it queued at 0).
    assert timer.at_s == pytest.approx(10.0 + 2 * 2 * 3600.0)


def test_an_insensitive_job_starts_at_once_spread() -> None:
    q = job("q1", 4, sens=INSENSITIVE)
    d = quiet_dally(preemption=False).decide(snap(FRAGMENTED, [q], TENANTS, 10.0), RNG)
    assert [s.job_id for s in d.starts] == ["q1"]
    assert len(d.starts[0].placement) == 2


def test_a_held_job_accepts_the_worse_level_once_its_timer_expires() -> None:
    policy = quiet_dally(preemption=False)
    timer_s = 2 * 2 * 3600.0
    assert policy.decide(snap(FRAGMENTED, [job("q1", 4)], TENANTS, 10.0), RNG).starts == ()
    early = policy.decide(snap(FRAGMENTED, [job("q1", 4)], TENANTS, 10.0 + timer_s - 1), RNG)
    assert early.starts == ()
    d = policy.decide(snap(FRAGMENTED, [job("q1", 4)], TENANTS, 10.0 + timer_s), RNG)
    assert [s.job_id for s in d.starts] == ["q1"]


def test_the_timer_counts_from_the_first_hold_not_from_the_queueing() -> None:
    # q1 queued long ago (behind other jobs, say): the first spread placement it is offered
    # still has it wait for a node, since it has not yet waited for locality at all.
    policy = quiet_dally(preemption=False)
    long_after = 10 * 2 * 2 * 3600.0
    d = policy.decide(snap(FRAGMENTED, [job("q1", 4)], TENANTS, long_after), RNG)
    assert d.starts == ()
    assert [t.at_s for t in d.timers] == [pytest.approx(long_after + 2 * 2 * 3600.0)]


def test_the_job_starts_consolidated_as_soon_as_a_node_frees() -> None:
    policy = quiet_dally(preemption=False)
    policy.decide(snap(FRAGMENTED, [job("q1", 4)], TENANTS, 10.0), RNG)
    d = policy.decide(snap((2, 2, 4), [job("q1", 4)], TENANTS[:2], 20.0), RNG)
    assert [(s.job_id, s.placement) for s in d.starts] == [("q1", ((2, 4),))]


def test_an_insensitive_tenant_is_moved_to_give_a_sensitive_job_a_node() -> None:
    running = [
        job("r1", 2, sens=INSENSITIVE, placement=((0, 2),)),
        job("r2", 2, sens=SENSITIVE, placement=((1, 2),)),
        job("r3", 2, sens=SENSITIVE, placement=((2, 2),)),
    ]
    d = quiet_dally().decide(snap((2, 2, 2), [job("q1", 4)], running, 10.0), RNG)
    assert [(m.job_id, len(m.placement)) for m in d.migrations] == [("r1", 1)]
    assert d.migrations[0].placement[0][0] != 0
    assert [(s.job_id, s.placement) for s in d.starts] == [("q1", ((0, 4),))]
    assert d.preemptions == ()


def test_a_jobs_record_is_kept_while_it_matters_and_dropped_when_it_finishes() -> None:
    policy = quiet_dally(preemption=False)
    held = job("q1", 4)
    policy.decide(snap(FRAGMENTED, [held], TENANTS, 10.0), RNG)
    record = policy.state.jobs["q1"]
    assert record.held is not None and record.timers_set  # held back, with its timer
    mover = quiet_dally()
    running = [
        job("r1", 2, sens=INSENSITIVE, placement=((0, 2),)),
        job("r2", 2, sens=SENSITIVE, placement=((1, 2),)),
        job("r3", 2, sens=SENSITIVE, placement=((2, 2),)),
    ]
    mover.decide(snap((2, 2, 2), [job("q1", 4)], running, 10.0), RNG)
    assert mover.state.jobs["r1"].moves == 1  # moved to make room
    started = mover.state.jobs["q1"]
    assert started.held is None and started.retry_at is None  # what it kept waiting went
    gone = dataclasses.replace(running[0], placement=((1, 2),))
    after = dataclasses.replace(snap((0, 0, 2), [], running[1:], 20.0), finished=(gone,))
    mover.decide(after, RNG)
    assert "r1" not in mover.state.jobs  # its record went with it, in one place
    assert mover.history.runtimes_for(2)  # and its run time was learnt


def test_a_preemption_that_does_not_pay_is_not_made() -> None:
    # The only node to clear holds a lower-priority tenant that cannot move; the waiting job is
    # barely sensitive (slowdown 1.1), so 0.1 x its expected run time does not beat the
    # tenant's restore plus re-queue cost at the margin of 2.
    running = [
        job("r1", 4, sens=SENSITIVE, placement=((0, 4),), attained=1e6, changed=0.0),
        job("r2", 2, sens=SENSITIVE, placement=((1, 2),)),
        job("r3", 2, sens=SENSITIVE, placement=((2, 2),)),
    ]
    mild = Sensitivity.flat(1.1, 1.2)
    policy = quiet_dally(order="las", prior_runtime_s=600.0, restore_s=60.0)
    d = policy.decide(snap((0, 2, 2), [job("q1", 4, sens=mild)], running, 10.0), RNG)
    assert d.preemptions == () and d.migrations == ()
    # The same tenant is preempted for a very sensitive job with a long expected run time.
    policy = quiet_dally(order="las", prior_runtime_s=36000.0, restore_s=60.0)
    d = policy.decide(snap((0, 2, 2), [job("q1", 4, sens=SENSITIVE)], running, 10.0), RNG)
    assert [p.job_id for p in d.preemptions] == ["r1"]
    assert [(s.job_id, s.placement) for s in d.starts] == [("q1", ((0, 4),))]


def test_a_spread_job_is_reconsolidated_when_a_node_frees_and_it_pays() -> None:
    spread = job("r1", 4, placement=((0, 2), (1, 2)))
    d = quiet_dally().decide(snap((2, 2, 4), [], [spread], 10.0), RNG)
    (move,) = d.migrations
    assert move.job_id == "r1" and len(move.placement) == 1
    # With a tiny expected remainder the move is not worth its restore cost.
    d = quiet_dally(prior_runtime_s=30.0).decide(snap((2, 2, 4), [], [spread], 10.0), RNG)
    assert d.migrations == ()


def test_a_job_is_moved_for_its_own_speed_once_past_the_cap_at_most() -> None:
    """With ``cap_all_moves`` (the default) re-consolidation stops at ``max_moves_per_job + 1``
    moves of a job; off, only its restore, dearer each time, holds it back."""
    spread = job("r1", 4, placement=((0, 2), (1, 2)))
    for cap, moves, moved in ((True, 3, True), (True, 4, False), (False, 4, True)):
        policy = quiet_dally(cap_all_moves=cap, prior_runtime_s=1e5)
        policy.state.record("r1").moves = moves
        d = policy.decide(snap((2, 2, 4), [], [spread], 10.0), RNG)
        assert bool(d.migrations) is moved


def test_timers_grow_with_sensitivity_and_vanish_for_insensitive_jobs() -> None:
    def after(slowdown: float) -> float:
        return accept_after_s(
            slowdown,
            factor=1.0,
            expected_runtime_s=1000.0,
            max_wait_s=1e9,
            insensitive_below=1.05,
        )

    assert after(1.01) == 0.0
    assert after(1.5) < after(2.0) < after(4.0)
    assert after(3.0) == pytest.approx(2000.0)


def delay_factor() -> DelayFactor:
    return DelayFactor(
        value=1.0, enabled=True, adjust_every=2, step=2.0, min_value=0.1, max_value=10.0
    )


def test_autotune_shortens_timers_when_waiting_does_not_pay() -> None:
    t = delay_factor()
    for _ in range(2):  # long waits, little slowdown avoided
        t.observe_start(gpus=1, held_s=1000.0, avoided=1.1, suffered=1.0, expected_s=100.0)
    assert t.value == 0.5


def test_autotune_lengthens_timers_when_giving_up_hurts() -> None:
    t = delay_factor()
    for _ in range(2):  # no waiting, but big slowdowns suffered by jobs that gave up
        t.observe_start(gpus=4, held_s=10.0, avoided=1.0, suffered=3.0, expected_s=1000.0)
    assert t.value == 2.0


def test_expected_remaining_uses_finished_run_times_of_the_size_class() -> None:
    t = RunHistory(prior_runtime_s=100.0)
    assert t.expected_remaining_s(0.0, gpus=4) == 100.0  # the prior
    for runtime in (10.0, 20.0, 1000.0):
        t.observe_finish(runtime, gpus=4)
    assert t.expected_remaining_s(0.0, gpus=4) == pytest.approx(1030.0 / 3)
    assert t.expected_remaining_s(50.0, gpus=4) == pytest.approx(950.0)
    assert t.expected_remaining_s(5000.0, gpus=4) == 5000.0


def test_timer_factor_is_reported_as_telemetry_and_config_is_validated() -> None:
    d = quiet_dally().decide(snap((4, 4, 4), [], [], 0.0), RNG)
    assert dict(d.telemetry)["dally.wait_factor"] == 2.0
    with pytest.raises(ConfigError, match="order"):
        DallyConfig(order="random")
    with pytest.raises(ConfigError, match="tune_step"):
        DallyConfig(tune_step=1.0)


def test_gittins_order_starts_the_job_expected_to_hold_its_gpus_least_first() -> None:
    # Two free GPUs on one node; a 2-GPU job queued first, a 1-GPU job after it. Finished jobs
    # taught the policy that 2-GPU jobs run ~10,000 s and 1-GPU jobs ~100 s.
    queue = [job("q1", 2, submit=0.0), job("q2", 1, sens=INSENSITIVE, submit=5.0)]
    running = [job("r1", 2, placement=((0, 2),)), job("r2", 4, placement=((1, 4),))]
    running.append(job("r3", 4, placement=((2, 4),)))
    started = {}
    for order in ("las", "gittins"):
        policy = quiet_dally(order=order, preemption=False, delay=False)
        for runtime in (9000.0, 11000.0):
            policy.history.observe_finish(runtime, gpus=2)
        for runtime in (90.0, 110.0):
            policy.history.observe_finish(runtime, gpus=1)
        d = policy.decide(snap((2, 0, 0), queue, running, 10.0), RNG)
        started[order] = [s.job_id for s in d.starts]
    assert started == {"las": ["q1"], "gittins": ["q2"]}


def test_gittins_preempts_only_jobs_expected_to_hold_their_gpus_much_longer() -> None:
    policy = quiet_dally(order="gittins", preempt_ratio=2.0)
    for runtime in (100.0, 200.0, 50_000.0):
        policy.history.observe_finish(runtime, gpus=4)
    short = job("q1", 4)  # fresh: expects the class mean, ~16,800 s
    veteran = job("r1", 4, placement=((0, 4),), attained=4 * 1000.0)  # past the short ones
    fresh = job("r2", 4, placement=((1, 4),), attained=4 * 10.0)
    assert policy._outranks(short, veteran, 0.0)  # 49,000 s left > 2 x 16,800
    assert not policy._outranks(short, fresh, 0.0)  # about as long as the waiting job


def test_no_preemption_when_preempted_jobs_were_seen_to_wait_long() -> None:
    running = [
        job("r1", 4, sens=SENSITIVE, placement=((0, 4),), attained=1e6, changed=0.0),
        job("r2", 2, sens=SENSITIVE, placement=((1, 2),)),
        job("r3", 2, sens=SENSITIVE, placement=((2, 2),)),
    ]
    decisions = {}
    for learn in (False, True):
        policy = quiet_dally(
            order="las", prior_runtime_s=36000.0, restore_s=60.0, learn_requeue=learn
        )
        # Restarts of preempted jobs waited days; many ordinary starts since, minutes.
        for _ in range(5):
            policy.history.observe_wait(400_000.0, requeued=True)
        for _ in range(300):
            policy.history.observe_wait(100.0)
        d = policy.decide(snap((0, 2, 2), [job("q1", 4)], running, 10.0), RNG)
        decisions[learn] = [p.job_id for p in d.preemptions]
    # Gain 4 x (3 - 1) x 36,000 s; cost 4 x (60 s + the expected wait) at the margin of 2.
    assert decisions == {False: ["r1"], True: []}


# --- incremental rounds and churn ---------------------------------------------------------------

# Node 0 is held by a lower-priority (LAS: more service) tenant that cannot move anywhere; the
# sensitive waiting job q1 may preempt it once the preemption pays; too few GPUs are free
# elsewhere for it to start spread.
LONG_TENANT = [
    job("r1", 4, sens=SENSITIVE, placement=((0, 4),), attained=1e6),
    job("r2", 2, sens=SENSITIVE, placement=((1, 2),)),
    job("r3", 2, sens=SENSITIVE, placement=((2, 2),)),
]


def test_a_failed_preemption_is_retried_only_after_a_share_of_the_wait() -> None:
    mild = Sensitivity.flat(1.1, 1.2)  # does not pay: 0.1 x its expected run time is too little
    policy = quiet_dally(order="las", prior_runtime_s=600.0, retry_fraction=0.5, retry_min_s=300.0)
    waiting = job("q1", 4, sens=mild)
    calls = []
    real = policy._preempt_for

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args[1].now)
        return real(*args, **kwargs)

    policy._preempt_for = counting  # type: ignore[method-assign]
    for now in (10.0, 100.0, 200.0, 400.0, 2000.0, 2500.0, 3000.0):
        d = policy.decide(snap((0, 1, 1), [waiting], LONG_TENANT, now), RNG)
        assert d.preemptions == ()
    # Tried at 10 s (retry after max(300 s, 0.5 x 10) -> 310), at 400 s (-> 700), at 2000 s
    # (-> 3000), at 3000 s; the rounds in between, where nothing changed, did not look at it.
    assert calls == [10.0, 400.0, 2000.0, 3000.0]


def test_unchanged_rounds_still_place_new_jobs_and_jobs_whose_timer_fired() -> None:
    policy = quiet_dally(preemption=False)
    held = job("q1", 4)
    d = policy.decide(snap(FRAGMENTED, [held], TENANTS, 10.0), RNG)
    assert d.starts == () and len(d.timers) == 1
    # A new 1-GPU job in an otherwise unchanged round starts at once.
    d = policy.decide(snap(FRAGMENTED, [held, job("q2", 1)], TENANTS, 20.0), RNG)
    assert [s.job_id for s in d.starts] == ["q2"]
    # (q2 is gone again; the next round sees a changed tenancy and settles.)
    assert policy.decide(snap(FRAGMENTED, [held], TENANTS, 30.0), RNG).starts == ()
    # Nothing changes until the held job's timer fires (its timer: from the hold at 10 s): it
    # takes the spread level then.
    late = 10.0 + 2 * 2 * 3600.0
    fired = snap(FRAGMENTED, [held], TENANTS, late)
    d = policy.decide(dataclasses.replace(fired, fired_timers=("dally:q1",)), RNG)
    assert [s.job_id for s in d.starts] == ["q1"]


def test_a_job_moved_max_moves_per_job_times_is_not_moved_again() -> None:
    running = [
        job("r1", 2, sens=INSENSITIVE, placement=((0, 2),)),
        job("r2", 2, sens=SENSITIVE, placement=((1, 2),)),
        job("r3", 2, sens=SENSITIVE, placement=((2, 2),)),
    ]
    policy = quiet_dally(max_moves_per_job=1)
    d = policy.decide(snap((2, 2, 2), [job("q1", 4)], running, 10.0), RNG)
    assert [m.job_id for m in d.migrations] == ["r1"]  # moved once: room for q1
    # Later r1 (now on node 1) is again the only tenant in the way of another sensitive job.
    moved = [
        job("r1", 2, sens=INSENSITIVE, placement=((1, 2),), changed=10.0),
        job("q1", 4, sens=SENSITIVE, placement=((0, 4),), changed=10.0),
        job("r3", 2, sens=SENSITIVE, placement=((2, 2),)),
    ]
    d = policy.decide(snap((0, 2, 2), [job("q4", 4)], moved, 50.0), RNG)
    assert d.migrations == () and d.preemptions == ()
    # A fresh policy (r1 never moved) would move it.
    d = quiet_dally(max_moves_per_job=1).decide(snap((0, 2, 2), [job("q4", 4)], moved, 50.0), RNG)
    assert [m.job_id for m in d.migrations] == ["r1"]


def test_a_victim_moved_before_costs_more() -> None:
    from unstall.sched.dally.preemption import cheapest_node_room, single_node_tenants
    from unstall.sched.free import FreeGpus

    running = [
        job("r1", 2, sens=INSENSITIVE, placement=((0, 2),)),
        job("r2", 2, sens=INSENSITIVE, placement=((1, 2),)),
    ]
    free = FreeGpus(snap((2, 2, 4), [], running, 0.0))
    free.take(((2, 4),))  # node 2 is taken: the victims can only swap nodes 0 and 1
    free.give(((2, 2),))  # two GPUs on node 2: room for one moved victim

    def room(history):  # type: ignore[no-untyped-def]
        return cheapest_node_room(
            job("q1", 4),
            free,
            single_node_tenants(running),
            lambda v: True,
            lambda v: False,
            move_cost_s=60.0,
            preempt_cost_s=600.0,
            history=history,
        )

    assert room(lambda v: 1.0).node == 0  # equal costs: the lower node
    plan = room(lambda v: 3.0 if v.job_id == "r1" else 1.0)
    assert plan.node == 1 and plan.cost_gpu_s == 2 * 60.0  # r1 moved twice before: avoided


def test_dally_schedules_only_on_events_unless_asked_for_ticks() -> None:
    from unstall.sched import resolve_policy

    assert resolve_policy("dally-fixed").tick_s is None
    assert resolve_policy("dally-fixed", (("tick_s", "300"),)).tick_s == 300.0
    assert resolve_policy("dally-fixed", (("tick_s", "none"),)).tick_s is None
    bad = r"dally-fixed\.tick_s: 'soon' is not a number \(or none\)"  # named as typed
    with pytest.raises(ConfigError, match=bad):
        resolve_policy("dally-fixed", (("tick_s", "soon"),))
    with pytest.raises(ConfigError, match=r"DallyConfig\.tick_s"):
        DallyConfig(tick_s=0.0)


def test_the_kept_queue_follows_a_snapshot_that_lost_or_changed_jobs() -> None:
    # Dally keeps the queue between rounds and finds new jobs from its newest end; a queue
    # that lost a job Dally did not start (or whose views were made anew) is taken as it is.
    policy = quiet_dally(preemption=False, order="las")  # LAS: here, oldest first
    full = (0, 0, 0)
    a, b, c = job("q1", 4), job("q2", 4, submit=1.0), job("q3", 1, submit=2.0)
    assert policy.decide(snap(full, [a, b, c], TENANTS, 10.0), RNG).starts == ()
    # q1, the oldest, left the queue behind Dally's back and q4 arrived; a node frees: the
    # oldest job queued now starts, not q1.
    d = policy.decide(snap((0, 0, 4), [b, c, job("q4", 4, submit=3.0)], TENANTS[:2], 20.0), RNG)
    assert [s.job_id for s in d.starts] == ["q2"]
    # Views made anew for the jobs still queued (as another backend might): still right.
    again = [job("q3", 1, submit=2.0), job("q4", 4, submit=3.0)]
    d = policy.decide(snap((0, 0, 4), again, TENANTS[:2], 30.0), RNG)
    assert [s.job_id for s in d.starts] == ["q3"]


def test_a_queue_without_an_order_from_its_newest_end_is_read_whole() -> None:
    class Unordered(list[JobView]):  # a collection ``reversed`` refuses
        def __reversed__(self):  # type: ignore[no-untyped-def]
            raise TypeError("no order")

    policy = quiet_dally(preemption=False, order="las")
    base = snap((0, 0, 4), [], TENANTS[:2], 10.0)
    queued = Unordered([job("q1", 4), job("q2", 1, submit=1.0)])
    d = policy.decide(dataclasses.replace(base, queued=queued), RNG)
    assert [s.job_id for s in d.starts] == ["q1"]


def test_a_group_too_large_to_start_is_passed_over_for_smaller_jobs_behind_it() -> None:
    # Three 12-GPU jobs (larger than a node, and than the 4 free GPUs) come first in the
    # order (LAS: no service yet, earlier submits); the 2-GPU job behind them still starts.
    policy = quiet_dally(order="las")
    big = [job(f"q{i}", 12, submit=float(i)) for i in range(1, 4)]
    small = job("q9", 2, submit=9.0)
    d = policy.decide(snap((0, 0, 4), [*big, small], TENANTS[:2], 10.0), RNG)
    assert [s.job_id for s in d.starts] == ["q9"]


def test_a_timer_is_capped_only_when_asked() -> None:
    def after(cap: float | None) -> float:
        return accept_after_s(
            3.0, factor=2.0, expected_runtime_s=1000.0, max_wait_s=cap, insensitive_below=1.05
        )

    assert after(None) == pytest.approx(4000.0)
    assert after(500.0) == 500.0
    assert DallyConfig().max_wait_s is None
    with pytest.raises(ConfigError, match=r"DallyConfig\.max_wait_s"):
        DallyConfig(max_wait_s=0.0)


TWO_RACKS = ClusterLayout.regular(racks=2, nodes_per_rack=2, gpus_per_node=4)


def two_rack_snap(free: tuple[int, ...], queued: list[JobView]) -> ClusterSnapshot:
    return ClusterSnapshot(
        now=0.0,
        layout=TWO_RACKS,
        free_by_node=free,
        free_by_rack=(free[0] + free[1], free[2] + free[3]),
        queued=tuple(queued),
        running=(),
        spread_jobs_by_node=(0,) * TWO_RACKS.num_nodes,
    )


def test_a_job_that_fits_a_rack_is_not_spread_over_racks_unless_allowed() -> None:
    # One free node in each rack: an 8-GPU job (a rack's worth) could only start over both.
    s = two_rack_snap((4, 0, 0, 4), [job("q1", 8, sens=INSENSITIVE)])
    assert quiet_dally().decide(s, RNG).starts == ()
    allowed = quiet_dally(span_racks=True).decide(s, RNG)
    assert [st.placement for st in allowed.starts] == [((0, 4), (3, 4))]


def test_a_job_larger_than_a_rack_still_spans_racks_when_only_spread_room_is_free() -> None:
    # 12 GPUs free over four nodes: more nodes than the job's fewest (three), over both racks.
    s = two_rack_snap((4, 2, 2, 4), [job("q1", 12, sens=INSENSITIVE)])
    starts = quiet_dally().decide(s, RNG).starts
    assert [st.placement for st in starts] == [((0, 4), (1, 2), (2, 2), (3, 4))]


def taught_gittins(**overrides: object) -> Dally:
    """Gittins order, no timers or preemption; finished jobs taught it that 2-GPU jobs run
    ~10,000 s and 1-GPU jobs ~100 s."""
    policy = quiet_dally(order="gittins", preemption=False, delay=False, **overrides)
    for runtime in (9000.0, 11000.0):
        policy.history.observe_finish(runtime, gpus=2)
    for runtime in (90.0, 110.0):
        policy.history.observe_finish(runtime, gpus=1)
    return policy


BUSY = [job("r1", 2, placement=((0, 2),)), job("r2", 4, placement=((1, 4),))]
BUSY.append(job("r3", 4, placement=((2, 4),)))


def test_the_gittins_order_ages_a_large_job_that_smaller_ones_kept_passing() -> None:
    # Two GPUs free on one node: the 2-GPU job q1 or the 1-GPU job q2 (queued 5 s ago).
    # q2 goes first while q1 is young, or at any age without aging; once q1 has waited ~500
    # times its expected 10,000 s over the aging weight of 30, it ranks first.
    def first(age_weight: float, now: float) -> list[str]:
        young = job("q2", 1, sens=INSENSITIVE, submit=now - 5.0, changed=now - 5.0)
        queue = [job("q1", 2, submit=0.0), young]
        d = taught_gittins(age_weight=age_weight).decide(snap((2, 0, 0), queue, BUSY, now), RNG)
        return [s.job_id for s in d.starts]

    assert first(30.0, 10.0) == ["q2"]
    assert first(0.0, 200_000.0) == ["q2"]
    assert first(30.0, 200_000.0) == ["q1"]
    with pytest.raises(ConfigError, match=r"DallyConfig\.age_weight"):
        DallyConfig(age_weight=-1.0)


def test_a_group_ages_by_its_oldest_job_still_waiting() -> None:
    # q1 (queued at 0) and q3 (queued just now) form one group of 2-GPU jobs. Once q1 has
    # started, the group is as young as q3, though its kept list still holds q1: the fresh
    # 1-GPU job q2 goes first.
    policy = taught_gittins(age_weight=30.0)
    now = 200_000.0
    q1, q3 = job("q1", 2, submit=0.0), job("q3", 2, submit=now - 1.0, changed=now - 1.0)
    d = policy.decide(snap((2, 0, 0), [q1, q3], BUSY, now), RNG)
    assert [s.job_id for s in d.starts] == ["q1"]
    running = [job("r1", 2, placement=((0, 2),)), *BUSY[1:]]  # q1 runs where r1 was; r1 ended
    q2 = job("q2", 1, sens=INSENSITIVE, submit=now + 5.0, changed=now + 5.0)
    d = policy.decide(snap((2, 0, 0), [q3, q2], running, now + 10.0), RNG)
    assert [s.job_id for s in d.starts] == ["q2"]


# --- priority preemption ------------------------------------------------------------------------


def taught_priority(**overrides: object) -> Dally:
    """Gittins order with priority preemption; finished jobs taught it that most 4-GPU jobs end
    within 100 s but one ran 20,000 s, and that 8-GPU jobs run about a minute."""
    settings: dict[str, object] = {"order": "gittins", "delay": False, "restore_s": 60.0}
    settings.update(overrides)
    policy = quiet_dally(**settings)
    for runtime in (100.0, 100.0, 100.0, 20_000.0):
        policy.history.observe_finish(runtime, gpus=4)
    for runtime in (50.0, 60.0, 70.0):
        policy.history.observe_finish(runtime, gpus=8)
    return policy


# Every GPU busy: two veterans that ran past the short 4-GPU jobs (expected ~19,000 s more
# each) and a fresh one (expected ~5,000 s more); an 8-GPU job (larger than a node) waits.
FULL = [
    job("r1", 4, sens=INSENSITIVE, placement=((0, 4),), attained=4 * 1000.0),
    job("r2", 4, sens=INSENSITIVE, placement=((1, 4),), attained=4 * 10.0),
    job("r3", 4, sens=INSENSITIVE, placement=((2, 4),), attained=4 * 1000.0),
]
LARGE = job("q1", 8, sens=INSENSITIVE, submit=5.0)


def test_a_short_job_larger_than_a_node_preempts_the_longest_holding_jobs() -> None:
    d = taught_priority().decide(snap((0, 0, 0), [LARGE], FULL, 10.0), RNG)
    # Expected GPU-time: q1 8 x 60 s; r1 and r3 4 x 19,000 s, far above twice q1's. Gain:
    # 8 GPUs x its wait until two nodes are expected to free (19,000 s); cost: per victim
    # 4 x (60 s restore + q1's 60 s) at the margin of 2.
    assert sorted(p.job_id for p in d.preemptions) == ["r1", "r3"]
    assert [(s.job_id, s.placement) for s in d.starts] == [("q1", ((0, 4), (2, 4)))]


def test_priority_preemption_needs_victims_expected_to_hold_their_gpus_much_longer() -> None:
    policy = taught_priority()
    for runtime in (40_000.0, 40_000.0, 40_000.0):  # 8-GPU jobs now look long
        policy.history.observe_finish(runtime, gpus=8)
    d = policy.decide(snap((0, 0, 0), [LARGE], FULL, 10.0), RNG)
    assert d.preemptions == () and d.starts == ()


def test_priority_preemption_is_made_only_when_the_wait_it_saves_pays() -> None:
    d = taught_priority(restore_s=1e6).decide(snap((0, 0, 0), [LARGE], FULL, 10.0), RNG)
    assert d.preemptions == () and d.starts == ()


@pytest.mark.parametrize(
    "overrides",
    [{"priority_preemption": False}, {"preemption": False}, {"order": "las"}],
    ids=["off", "preemption-off", "las-order"],
)
def test_priority_preemption_only_with_the_gittins_order_and_preemption_on(
    overrides: dict[str, object],
) -> None:
    d = taught_priority(**overrides).decide(snap((0, 0, 0), [LARGE], FULL, 10.0), RNG)
    assert d.preemptions == () and d.starts == ()


def test_a_job_moved_max_moves_per_job_times_is_not_preempted_for_priority() -> None:
    policy = taught_priority()
    policy.state.record("r1").moves = 3  # max_moves_per_job
    d = policy.decide(snap((0, 0, 0), [LARGE], FULL, 10.0), RNG)
    assert sorted(p.job_id for p in d.preemptions) == ["r2", "r3"]
    assert {k: r.moves for k, r in policy.state.jobs.items() if r.moves} == {
        "r1": 3,
        "r2": 1,
        "r3": 1,
    }


def test_a_failed_priority_preemption_is_asked_once_a_group_and_retried_later() -> None:
    policy = taught_priority(restore_s=1e6, retry_fraction=0.5, retry_min_s=300.0)
    twins = [LARGE, job("q2", 8, sens=INSENSITIVE, submit=6.0)]
    asked = []
    real = policy._preempt_for_priority

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        asked.append((args[0].job_id, args[1].now))
        return real(*args, **kwargs)

    policy._preempt_for_priority = counting  # type: ignore[method-assign]
    policy.decide(snap((0, 0, 0), [], FULL, 1.0), RNG)
    for now in (10.0, 100.0, 400.0):
        policy.decide(snap((0, 0, 0), twins, FULL, now), RNG)
    # At 10 s both twins are new to an unchanged cluster: q2 is in q1's group (same size and
    # service), whose answer it would share. q1 tries again only after max(300 s, half its
    # wait): at 400 s, not at 100 s.
    assert asked == [("q1", 10.0), ("q1", 400.0)]


def test_a_job_that_fits_a_node_does_not_preempt_for_priority() -> None:
    node_sized = job("q1", 4, sens=INSENSITIVE, submit=5.0)
    d = taught_priority().decide(snap((0, 0, 0), [node_sized], FULL, 10.0), RNG)
    assert d.preemptions == () and d.starts == ()


def test_priority_preemption_does_not_start_a_sensitive_job_spread() -> None:
    # Preempting the longest-holding jobs (r1, r3, then r2) frees 8 GPUs over three nodes, not
    # two whole ones: an insensitive job takes them; a sensitive one is not started spread past
    # its delay timer, so nothing is preempted for it.
    running = [
        job("r1", 2, sens=INSENSITIVE, placement=((0, 2),), attained=2 * 1000.0),
        job("r4", 2, sens=INSENSITIVE, placement=((0, 2),), attained=2 * 10.0),
        job("r2", 4, sens=INSENSITIVE, placement=((1, 4),), attained=4 * 10.0),
        job("r3", 2, sens=INSENSITIVE, placement=((2, 2),), attained=2 * 1000.0),
        job("r5", 2, sens=INSENSITIVE, placement=((2, 2),), attained=2 * 10.0),
    ]
    started = {}
    for sens in (INSENSITIVE, SENSITIVE):
        d = taught_priority().decide(snap((0, 0, 0), [job("q1", 8, sens=sens)], running, 10.0), RNG)
        started[sens is SENSITIVE] = (
            sorted(p.job_id for p in d.preemptions),
            [(s.job_id, s.placement) for s in d.starts],
        )
    assert started == {
        False: (["r1", "r2", "r3"], [("q1", ((0, 2), (1, 4), (2, 2)))]),
        True: ([], []),
    }
