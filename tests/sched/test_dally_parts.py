"""Dally's queue index, its preemption victims' figures, its steps and per-job records, on
their own."""

from __future__ import annotations

import pytest

from snapshots import job_view
from unstall.sched import resolve_policy
from unstall.sched.base import JobView, Sensitivity
from unstall.sched.dally import Dally, DallyConfig
from unstall.sched.dally.config import ROUND_STEPS, STEPS
from unstall.sched.dally.expected_runtimes import ExpectedRemaining
from unstall.sched.dally.queue_index import QueueIndex, group_of
from unstall.sched.dally.victim_figures import VictimFigures


def view(
    job_id: str,
    gpus: int = 1,
    *,
    submit: float = 0.0,
    index: int = 0,
    attained: float = 0.0,
    placement: tuple[tuple[int, int], ...] = (),
    sens: float = 1.5,
) -> JobView:
    return job_view(
        job_id,
        gpus,
        index=index,
        submit_s=submit,
        model="resnet50",
        sensitivity=Sensitivity.flat(sens, sens),
        attained=attained,
        placement=placement,
    )


def test_sync_returns_only_the_jobs_new_at_the_queue_s_end() -> None:
    index = QueueIndex()
    a, b, c = (view(n, submit=float(i), index=i) for i, n in enumerate("abc"))
    assert index.sync([a, b]) == [a, b]
    assert index.sync([a, b, c]) == [c]
    assert index.sync([a, b, c]) == []
    assert set(index.by_id) == {"a", "b", "c"}


def test_sync_starts_over_when_a_job_left_that_the_policy_did_not_start() -> None:
    index = QueueIndex()
    a, b, c = (view(n, submit=float(i), index=i) for i, n in enumerate("abc"))
    index.sync([a, b])
    # b left the queue without leave() (e.g. another backend's decision): a fresh index.
    assert index.sync([a, c]) == [c]
    assert set(index.by_id) == {"a", "c"}
    assert index.groups == {group_of(a): [a, c]}


def test_groups_keep_arrival_order_and_leave_compacts_them() -> None:
    index = QueueIndex()
    late = view("late", 2, submit=5.0, index=5)
    early = view("early", 2, submit=1.0, index=1)
    other = view("other", 4, submit=2.0, index=2)
    index.sync([late])
    index.sync([late, early, other])  # not a suffix in arrival order: inserted by arrival
    key = group_of(late)
    assert index.groups[key] == [early, late]
    assert index.oldest_waiting(key, index.groups[key]) is early
    index.leave(early)  # half of the group started: kept until more than half have
    assert index.groups[key] == [early, late]
    assert index.oldest_waiting(key, index.groups[key]) is late
    index.leave(late)
    assert key not in index.groups and group_of(other) in index.groups
    assert set(index.by_id) == {"other"}


def test_ranks_keep_arrival_order_per_rank_and_follow_rank_by() -> None:
    index = QueueIndex(rank=lambda job: 0 if job.attained_gpu_s_at_change < 100.0 else 1)
    late = view("late", 2, submit=5.0, index=5)
    early = view("early", 4, submit=1.0, index=1)
    served = view("served", 1, submit=0.0, index=0, attained=500.0)
    index.sync([late])
    index.sync([late, early, served])  # joins out of arrival order: inserted by arrival
    assert index.ranks == {0: [early, late], 1: [served]}
    index.leave(early)  # half of the rank started: kept until more than half have
    assert index.ranks[0] == [early, late]
    index.leave(served)
    assert index.ranks == {0: [early, late]}
    index.rank_by(lambda job: job.num_gpus)  # new lists, from the jobs still waiting
    assert index.ranks == {2: [late]}
    index.rank_by(None)
    assert index.ranks == {} and set(index.by_id) == {"late"}


def test_dally_las_pass_goes_by_level_then_arrival_as_its_priority_sorts() -> None:
    policy = Dally(DallyConfig(order="las", las_thresholds_gpu_s=(100.0, 1000.0)))
    jobs = [
        view(
            f"j{i}",
            1 + i % 3,
            submit=float(i % 7),
            index=i,
            attained=(0.0, 50.0, 500.0, 5e3)[i % 4],
        )
        for i in range(40)
    ]
    policy.state.queue.sync(sorted(jobs, key=lambda j: (j.submit_s, j.index)))
    for job in jobs[::5]:
        policy.state.queue.leave(job)
    waiting = [
        j
        for members, _ in policy._queue_in_order(0.0)
        for j in members
        if j.job_id in policy.state.queue.by_id
    ]
    assert waiting == sorted(
        policy.state.queue.by_id.values(), key=lambda j: policy._priority(j, 0.0)
    )
    other = Dally(DallyConfig(order="las", las_thresholds_gpu_s=(10.0,)))  # new levels
    other.continue_from(policy)
    policy = other
    waiting = [
        j
        for members, _ in policy._queue_in_order(0.0)
        for j in members
        if j.job_id in policy.state.queue.by_id
    ]
    assert waiting == sorted(
        policy.state.queue.by_id.values(), key=lambda j: policy._priority(j, 0.0)
    )


