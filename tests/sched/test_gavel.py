"""Gavel's heterogeneity-aware LAS baseline (issue #38 item 3): the linear program's invariants
over random job and type mixes, the round mechanism on hand-made snapshots, and a simulated run
on a mixed V100/K80 cluster."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snapshots import job_view
from unstall.errors import ConfigError
from unstall.net import load_topology
from unstall.sched import ClusterLayout, ClusterSnapshot, JobView, Sensitivity, make_policy
from unstall.sched.gavel import ROUND_TIMER, Gavel, GavelConfig
from unstall.sched.gavel_lp import equal_share, las_allocation
from unstall.sim import simulate
from unstall.traces import default_trace

TOL = 1e-9


@st.composite
def mixes(draw: st.DrawFn) -> tuple[list[int], list[list[float]], list[int]]:
    types = draw(st.integers(1, 4))
    gpus = draw(st.lists(st.integers(1, 64), min_size=types, max_size=types))
    jobs = draw(st.integers(0, 40))
    sizes = draw(st.lists(st.sampled_from([1, 2, 4, 8, 16, 32]), min_size=jobs, max_size=jobs))
    speed = st.floats(0.0, 1.0, allow_nan=False).map(lambda v: 0.0 if v < 0.05 else v)
    speeds = draw(
        st.lists(st.lists(speed, min_size=types, max_size=types), min_size=jobs, max_size=jobs)
    )
    return sizes, speeds, gpus


@settings(max_examples=150, deadline=None)
@given(mix=mixes())
def test_the_allocation_never_over_allocates_and_beats_an_equal_share(
    mix: tuple[list[int], list[list[float]], list[int]],
) -> None:
    sizes, speeds, gpus = mix
    x = las_allocation(sizes, speeds, gpus)
    assert x.shape == (len(sizes), len(gpus))
    if not sizes:
        return
    n = np.array(sizes, dtype=float)
    s = np.array(speeds, dtype=float)
    cap = np.array(gpus, dtype=float)
    # Each job's time fractions lie in [0, 1] and add up to at most 1.
    assert ((x >= 0) & (x <= 1)).all()
    assert (x.sum(axis=1) <= 1 + TOL).all()
    # No type is over-allocated.
    assert ((x * n[:, None]).sum(axis=0) <= cap * (1 + TOL)).all()
    # A job gets nothing where it cannot run: too large for the type, or no speed there.
    cannot = (n[:, None] > cap[None, :]) | (s <= 0)
    assert (x[cannot] == 0).all()
    # Max-min: the equal share is feasible, so every job that can run somewhere gets at least
    # its equal share's throughput (normalised: 1).
    equal = equal_share(sizes, gpus, ~cannot)
    assert ((equal * n[:, None]).sum(axis=0) <= cap * (1 + TOL)).all()
    assert (equal.sum(axis=1) <= 1 + TOL).all()
    reference = (equal * s).sum(axis=1)
    live = reference > 0
    got = (x * s).sum(axis=1)
    assert (got[live] >= reference[live] * (1 - 1e-6)).all(), (got, reference)
    # And no allocation leaves its worst job better off: the max-min optimum, solved here from
    # the definition (not by the code under test), is reached.
    best = max_min_optimum(sizes, s, gpus, ~cannot, reference)
    assert worst_normalised(x, sizes, s, gpus) >= best * (1 - 1e-6) - 1e-9, (x, best)


def max_min_optimum(
    sizes: list[int], s: np.ndarray, gpus: list[int], usable: np.ndarray, reference: np.ndarray
) -> float:
    """The largest t such that some allocation gives every job that can run at least t times
    its equal share's throughput: a dense linear program written from the definition."""
    from scipy.optimize import linprog

    jobs, types = s.shape
    live = np.flatnonzero(reference > 0)
    if len(live) == 0:
        return np.inf
    size = jobs * types + 1  # x row-major, then t
    a_ub, b_ub = [], []
    for j in live:  # t * reference_j - sum_k x_jk s_jk <= 0
        row = np.zeros(size)
        row[j * types : (j + 1) * types] = -s[j]
        row[-1] = reference[j]
        a_ub.append(row)
        b_ub.append(0.0)
    for j in range(jobs):  # sum_k x_jk <= 1
        row = np.zeros(size)
        row[j * types : (j + 1) * types] = 1.0
        a_ub.append(row)
        b_ub.append(1.0)
    for k in range(types):  # sum_j x_jk n_j <= gpus_k
        row = np.zeros(size)
        row[k:-1:types] = sizes
        a_ub.append(row)
        b_ub.append(float(gpus[k]))
    bounds = [(0.0, 1.0 if usable[j, k] else 0.0) for j in range(jobs) for k in range(types)]
    cost = np.zeros(size)
    cost[-1] = -1.0
    found = linprog(cost, A_ub=np.array(a_ub), b_ub=b_ub, bounds=[*bounds, (0, None)])
    assert found.status == 0, found.message
    return float(found.x[-1])


