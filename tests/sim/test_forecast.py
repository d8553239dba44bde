"""The forecast (sim/forecast.py): told each job's true work, it predicts what the engine then
does from the same state; running jobs keep their placements and pay no start-up."""

from __future__ import annotations

import random

import pytest

from sim_fakes import FakeSpeed
from unstall.loop.jobs import JobState
from unstall.sched.base import ClusterLayout
from unstall.sched.fifo import Consolidate, Fifo
from unstall.sim.congestion import CongestionSchedule
from unstall.sim.engine import Engine, EngineSettings
from unstall.sim.forecast import ForecastJob, forecast
from unstall.sim.jobs import build_jobs
from unstall.sim.startup import SetupTerms, StartupModel

LAYOUT = ClusterLayout.regular(racks=1, nodes_per_rack=3, gpus_per_node=4)


def _engine(seed: int) -> Engine:
    rng = random.Random(seed)
    count = 14
    speed = FakeSpeed(LAYOUT)
    jobs = build_jobs(
        job_ids=[f"j{i}" for i in range(count)],
        submit_s=sorted(rng.uniform(0, 600) for _ in range(count)),
        num_gpus=[rng.choice((1, 2, 4)) for _ in range(count)],
        duration_s=[rng.uniform(100, 900) for _ in range(count)],
        models=["m"] * count,
        speed=speed,
    )
    return Engine(
        layout=LAYOUT,
        speed=speed,
        policy=Consolidate(),
        jobs=jobs,
        congestion=CongestionSchedule(times_s=(0.0,), fractions=(0.0,)),
        settings=EngineSettings(restore_s=0.0, tick_s=None, seed=0),
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_told_the_true_work_the_forecast_is_what_then_happens(seed: int) -> None:
    engine = _engine(seed)
    at = 500.0
    engine.run(until_s=at)
    core = engine.core
    plans = []
    for job in core.jobs:
        if job.state == JobState.RUNNING:
            job.advance(at)
            plans.append(
                ForecastJob(
                    job_id=job.job_id,
                    num_gpus=job.num_gpus,
                    model=job.model,
                    remaining_s=job.remaining_cons_s(),
                    submit_s=job.submit_s - at,
                    placement=job.placement,
                )
            )
        elif job.state in (JobState.QUEUED, JobState.PENDING):
            arriving = job.state == JobState.PENDING
            plans.append(
                ForecastJob(
                    job_id=job.job_id,
                    num_gpus=job.num_gpus,
                    model=job.model,
                    remaining_s=job.duration_s,
                    submit_s=job.submit_s - at,
                    arrive_s=job.submit_s - at if arriving else None,
                )
            )
    waiting = [p.job_id for p in plans if p.waiting]
    running = [p.job_id for p in plans if p.placement]
    assert waiting and running  # the moment chosen has both
    predicted = forecast(plans, layout=LAYOUT, speed=FakeSpeed(LAYOUT), policy=Consolidate())
    engine.run()  # what then happens
    by_id = core.by_id
    for job_id in waiting:
        assert predicted.starts[job_id] + at == pytest.approx(by_id[job_id].first_start_s, abs=1e-3)
    for job_id in (*waiting, *running):
        assert predicted.ends[job_id] + at == pytest.approx(by_id[job_id].finish_s, abs=1e-3)
    assert predicted.jobs == len(waiting) + len(running)
    assert predicted.makespan_s == pytest.approx(
        max(by_id[j].finish_s for j in (*waiting, *running)) - at, abs=1e-3
    )


def _one_running_one_waiting() -> list[ForecastJob]:
    return [
        ForecastJob(job_id="run", num_gpus=4, model="m", remaining_s=100.0, placement=((0, 4),)),
        ForecastJob(job_id="wait", num_gpus=12, model="m", remaining_s=50.0, submit_s=-30.0),
    ]


def test_waiting_jobs_pay_their_start_up_and_running_ones_do_not() -> None:
    model = StartupModel(
        startup=SetupTerms(base_s=7.0, per_gpu_s=0.0, per_node_s=0.0, per_rack_s=0.0),
        restore=SetupTerms(base_s=3.0, per_gpu_s=0.0, per_node_s=0.0, per_rack_s=0.0),
    )
    predicted = forecast(
        _one_running_one_waiting(),
        layout=LAYOUT,
        speed=FakeSpeed(LAYOUT),
        policy=Fifo(),
        startup=model,
    )
    assert predicted.ends["run"] == pytest.approx(100.0)  # no start-up: it runs already
    assert predicted.starts["wait"] == pytest.approx(100.0)
    assert predicted.ends["wait"] == pytest.approx(157.0)  # its 7 s start-up, then its 50 s
    assert predicted.avg_wait_s == pytest.approx(130.0)  # submitted 30 s before the forecast
    assert predicted.avg_jct_s == pytest.approx((100.0 + 187.0) / 2)


def test_a_job_that_does_not_start_within_the_horizon_has_no_estimate() -> None:
    predicted = forecast(
        _one_running_one_waiting(),
        layout=LAYOUT,
        speed=FakeSpeed(LAYOUT),
        policy=Fifo(),
        horizon_s=60.0,
    )
    assert "wait" not in predicted.starts and "run" not in predicted.ends
    assert predicted.makespan_s == float("inf")
