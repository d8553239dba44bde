"""How right the scheduler service's start estimates are: a trace replayed into a running
service (emulated compute on a local Ray, jobs submitted at their times scaled by ``--speedup``),
each job's start estimated at submit against its actual start, beside a Slurm-style estimate.

For each job that waits (one that starts before any estimate of it is not counted) the
service's first estimate of its start (``estimated_start_at_submit``: its first
forecast after the submission) is compared with when it started. The yardstick is what a
Slurm-style backfill planner (``unstall.service.backfill_starts``: first fit in time over the
GPU count, each job around the reservations of the jobs ahead of it) says from the same state and
the same durations (each job's ``estimated_run_s``), taken when the service's estimate was made.

Two modes: no durations given (the service learns run times from the jobs that finish), and
``--durations-given`` (each job's trace duration as its ``expected_duration_s``, as a Slurm time
limit). Times are reported in trace seconds (wall seconds x speedup). Traffic: 127.0.0.1 only.

``--in-simulator`` replays the trace in the simulator instead (no Ray, seconds): at each
submission the scheduler's state is taken as the service takes it (``capture``, run times learnt
from the jobs finished by then), forecast as the service forecasts it, and compared with what
the simulation then does. It measures the estimates alone, without the live cluster's own
departures from the simulator, and runs long traces and many seeds.

    python benchmarks/service_eta.py --policy fifo --json out/eta_fifo.json
    python benchmarks/service_eta.py --policy fifo --durations-given --json out/eta_fifo_given.json

Goal (issue 47): median absolute start error at most 20% of the median wait with no durations
given, at most 5% with them; below the backfill yardstick's in both. Both medians are over the
same jobs: those that waited (``median_wait_all_s``: every job's).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from live_fidelity import fidelity_trace  # noqa: E402

ENDED_OR_RUNNING = ("running", "succeeded", "failed", "cancelled")


def baseline_start(
    records: list[Any], job_id: str, now: float, speedup: float, total_gpus: int
) -> float | None:
    """The backfill planner's start of ``job_id`` (wall) from the jobs as ``records`` show
    them at ``now``: running ones until their start plus their run time, the pending ones up to
    and including it in queue order."""
    from unstall.service import backfill_starts

    by_id = {r.id: r for r in records}
    job = by_id[job_id]
    if job.state != "pending" or job.position is None:
        return None
    running = [
        (r.gpus, r.started_at + (r.estimated_run_s or 0.0) / speedup - now)
        for r in records
        if r.state == "running" and r.started_at is not None
    ]
    ahead = sorted(
        (r for r in records if r.state == "pending" and r.position is not None),
        key=lambda r: r.position,
    )
    queued = [
        (r.id, r.gpus, (r.estimated_run_s or 0.0) / speedup)
        for r in ahead
        if r.position <= job.position
    ]
    starts = backfill_starts(total_gpus=total_gpus, running=running, queued=queued)
    return None if job_id not in starts else now + starts[job_id]


def replay(trace: Any, args: argparse.Namespace) -> dict[str, Any]:
    from unstall.live import LiveConfig
    from unstall.net import resolve_cluster
    from unstall.sched import resolve_policy
    from unstall.service import Client, ServeConfig, serving
    from unstall.service.estimates import EstimateSettings

    topology = resolve_cluster(args.cluster)
    speedup = args.speedup
    arrays = trace.arrays()
    jobs = list(
        zip(
            arrays.job_id,
            arrays.submit_s,
            arrays.num_gpus,
            arrays.duration_s,
            arrays.model if arrays.model is not None else ["resnet50"] * len(arrays),
            strict=True,
        )
    )
    store = Path(tempfile.mkdtemp(prefix="unstall-eta-"))
    measured: dict[str, dict[str, Any]] = {}
    todo: queue.SimpleQueue[str | None] = queue.SimpleQueue()

    def say(text: str) -> None:
        print(f"  service: {text}", file=sys.stderr, flush=True)

    with serving(
        topology=topology,
        policy=resolve_policy(args.policy),
        live=LiveConfig(speedup=speedup, seed=args.seed),
        config=ServeConfig(port=0, store=store),
        estimates=EstimateSettings(period_s=args.period_s),
        say=say,
    ) as running:
        client = Client(running.url, user="eta")
        total_gpus = client.cluster().total_gpus
        client.wait_ready(timeout_s=300)

        def measure() -> None:
            # Each submission's first estimate, and the yardstick's from the same moment.
            watcher = Client(running.url, user="eta")
            while (job_id := todo.get()) is not None:
                until = time.monotonic() + 20
                record = watcher.get(job_id)
                while (
                    record.estimated_start_at_submit is None
                    and record.state == "pending"
                    and time.monotonic() < until
                ):
                    time.sleep(0.1)
                    record = watcher.get(job_id)
                now = time.time()
                records = watcher.list()
                measured[job_id]["baseline"] = baseline_start(
                    records, job_id, now, speedup, total_gpus
                )
                measured[job_id]["estimated"] = record.estimated_start_at_submit

        watcher = threading.Thread(target=measure, daemon=True)
        watcher.start()
        began = time.time()
        for job_id, submit_s, gpus, duration_s, model in jobs:
            due = began + float(submit_s) / speedup
            time.sleep(max(0.0, due - time.time()))
            spec: dict[str, Any] = {
                "gpus": int(gpus),
                "model": str(model),
                "duration_s": float(duration_s),
                "name": str(job_id),
            }
            if args.durations_given:
                spec["expected_duration_s"] = float(duration_s)
            record = client.submit(**spec)
            measured[record.id] = {"submitted": record.submitted_at, "name": str(job_id)}
            todo.put(record.id)
        todo.put(None)
        watcher.join()
        ids = list(measured)
        deadline = time.monotonic() + args.timeout_s
        while time.monotonic() < deadline:
            records = {r.id: r for r in client.list()}
            if all(records[i].state in ENDED_OR_RUNNING for i in ids):
                break
            running.check()
            time.sleep(1.0)
        else:
            raise SystemExit(f"jobs still waiting after {args.timeout_s} s")
    errors, baseline_errors, waits, signed, baseline_signed = [], [], [], [], []
    every_wait, detail = [], []
    for job_id in ids:
        entry = measured[job_id]
        started = records[job_id].started_at
        assert started is not None
        every_wait.append((started - entry["submitted"]) * speedup)
        row = {
            "job": entry["name"],
            "gpus": records[job_id].gpus,
            "wait_s": every_wait[-1],
            "estimated_wait_s": None,
            "baseline_wait_s": None,
        }
        detail.append(row)
        if entry.get("estimated") is None or entry.get("baseline") is None:
            continue  # it started before any estimate of it (or the yardstick has none)
        waits.append(every_wait[-1])
        row["estimated_wait_s"] = (entry["estimated"] - entry["submitted"]) * speedup
        row["baseline_wait_s"] = (entry["baseline"] - entry["submitted"]) * speedup
        signed.append((entry["estimated"] - started) * speedup)
        baseline_signed.append((entry["baseline"] - started) * speedup)
        errors.append(abs(signed[-1]))
        baseline_errors.append(abs(baseline_signed[-1]))
    result = summary(
        args, len(ids), errors, baseline_errors, waits, signed, baseline_signed, speedup=speedup
    )
    result["median_wait_all_s"] = statistics.median(every_wait)
    result["per_job"] = detail
    return result


def replay_in_simulator(trace: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The estimates against the simulation itself (see the module docstring)."""
    from unstall.loop import JobState
    from unstall.net import resolve_cluster
    from unstall.sched import make_policy
    from unstall.service import backfill_starts
    from unstall.service.estimates import EstimateSettings, RunTimes, capture, forecast_policy
    from unstall.sim import PerfSpeedModel, layout_of
    from unstall.sim.congestion import CongestionSchedule
    from unstall.sim.engine import Engine, EngineSettings
    from unstall.sim.forecast import forecast
    from unstall.sim.jobs import build_jobs

    topology = resolve_cluster(args.cluster)
    layout, speed = layout_of(topology), PerfSpeedModel(topology, {})
    arrays = trace.arrays()
    models = list(arrays.model) if arrays.model is not None else ["resnet50"] * len(arrays)
    settings = EstimateSettings()

    def engine() -> Any:
        jobs = build_jobs(
            job_ids=list(arrays.job_id),
            submit_s=list(arrays.submit_s),
            num_gpus=list(arrays.num_gpus),
            duration_s=list(arrays.duration_s),
            models=models,
            speed=speed,
        )
        return Engine(
            layout=layout,
            speed=speed,
            policy=make_policy(args.policy),
            jobs=jobs,
            congestion=CongestionSchedule(times_s=(0.0,), fractions=(0.0,)),
            settings=EngineSettings(restore_s=60.0, tick_s=None, seed=args.seed),
        )

    whole = engine()
    whole.run()
    actual = {job.job_id: job.first_start_s for job in whole.core.jobs}
    errors, baseline_errors, waits, signed, baseline_signed = [], [], [], [], []
    every_wait = []
    for k, job_id in enumerate(arrays.job_id):
        now = float(arrays.submit_s[k]) + 1e-3  # just after it came
        every_wait.append(actual[job_id] - float(arrays.submit_s[k]))
        run = engine()
        run.run(until_s=now)
        core = run.core
        runtimes = RunTimes(settings.prior_runtime_s)
        for job in core.jobs:
            if job.state == JobState.DONE:
                runtimes.add(job.model, job.num_gpus, job.duration_s)
        for job in core.running.values():  # progress up to now, shared links included
            if job.index in run.driver.network_jobs:
                run.driver.network_jobs.sync(job)
            job.advance(now)
        queued = sorted(core.queued.values(), key=lambda j: j.index)
        declared = {j.job_id: (j.duration_s if args.durations_given else None) for j in core.jobs}
        planned, run_s = capture(
            now_s=now,
            running=core.running.values(),
            queued=queued,
            done_iters=lambda job: job.done_iters,
            declared_s=declared,
            runtimes=runtimes,
            arrivals=[
                (j.submit_s, j.num_gpus, j.model, 0)
                for j in core.jobs
                if j.state != JobState.PENDING
            ],
            settings=settings,
        )
        predicted = forecast(
            planned,
            layout=layout,
            speed=speed,
            policy=forecast_policy(made := make_policy(args.policy), made),
            restore_s=60.0,
            next_tick_s=core.next_tick_s - now,
        )
        position = next((i for i, j in enumerate(queued) if j.job_id == job_id), None)
        if job_id not in predicted.starts or position is None:
            continue  # it started at once
        yardstick = backfill_starts(
            total_gpus=layout.total_gpus,
            running=[
                (j.num_gpus, j.first_start_s + run_s[j.job_id] - now) for j in core.running.values()
            ],
            queued=[(j.job_id, j.num_gpus, run_s[j.job_id]) for j in queued[: position + 1]],
        )
        waits.append(every_wait[-1])
        signed.append(now + predicted.starts[job_id] - actual[job_id])
        errors.append(abs(signed[-1]))
        if job_id in yardstick:
            baseline_signed.append(now + yardstick[job_id] - actual[job_id])
            baseline_errors.append(abs(baseline_signed[-1]))
    result = summary(
        args, len(arrays), errors, baseline_errors, waits, signed, baseline_signed, speedup=1.0
    )
    result["median_wait_all_s"] = statistics.median(every_wait)
    return result


