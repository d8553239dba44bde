"""The service's estimates without Ray: run times learnt from finished jobs, the state a forecast
takes, the Slurm-style backfill yardstick, and the policies' reasons why jobs wait."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service_helpers import jobs_cli, serving, unstarted_service
from unstall.loop.jobs import Job
from unstall.sched import make_policy
from unstall.sched.base import ClusterLayout, ClusterSnapshot, JobView, Sensitivity
from unstall.sched.reasons import wait_reasons
from unstall.service import Client, WhatIf
from unstall.service.api import create_app
from unstall.service.estimates import (
    Estimates,
    EstimateSettings,
    ForecastInput,
    RunTimes,
    backfill_starts,
    capture,
)
from unstall.service.service import Service
from unstall.sim.forecast import ForecastJob

LAYOUT = ClusterLayout.regular(racks=1, nodes_per_rack=2, gpus_per_node=4)


def test_run_times_come_from_the_same_kind_of_job_and_what_it_ran_already() -> None:
    runtimes = RunTimes(prior_s=1000.0)
    assert runtimes.total_s("resnet50", 2) == 1000.0  # nothing finished: the prior
    assert runtimes.total_s("resnet50", 2, ran_s=800.0) == 1600.0  # past the prior: twice
    for run_s in (100.0, 300.0, 500.0):
        runtimes.add("resnet50", 2, run_s)
    runtimes.add("vgg16", 4, 7000.0)
    runtimes.add("resnet50", 2, 1100.0)
    assert runtimes.total_s("vgg16", 4) == 1800.0  # one of its kind is not enough: any
    assert runtimes.total_s("resnet50", 2) == 500.0  # its model and size: the mean
    assert runtimes.total_s("resnet50", 2, ran_s=200.0) == pytest.approx(1900 / 3)  # longer
    assert runtimes.total_s("resnet50", 2, ran_s=1200.0) == 2400.0  # past all of them
    for run_s in (6000.0, 8000.0):
        runtimes.add("vgg16", 4, run_s)
    assert runtimes.total_s("bert", 4) == 7000.0  # no such model: its size
    assert runtimes.total_s("bert", 8) == 23000.0 / 7  # no such size: any (the mean of all)


def test_backfill_plans_each_job_around_the_reservations_before_it() -> None:
    starts = backfill_starts(
        total_gpus=8,
        running=[(4, 100.0), (2, 50.0)],  # 2 GPUs free now, 4 more at 50, all 8 at 100
        queued=[
            ("wide", 8, 60.0),  # all 8: at 100, until 160
            ("small", 2, 40.0),  # fits now, ends before 100: backfilled
            ("mid", 4, 80.0),  # 4 free from 50 but only until 100: after wide, at 160
            ("late", 2, 30.0),  # 2 free from 40 (small ends), 4 from 50: at 40
            ("huge", 9, 1.0),  # more than the cluster: no start
        ],
    )
    assert starts == {"wide": 100.0, "small": 0.0, "mid": 160.0, "late": 40.0}


def _job(job_id: str, gpus: int, submit_s: float, model: str = "resnet50") -> Job:
    return Job(
        index=0,
        job_id=job_id,
        submit_s=submit_s,
        num_gpus=gpus,
        duration_s=1000.0,
        model=model,
        cons_iter_s=0.5,
        sensitivity=Sensitivity.flat(1.0, 1.0),
    )


def test_capture_gives_declared_work_else_learnt_and_never_the_hidden_duration() -> None:
    running = _job("r", 2, 0.0)
    running.placement = ((0, 2),)
    declared = _job("d", 4, 50.0)
    hidden = _job("h", 4, 60.0, model="vgg16")
    runtimes = RunTimes(prior_s=3600.0)
    runtimes.add("vgg16", 4, 250.0)
    jobs, run_s = capture(
        now_s=100.0,
        running=[running],
        queued=[declared, hidden],
        done_iters=lambda job: 200.0 if job is running else 0.0,  # 100 s of work done
        declared_s={"r": 1000.0, "d": 400.0, "h": None},
        runtimes=runtimes,
        arrivals=[(40.0, 1, "bert", 0), (-5000.0, 8, "bert", 0)],
        settings=EstimateSettings(replay_window_s=3600.0),
    )
    by_id = {j.job_id: j for j in jobs}
    assert by_id["r"].remaining_s == pytest.approx(900.0) and by_id["r"].placement == ((0, 2),)
    assert by_id["d"].remaining_s == 400.0 and by_id["d"].submit_s == -50.0
    assert by_id["h"].remaining_s == 250.0  # learnt, not its duration_s of 1000
    assert run_s == {"r": 1000.0, "d": 400.0, "h": 250.0}
    # The arrival 60 s ago comes again one window on; one older than the window does not.
    (arrival,) = [j for j in jobs if not j.present]
    assert arrival.arrive_s == pytest.approx(3540.0) and arrival.num_gpus == 1
    capped, _ = capture(
        now_s=100.0,
        running=[],
        queued=[declared, hidden],
        done_iters=lambda job: 0.0,
        declared_s={},
        runtimes=runtimes,
        arrivals=[],
        settings=EstimateSettings(max_jobs=1),
    )
    assert [j.job_id for j in capped] == ["d"]


def _view(job_id: str, gpus: int, submit_s: float, **kwargs: object) -> JobView:
    return JobView(
        job_id=job_id,
        index=int(submit_s),
        num_gpus=gpus,
        submit_s=submit_s,
        model=str(kwargs.pop("model", "resnet50")),
        sensitivity=Sensitivity.flat(1.0, 1.0),
        attained_gpu_s_at_change=float(kwargs.pop("attained", 0.0)),  # type: ignore[arg-type]
        changed_s=submit_s,
        running=False,
        priority=int(kwargs.pop("priority", 0)),  # type: ignore[call-overload]
    )


def _snapshot(free_by_node: tuple[int, ...], queued: list[JobView]) -> ClusterSnapshot:
    return ClusterSnapshot(
        now=1000.0,
        layout=LAYOUT,
        free_by_node=free_by_node,
        free_by_rack=(sum(free_by_node),),
        queued=tuple(queued),
        running=(),
    )


def test_fifo_says_the_head_lacks_gpus_and_the_rest_wait_behind_it() -> None:
    queue = [_view("big", 6, 1.0), _view("small", 1, 2.0), _view("next", 1, 3.0)]
    reasons = wait_reasons(make_policy("fifo"), _snapshot((2, 1), queue))
    assert reasons["big"] == "waiting for GPUs: needs 6, 3 free"
    assert reasons["small"].startswith("behind 1 job in arrival order; the first, big")
    assert reasons["next"].startswith("behind 2 jobs")


def test_priorities_are_named_in_the_order() -> None:
    queue = [_view("low", 6, 1.0), _view("high", 6, 2.0, priority=5)]
    reasons = wait_reasons(make_policy("fifo"), _snapshot((2, 1), queue))
    assert "higher priority first" in reasons["low"] and "the first, high" in reasons["low"]


def test_consolidate_names_the_consolidated_placement_it_waits_for() -> None:
    queue = [_view("four", 4, 1.0), _view("one", 1, 2.0)]
    reasons = wait_reasons(make_policy("consolidate"), _snapshot((2, 2), queue))
    assert reasons["four"] == (
        "waiting for a consolidated placement of 4 GPUs (4 free, at most 2 on one node)"
    )
    # Consolidate backfills: a job with room is not behind the one without.
    assert reasons["one"] == "room for it now: consolidate starts it at its next round"


def test_tiresias_names_the_priority_queue_and_the_jobs_above() -> None:
    queue = [_view("old", 4, 1.0, attained=7200.0), _view("new", 4, 2.0)]
    reasons = wait_reasons(make_policy("tiresias"), _snapshot((1, 1), queue))
    assert reasons["new"].startswith("waiting for GPUs: needs 4, 2 free; priority queue 1 of 3")
    assert "priority queue 2 of 3 (2 GPU-h attained)" in reasons["old"]
    assert "1 waiting job(s) of higher priority" in reasons["old"]


def test_dally_says_its_delay_timer_holds_a_job_for_a_consolidated_placement() -> None:
    dally = make_policy("dally-fixed")
    record = dally.state.record("held")  # type: ignore[attr-defined]
    from unstall.sched.dally.state import Held

    record.held = Held(since_s=900.0, turned_down=1.8)
    record.timers_set = {1240.0}
    queue = [_view("held", 4, 1.0), _view("short", 8, 2.0)]
    reasons = wait_reasons(dally, _snapshot((2, 2), queue))
    assert reasons["held"] == (
        "held for a consolidated placement: delay timer, 4 min left (the placement free now "
        "would run 1.80x slower)"
    )
    assert reasons["short"] == "waiting for GPUs: needs 8, 4 free"


def test_a_policy_without_reasons_or_whose_reasons_fail_gets_the_generic_words() -> None:
    class Broken:
        name = "broken"
        needs_oracle = False

        def wait_reasons(self, snapshot: ClusterSnapshot) -> dict[str, str]:
            raise RuntimeError("oops")

    queue = [_view("a", 1, 1.0), _view("b", 8, 2.0)]
    reasons = wait_reasons(Broken(), _snapshot((1, 0), queue))
    assert reasons == {
        "a": "enough GPUs free: broken has not placed it yet",
        "b": "waiting for GPUs: needs 8, 1 free",
    }


def _whatif_service(tmp_path: Path) -> Service:
    """A service (no Ray) whose scheduler took one running and two waiting jobs (fifo)."""
    service = unstarted_service(tmp_path / "store")
    service.scheduler.last_input = ForecastInput(
        now_s=0.0,
        wall_at_now=1_000_000.0,
        speedup=1.0,
        jobs=(
            ForecastJob(
                job_id="r", num_gpus=2, model="resnet50", remaining_s=100.0, placement=((0, 2),)
            ),
            ForecastJob(job_id="w4", num_gpus=4, model="resnet50", remaining_s=50.0),
            ForecastJob(job_id="w1", num_gpus=1, model="resnet50", remaining_s=10.0),
        ),
        run_s={},
    )
    return service


def test_whatif_forecasts_the_queue_under_each_policy(tmp_path: Path) -> None:
    service = _whatif_service(tmp_path)
    api = TestClient(create_app(service), headers={"X-Unstall-User": "alice"})
    assert api.get("/api/whatif").status_code == 503  # the scheduler has not started
    service.scheduler.ready.set()
    refused = api.get("/api/whatif", params=[("policy", "consolidat")])
    assert refused.status_code == 422 and "consolidate" in refused.json()["detail"]
    answer = api.get("/api/whatif", params=[("policy", "consolidate")])
    assert answer.status_code == 200, answer.text
    whatif = WhatIf.model_validate(answer.json())
    assert whatif.running == 1 and whatif.waiting == ["w4", "w1"]
    fifo, consolidate = whatif.policies
    assert fifo.serving and fifo.policy == "fifo" and not consolidate.serving
    # fifo: the 4-GPU job needs the running one's GPUs, and the 1-GPU job waits behind it;
    # consolidate starts the 1-GPU job at once on the free node.
    assert fifo.starts["w4"] >= 1_000_100.0 and fifo.starts["w1"] > fifo.starts["w4"]
    assert consolidate.starts["w1"] < 1_000_001.0
    assert consolidate.avg_wait_s is not None and fifo.avg_wait_s is not None
    assert consolidate.avg_wait_s < fifo.avg_wait_s
    assert fifo.makespan is not None and fifo.makespan > fifo.starts["w1"]


def test_jobs_whatif_prints_one_table_per_question(tmp_path: Path) -> None:
    service = _whatif_service(tmp_path)
    service.scheduler.ready.set()
    with serving(service) as url:
        shown = jobs_cli("whatif", "--policy", "consolidate", "--server", url)
        as_json = Client(url).whatif(["tiresias"])
    assert shown.returncode == 0, shown.stderr
    assert "fifo (serving)" in shown.stdout and "consolidate" in shown.stdout
    assert "estimated start" in shown.stdout and "w4" in shown.stdout
    assert [p.policy for p in as_json.policies] == ["fifo", "tiresias"]


def test_records_show_the_latest_estimates(tmp_path: Path) -> None:
    service = unstarted_service(tmp_path / "store")
    api = TestClient(create_app(service), headers={"X-Unstall-User": "alice"})
    job = api.post("/api/jobs", json={"gpus": 1, "model": "resnet50", "duration_s": 60}).json()
    assert job["estimated_start"] is None  # no forecast yet
    soon = time.time() + 600
    service.scheduler.estimator.estimates = Estimates(
        starts={job["id"]: soon}, ends={job["id"]: soon + 60}, run_s={job["id"]: 60.0}
    )
    service.scheduler.estimator.first_starts[job["id"]] = soon - 5
    record = api.get(f"/api/jobs/{job['id']}").json()
    assert record["estimated_start"] == soon and record["estimated_end"] == soon + 60
    assert record["estimated_run_s"] == 60.0 and record["estimated_start_at_submit"] == soon - 5
    listed = jobs_list_text(service)
    assert "starts in 10 min" in listed


def jobs_list_text(service: Service) -> str:
    with serving(service) as url:
        shown = jobs_cli("list", "--server", url)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def test_a_policy_that_cannot_be_copied_is_served_without_estimates(tmp_path: Path) -> None:
    import threading

    from unstall.live.config import LiveConfig
    from unstall.service.scheduler import Scheduler
    from unstall.service.store import JobStore

    class Locked:
        """A user's policy holding a lock (deepcopy refuses it)."""

        name = "locked"
        needs_oracle = False

        def __init__(self) -> None:
            self.lock = threading.Lock()

        def reset(self) -> None:
            pass

        def decide(self, snapshot: ClusterSnapshot, rng: object) -> object:
            raise AssertionError("not called here")

    service = _whatif_service(tmp_path)
    store = JobStore(tmp_path / "other")
    scheduler = Scheduler(
        store=store,
        topology=service.scheduler.topology,
        policy=Locked(),  # type: ignore[arg-type]
        config=LiveConfig(),
    )
    assert scheduler.estimator.template is None  # built all the same
    scheduler.last_input = service.scheduler.last_input
    scheduler.ready.set()
    locked = Service(store=store, scheduler=scheduler, tokens=None)
    api = TestClient(create_app(locked), headers={"X-Unstall-User": "alice"})
    refused = api.get("/api/whatif")
    assert refused.status_code == 422 and "cannot be copied" in refused.json()["detail"]