def test_the_fast_type_goes_to_the_jobs_that_gain_most_from_it() -> None:
    # One V100 and one K80 GPU, three 1-GPU jobs: job 0 runs 10x slower on the K80, job 1
    # hardly slower. The sensitive job never gets the K80, the tolerant one never the V100.
    x = las_allocation([1, 1, 1], [[1.0, 0.1], [1.0, 0.9], [1.0, 0.5]], [1, 1])
    assert x[0, 1] < 1e-9 and x[1, 0] < 1e-9 and x[0, 0] > 0.4, x
    # Two jobs: max-min fairness over normalised throughputs is the equal split itself.
    assert np.allclose(las_allocation([1, 1], [[1.0, 0.1], [1.0, 0.9]], [1, 1]), 0.5)


def worst_normalised(x: np.ndarray, sizes: list[int], speeds: np.ndarray, gpus: list[int]) -> float:
    usable = (np.array(sizes)[:, None] <= np.array(gpus)[None, :]) & (speeds > 0)
    reference = (equal_share(sizes, gpus, usable) * speeds).sum(axis=1)
    live = reference > 0
    return float(((x * speeds).sum(axis=1)[live] / reference[live]).min(initial=np.inf))


@settings(max_examples=80, deadline=None)
@given(mix=mixes())
def test_knowing_the_speeds_never_leaves_the_worst_job_worse_off(
    mix: tuple[list[int], list[list[float]], list[int]],
) -> None:
    sizes, speeds, gpus = mix
    if not sizes:
        return
    s = np.array(speeds, dtype=float)
    aware = las_allocation(sizes, speeds, gpus)
    blind = las_allocation(sizes, np.where(s > 0, 1.0, 0.0).tolist(), gpus)
    assert worst_normalised(aware, sizes, s, gpus) >= worst_normalised(blind, sizes, s, gpus) * (
        1 - 1e-6
    )


def view(job_id: str, gpus: int, speeds: dict[str, float], **kw: Any) -> JobView:
    return job_view(
        job_id, gpus, model="resnet50", sensitivity=Sensitivity.flat(1.0, 1.0), speeds=speeds, **kw
    )


LAYOUT = ClusterLayout.from_nodes(node_rack=(0, 1), node_gpus=(4, 4), node_type=("v100", "k80"))


def snapshot(
    now: float,
    queued: tuple[JobView, ...],
    running: tuple[JobView, ...] = (),
    timers: tuple[str, ...] = (),
) -> ClusterSnapshot:
    used = [0, 0]
    for job in running:
        for node, k in job.placement:
            used[node] += k
    free = tuple(4 - u for u in used)
    return ClusterSnapshot(
        now=now,
        layout=LAYOUT,
        free_by_node=free,
        free_by_rack=free,
        queued=queued,
        running=running,
        fired_timers=timers,
    )


def test_rounds_realise_the_allocation_by_priority() -> None:
    gavel = Gavel()
    sensitive = view("j0", 4, {"v100": 1.0, "k80": 0.1})
    tolerant = view("j1", 4, {"v100": 1.0, "k80": 0.9})
    decision = gavel.decide(snapshot(0.0, (sensitive, tolerant)), random.Random(0))
    placed = {s.job_id: s.placement for s in decision.starts}
    assert placed == {"j0": ((0, 4),), "j1": ((1, 4),)}
    assert [(t.at_s, t.key) for t in decision.timers] == [(360.0, ROUND_TIMER)]
    # Between rounds nothing is preempted.
    running = (
        view("j0", 4, {"v100": 1.0, "k80": 0.1}, placement=((0, 4),)),
        view("j1", 4, {"v100": 1.0, "k80": 0.9}, placement=((1, 4),)),
    )
    assert gavel.decide(snapshot(100.0, (), running), random.Random(0)).empty
    # Two jobs, one GPU group of each type: the max-min allocation is half of each type each,
    # so the next round swaps them (each has yet to run on the other type: priority first).
    swap = gavel.decide(snapshot(360.0, (), running, (ROUND_TIMER,)), random.Random(0))
    assert {p.job_id for p in swap.preemptions} == {"j0", "j1"}
    assert {s.job_id: s.placement for s in swap.starts} == {"j0": ((1, 4),), "j1": ((0, 4),)}
    assert [t.at_s for t in swap.timers] == [720.0]