def test_victim_figures_are_kept_for_a_round_and_tenants_for_a_tenancy() -> None:
    history = Dally(DallyConfig(prior_runtime_s=1000.0)).history
    figures = VictimFigures(history)
    r1 = view("r1", 2, index=1, placement=((0, 2),), sens=1.2)
    r2 = view("r2", 4, index=2, placement=((0, 4),))
    r3 = view("r3", 2, index=3, placement=((1, 1), (2, 1)))
    tenants = figures.tenants([r1, r2, r3], version=0)
    assert dict(tenants) == {0: [r1, r2]} and tenants.gpus == {0: 6}
    assert figures.tenants([r1], version=0) is tenants  # the same tenancy: kept
    assert figures.tenants([r1], version=1) == {0: [r1]}
    assert figures.slowdown(r1, 0.0) == 1.2
    figures.start_round(10.0, 1)
    first = figures.expected_gpu_s(r2, 10.0)
    assert first == 4 * history.expected_remaining_s(r2.attained_gpu_s(10.0) / 4, 4)
    history.observe_finish(5.0, gpus=4)  # what the history learns shows in the next round only
    assert figures.expected_gpu_s(r2, 10.0) == first
    priority = figures.for_priority([r1, r2], 10.0, 1)
    assert figures.for_priority([r1, r2], 10.0, 1) is priority
    assert [v.job_id for _, _, v in priority.by_gpu_s] == ["r2", "r1"]
    figures.start_round(20.0, 1)
    assert figures.expected_gpu_s(r2, 20.0) != first


def test_expected_run_times_are_kept_until_the_history_learns_of_the_size() -> None:
    history = Dally(DallyConfig(prior_runtime_s=1000.0)).history
    expected = ExpectedRemaining(history)
    two, four = view("a", 2), view("b", 4)
    prior = expected.of(two, 0.0)
    assert expected.of_group(group_of(two), two, 0.0) == prior == expected.of(four, 0.0)
    # A 2-GPU job finished: its class's figure is forgotten and learnt anew; the 4-GPU class,
    # which has no run time of its own yet, is forgotten too (it is expected by every class's).
    finished = view("done", 2, placement=((0, 2),))
    expected.forget_learnt([finished])
    history.observe_finish(10.0, gpus=2)
    assert expected.of(two, 0.0) != prior
    assert expected.of(four, 0.0) == history.expected_remaining_s(0.0, 4)


def test_outranked_by_answers_as_outranks_in_every_order() -> None:
    running = [
        view(f"r{i}", 1 + i % 4, index=i, attained=a, placement=((i % 3, 1 + i % 4),))
        for i, a in enumerate((0.0, 99.0, 100.0, 101.0, 999.0, 1000.0, 5e3, 7e4))
    ]
    waiting = [view(f"w{i}", 2, index=10 + i, attained=a) for i, a in enumerate((0.0, 100.0, 2e3))]
    for config in (
        DallyConfig(order="las", las_thresholds_gpu_s=(100.0, 1000.0)),
        DallyConfig(order="las", las_thresholds_gpu_s=(1000.0, 100.0)),  # not ascending
        DallyConfig(order="las", las_thresholds_gpu_s=(100.0, 100.0)),
        DallyConfig(order="fifo"),
        DallyConfig(order="gittins", prior_runtime_s=1000.0),
    ):
        policy = Dally(config)
        for job in waiting:
            outranked = policy._outranked_by(job, 0.0)  # service as given: some at a threshold
            assert [outranked(v) for v in running] == [
                policy._outranks(job, v, 0.0) for v in running
            ]


NO_RANK_PREEMPTION = {"priority-preemption", "service-preemption"}


@pytest.mark.parametrize(
    ("options", "off"),
    [
        ((), {"service-preemption"}),
        ((("delay", "off"),), {"delay", "service-preemption"}),
        ((("service_preemption", "on"),), set()),
        ((("order", "las"),), NO_RANK_PREEMPTION),
        (
            (("order", "fifo"), ("service_preemption", "on")),
            {"priority-preemption", "service-preemption", "service-preemption-on-types"},
        ),
        (
            (("service_preemption_on_types", "off"),),
            {"service-preemption", "service-preemption-on-types"},
        ),
        ((("priority_preemption", "off"),), NO_RANK_PREEMPTION),
        (
            (("preemption", "off"), ("service_preemption", "on")),
            {
                "retype",
                "reconsolidate",
                "locality-preemption",
                "priority-preemption",
                "service-preemption",
                "service-preemption-on-types",
            },
        ),
    ],
)
def test_the_options_as_typed_turn_the_named_steps_on_and_off(
    options: tuple[tuple[str, str], ...], off: set[str]
) -> None:
    policy = resolve_policy("dally-fixed", options)
    assert isinstance(policy, Dally)
    assert policy.steps == set(STEPS) - off
    assert policy.round_steps == tuple(s for s in ROUND_STEPS if s not in off)