def summary(
    args: argparse.Namespace,
    jobs: int,
    errors: list[float],
    baseline_errors: list[float],
    waits: list[float],
    signed: list[float],
    baseline_signed: list[float],
    *,
    speedup: float,
) -> dict[str, Any]:
    median_wait = statistics.median(waits)
    error = statistics.median(errors) if errors else float("nan")
    baseline = statistics.median(baseline_errors) if baseline_errors else float("nan")
    return {
        "policy": args.policy,
        "durations_given": args.durations_given,
        "in_simulator": args.in_simulator,
        "jobs": jobs,
        "jobs_estimated": len(errors),
        "speedup": speedup,
        "median_wait_s": median_wait,
        "median_abs_start_error_s": error,
        "baseline_median_abs_start_error_s": baseline,
        "error_share_of_wait": error / median_wait if median_wait > 0 else float("nan"),
        "baseline_share_of_wait": baseline / median_wait if median_wait > 0 else float("nan"),
        # Estimated minus actual: above 0 where the estimates were late.
        "median_start_error_s": statistics.median(signed) if signed else float("nan"),
        "baseline_median_start_error_s": (
            statistics.median(baseline_signed) if baseline_signed else float("nan")
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", default=None, help="A trace file (default: generated).")
    parser.add_argument("--trace-format", default="auto")
    parser.add_argument("--cluster", default="tiny")
    parser.add_argument("--policy", default="fifo")
    parser.add_argument("--speedup", type=float, default=30.0)
    parser.add_argument(
        "--jobs", type=int, default=40, help="Of the generated trace, or the first N."
    )
    parser.add_argument("--load", type=float, default=1.4, help="Of the generated trace.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--durations-given", action="store_true")
    parser.add_argument("--in-simulator", action="store_true", help="No Ray: see above.")
    parser.add_argument("--period-s", type=float, default=0.5, help="Between two forecasts.")
    parser.add_argument("--timeout-s", type=float, default=1200.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    os.environ.setdefault("RAY_ENABLE_ZERO_COPY_TORCH_TENSORS", "1")
    if args.trace is None:
        trace = fidelity_trace(args.jobs, args.seed, load=args.load)
    else:
        from unstall.traces import Trace, read_trace

        whole = read_trace(args.trace, args.trace_format)
        trace = Trace.from_frame(whole.jobs.head(args.jobs), source=whole.source)
    began = time.perf_counter()
    result = replay_in_simulator(trace, args) if args.in_simulator else replay(trace, args)
    result.update(
        trace=args.trace or f"generated: {args.jobs} jobs, load {args.load}, seed {args.seed}",
        cluster=args.cluster,
        wall_s=time.perf_counter() - began,
        machine=f"{platform.node()} ({os.cpu_count()} CPUs)",
        date=time.strftime("%Y-%m-%d"),
    )
    print(json.dumps({k: v for k, v in result.items() if k != "per_job"}, indent=2))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
