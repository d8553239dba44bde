"""How right the scheduler service's start estimates are: a trace replayed into a running
service (emulated compute on a local Ray, jobs submitted at their times scaled by ``--speedup``),
each job's start estimated at submit against its actual start, beside a Slurm-style estimate.

For each job the service's first estimate of its start (``estimated_start_at_submit``: its first
forecast after the submission) is compared with when it started. The yardstick is what a
Slurm-style backfill planner (``unstall.service.backfill_starts``: first fit in time over the
GPU count, each job around the reservations of the jobs ahead of it) says from the same state and
the same durations (each job's ``estimated_run_s``), taken when the service's estimate was made.

Two modes: no durations given (the service learns run times from the jobs that finish), and
``--durations-given`` (each job's trace duration as its ``expected_duration_s``, as a Slurm time
limit). Times are reported in trace seconds (wall seconds x speedup). Traffic: 127.0.0.1 only.

    python benchmarks/service_eta.py --policy fifo --json out/eta_fifo.json
    python benchmarks/service_eta.py --policy fifo --durations-given --json out/eta_fifo_given.json

Goal (issue 47): median absolute start error at most 20% of the median wait with no durations
given, at most 5% with them; below the backfill yardstick's in both.
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


def baseline_start(records: list[Any], job_id: str, now: float, speedup: float) -> float | None:
    """The backfill planner's start of ``job_id`` (wall) from the jobs as ``records`` show
    them at ``now``: running ones until their start plus their run time, the pending ones up to
    and including it in queue order."""
    from unstall.service import backfill_starts

    by_id = {r.id: r for r in records}
    job = by_id[job_id]
    if job.state != "pending" or job.position is None:
        return None
    total = sum(n.gpus for n in CLUSTER_NODES)
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
    starts = backfill_starts(total_gpus=total, running=running, queued=queued)
    return None if job_id not in starts else now + starts[job_id]


CLUSTER_NODES: list[Any] = []


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
        CLUSTER_NODES[:] = client.cluster().nodes
        deadline = time.monotonic() + 300
        while not client.stats()["ready"]:
            if time.monotonic() > deadline:
                raise SystemExit("the service's executors did not come up in 5 min")
            time.sleep(0.5)

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
                measured[job_id]["baseline"] = baseline_start(records, job_id, now, speedup)
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
    detail = []
    for job_id in ids:
        entry = measured[job_id]
        started = records[job_id].started_at
        assert started is not None
        waits.append((started - entry["submitted"]) * speedup)
        row = {
            "job": entry["name"],
            "gpus": records[job_id].gpus,
            "wait_s": waits[-1],
            "estimated_wait_s": None,
            "baseline_wait_s": None,
        }
        detail.append(row)
        if entry.get("estimated") is None or entry.get("baseline") is None:
            continue  # it started before any estimate of it (or the yardstick has none)
        row["estimated_wait_s"] = (entry["estimated"] - entry["submitted"]) * speedup
        row["baseline_wait_s"] = (entry["baseline"] - entry["submitted"]) * speedup
        signed.append((entry["estimated"] - started) * speedup)
        baseline_signed.append((entry["baseline"] - started) * speedup)
        errors.append(abs(signed[-1]))
        baseline_errors.append(abs(baseline_signed[-1]))
    median_wait = statistics.median(waits)
    error = statistics.median(errors) if errors else float("nan")
    baseline = statistics.median(baseline_errors) if baseline_errors else float("nan")
    return {
        "policy": args.policy,
        "durations_given": args.durations_given,
        "jobs": len(ids),
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
        "per_job": detail,
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
    result = replay(trace, args)
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
