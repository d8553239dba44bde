"""Re-planning over arrays gives, to the bit, what the per-job float code gives."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from unstall.loop.jobs import Job
from unstall.sched.base import Sensitivity
from unstall.sim.network_jobs import NetworkJobs
from unstall.sim.speed import RateTiming

positive = st.floats(1e-3, 1e3)
term = st.tuples(positive, st.sampled_from([1.0, 2.0, 7.0]), st.floats(0.0, 1e-2), positive)
timing = st.builds(
    RateTiming,
    terms=st.lists(term, max_size=4).map(tuple),
    floor=st.floats(0.0, 1e-2),
    compute_s=st.floats(1e-3, 1.0),
    overlap_s=st.floats(0.0, 1.0),
    data_s=st.floats(0.0, 1.0),
)
rate = st.one_of(st.just(0.0), st.just(math.inf), st.floats(1e-3, 1e4))


def new_job(index: int, cons_iter_s: float = 0.05, duration_s: float = 100.0) -> Job:
    return Job(
        index=index,
        job_id=f"j{index}",
        submit_s=0.0,
        num_gpus=4,
        duration_s=duration_s,
        model="m",
        cons_iter_s=cons_iter_s,
        sensitivity=Sensitivity.flat(1.0, 1.0),
    )


@settings(max_examples=150, deadline=None)
@given(timings=st.lists(st.tuples(timing, rate), min_size=1, max_size=6))
def test_iteration_times_over_arrays_equal_rate_timing(
    timings: list[tuple[RateTiming, float]],
) -> None:
    jobs = NetworkJobs(capacity=2)  # small, so that adding grows the arrays
    for index, (own, _) in enumerate(timings):
        jobs.add(new_job(index), own)
    slots = np.array([jobs._slot[i] for i in range(len(timings))])
    rates = np.array([r for _, r in timings])
    got = jobs._iter_s(slots, rates)
    expected = [own(r) for own, r in timings]
    assert got.tolist() == expected


@settings(max_examples=100, deadline=None)
@given(
    cons=st.floats(0.01, 0.2),
    paused_for=st.floats(0.0, 5.0),
    steps=st.lists(st.tuples(st.floats(0.0, 30.0), st.floats(1e-3, 1e4)), min_size=1, max_size=8),
    own=timing,
)
def test_progress_and_finish_follow_the_per_job_code(
    cons: float, paused_for: float, steps: list[tuple[float, float]], own: RateTiming
) -> None:
    """A job's progress through a series of rate changes, re-planned over arrays, and the
    same series on the ``Job`` itself (``advance``, new iteration time, ``finish_time``)."""
    tracked, plain = new_job(0, cons), new_job(0, cons)
    for job in (tracked, plain):
        job.paused_until_s = paused_for
    jobs = NetworkJobs()
    jobs.add(tracked, own)
    other = new_job(1)  # a second tracked job whose rate never changes
    jobs.add(other, own)
    now = 0.0
    for step, (gap, r) in enumerate(steps):
        now += gap
        replanned = jobs.replan({0: r}, now)
        new_iter = own(r)
        assert replanned == ([0] if step == 0 or new_iter != plain.iter_s else [])
        if replanned:
            plain.advance(now)
            plain.iter_s = new_iter
            assert jobs._progress["finish"][jobs._slot[0]] == plain.finish_time(now)
    jobs.remove(tracked)
    for field in ("done_iters", "last_update_s", "iter_s", "comm_overhead_s"):
        assert getattr(tracked, field) == getattr(plain, field), field
    assert jobs.next_finish_s() == math.inf  # the other job was never planned


def test_next_finish_is_the_earliest_planned_one_and_slots_are_reused() -> None:
    jobs = NetworkJobs(capacity=1)
    own = RateTiming(
        terms=((1e10, 1.0, 0.0, 1e8),), floor=0.0, compute_s=0.0, overlap_s=0.0, data_s=0.0
    )
    a, b = new_job(0, duration_s=10.0), new_job(1, duration_s=10.0)
    jobs.add(a, own)
    jobs.add(b, own)
    assert jobs.next_finish_s() == math.inf  # nothing planned until a re-plan
    jobs.replan({0: 1e9, 1: 2e9}, 0.0)  # 0.1 s and 0.05 s per iteration
    work = 10.0 / 0.05
    assert jobs.next_finish_s() == work * 0.05
    assert jobs.finishing_at(work * 0.05) == [1]
    jobs.remove(b)
    assert jobs.next_finish_s() == work * 0.1
    c = new_job(2)
    jobs.add(c, own)  # takes the freed slot
    assert sorted(jobs._slot.values()) == [0, 1]
    assert len(jobs) == 2 and 2 in jobs and 1 not in jobs