def test_a_job_that_keeps_its_type_keeps_its_gpus() -> None:
    gavel = Gavel()
    only_v100 = {"v100": 1.0, "k80": 0.0}
    first = gavel.decide(snapshot(0.0, (view("j0", 2, only_v100),)), random.Random(0))
    assert [s.placement for s in first.starts] == [((0, 2),)]
    running = (view("j0", 2, only_v100, placement=((0, 2),)),)
    again = gavel.decide(snapshot(360.0, (), running, (ROUND_TIMER,)), random.Random(0))
    assert not again.preemptions and not again.starts and again.timers
    # With no job left, no further round is set; the next arrival starts one at once.
    assert gavel.decide(snapshot(400.0, ()), random.Random(0)).empty
    late = gavel.decide(snapshot(500.0, (view("j1", 1, only_v100),)), random.Random(0))
    assert [t.at_s for t in late.timers] == [860.0] and len(late.starts) == 1


def test_rounds_share_the_gpus_of_an_oversubscribed_type() -> None:
    # Two 4-GPU jobs that run only on the V100 node (no speed on the K80): one round each.
    gavel = Gavel(GavelConfig(round_s=100.0))
    speeds = {"v100": 1.0, "k80": 0.0}
    first = gavel.decide(
        snapshot(0.0, (view("j0", 4, speeds), view("j1", 4, speeds))), random.Random(0)
    )
    (start,) = first.starts
    other = "j1" if start.job_id == "j0" else "j0"
    running = (view(start.job_id, 4, speeds, placement=((0, 4),)),)
    later = gavel.decide(
        snapshot(100.0, (view(other, 4, speeds),), running, (ROUND_TIMER,)), random.Random(0)
    )
    assert [p.job_id for p in later.preemptions] == [start.job_id]
    assert [(s.job_id, s.placement) for s in later.starts] == [(other, ((0, 4),))]


def test_gavel_is_registered_with_its_round_option() -> None:
    policy = make_policy("gavel", round_s=60.0)
    assert isinstance(policy, Gavel) and policy.config.round_s == 60.0
    blind = make_policy("gavel", type_aware=False)
    assert isinstance(blind, Gavel)
    job = view("j0", 1, {"v100": 1.0, "k80": 0.2, "t4": 0.0})
    assert [blind.speed(job, t) for t in ("v100", "k80", "t4")] == [1.0, 1.0, 0.0]
    assert policy.speed(job, "k80") == 0.2
    with pytest.raises(ConfigError, match="round_s"):
        make_policy("gavel", round_s=-1.0)


def test_gavel_runs_a_trace_on_a_mixed_cluster_one_type_a_job(tmp_path: Path) -> None:
    path = tmp_path / "mixed.toml"
    path.write_text(
        'nic = "25g"\noversubscription = 2.0\n'
        '[[nodes]]\ncount = 4\ngpus_per_node = 8\ndevice = "v100"\nrack = 0\n'
        '[[nodes]]\ncount = 4\ngpus_per_node = 4\ndevice = "k80"\nrack = 1\n'
    )
    cluster = load_topology(path)
    run = simulate(default_trace(), cluster, "gavel", max_jobs=120)
    result = run.result
    assert result.jobs_finished + result.jobs_rejected == 120
    finished = run.jobs[run.jobs["finished"]]
    assert set(finished["gpu_type"]) <= {"v100", "k80"}  # every job on one type
    assert result.preemptions > 0  # rounds time-share the GPUs
    # GPU time by type: both types used, none beyond its capacity over the run.
    held = result.gpu_s_by_type
    assert set(held) == {"v100", "k80"} and min(held.values()) > 0
    assert held["v100"] <= 32 * result.makespan_s and held["k80"] <= 16 * result.makespan_s


def test_a_round_places_again_a_job_spread_at_a_cost() -> None:
    layout = ClusterLayout.from_nodes(
        node_rack=(0, 0, 1), node_gpus=(8, 8, 4), node_type=("v100", "v100", "k80")
    )
    speeds = (("v100", 1.0), ("k80", 0.0))

    def spread(sensitivity: float) -> ClusterSnapshot:
        job = job_view(
            "j0",
            8,
            model="alexnet",
            sensitivity=Sensitivity.flat(sensitivity, sensitivity),
            placement=((0, 4), (1, 4)),
            speeds=dict(speeds),
        )
        return ClusterSnapshot(
            now=360.0,
            layout=layout,
            free_by_node=(4, 4, 4),
            free_by_rack=(8, 4),
            queued=(),
            running=(job,),
            fired_timers=(ROUND_TIMER,),
        )

    # Slowed 3x by the network: preempted and started again on one node.
    moved = Gavel().decide(spread(3.0), random.Random(0))
    assert [p.job_id for p in moved.preemptions] == ["j0"]
    assert [s.placement for s in moved.starts] == [((0, 8),)]
    # Hardly slowed: it keeps its GPUs (a restore would cost more than it gains).
    assert not Gavel().decide(spread(1.05), random.Random(0)).preemptions
