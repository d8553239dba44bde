"""Figures of merit of one simulated run, computed from the jobs and the timeline."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from unstall.loop import RunOutcome
from unstall.loop.jobs import Job, JobState
from unstall.loop.timeline import Timeline
from unstall.results import JsonResult
from unstall.sched.base import Placement


@dataclass(frozen=True, kw_only=True)
class SimResult(JsonResult):
    """The summary of one run; `unstall sim run --json` writes exactly this."""

    policy: str
    cluster: str
    trace: str
    congestion: str
    seed: int
    total_gpus: int
    jobs: int
    jobs_finished: int
    jobs_rejected: int  # larger than the whole cluster: they could never start
    makespan_s: float
    avg_jct_s: float
    p50_jct_s: float
    p95_jct_s: float
    p99_jct_s: float
    avg_queue_s: float
    p99_queue_s: float
    comm_overhead_s: float  # time lost to communication beyond the consolidated placement
    comm_overhead_frac: float  # of all job run time
    gpu_util: float  # busy GPU-seconds / (GPUs x makespan)
    avg_slowdown: float  # JCT / duration at the consolidated placement
    max_slowdown: float
    preemptions: int
    migrations: int
    # Churn per job: how many jobs were preempted or migrated at least once, and the most
    # preemptions plus migrations any one job had.
    jobs_moved: int
    max_moves_per_job: int
    events: int  # arrivals, finishes, congestion changes, timers, ticks (not re-planned finishes)
    rounds: int
    sim_wall_s: float
    events_per_s: float
    # Named numbers the policy reported over time (e.g. Dally's delay timers): name -> last value.
    policy_telemetry_last: dict[str, float]
    # GPU-seconds jobs held on each GPU type (restores included): where a policy put the work.
    # Empty when the run did not say which node holds which type.
    gpu_s_by_type: dict[str, float] = field(default_factory=dict)


def job_table(
    jobs: list[Job],
    gpu_type: Callable[[Placement], str] | None = None,
    *,
    until: float | None = None,
) -> pd.DataFrame:
    """One row per job: what happened to it; ``gpu_type`` names the GPU type(s) of a placement
    (column ``gpu_type``: of the job's last placement, "" for a job that never started).
    ``until``: when the run ended (its last round, or the Ctrl-C that stopped it): a job still
    waiting then has waited until then (``queue_s``), not only before its earlier starts."""
    finished = np.array([j.state == JobState.DONE for j in jobs], dtype=bool)
    submit = np.array([j.submit_s for j in jobs])
    finish = np.array([j.finish_s if j.state == JobState.DONE else np.nan for j in jobs])
    first = np.array([j.first_start_s if j.first_start_s >= 0 else np.nan for j in jobs])
    return pd.DataFrame(
        {
            "job_id": [j.job_id for j in jobs],
            "model": [j.model for j in jobs],
            "num_gpus": np.array([j.num_gpus for j in jobs], dtype=np.int64),
            "submit_s": submit,
            "duration_s": np.array([j.duration_s for j in jobs]),
            "first_start_s": first,
            "finish_s": finish,
            "jct_s": finish - submit,
            "queue_s": np.array([_queued_s(j, until) for j in jobs]),
            "comm_overhead_s": np.array([j.comm_overhead_s for j in jobs]),
            "preemptions": np.array([j.preemptions for j in jobs], dtype=np.int64),
            "migrations": np.array([j.migrations for j in jobs], dtype=np.int64),
            "finished": finished,
            "outcome": np.where(finished, "finished", "unfinished"),
            "sensitivity_node": np.array([j.sensitivity.node[0] for j in jobs]),
            "sensitivity_rack": np.array([j.sensitivity.rack[0] for j in jobs]),
            "gpu_type": [
                gpu_type(j.placement) if gpu_type is not None and j.placement else "" for j in jobs
            ],
        }
    )


def _queued_s(job: Job, until: float | None) -> float:
    """Seconds ``job`` waited in the queue, its wait at ``until`` included when it waits still."""
    if until is None or job.state != JobState.QUEUED:
        return job.queued_total_s
    return job.queued_total_s + max(0.0, until - job.queued_since_s)


def with_rejected(table: pd.DataFrame, order: np.ndarray, rejected: pd.DataFrame) -> pd.DataFrame:
    """``table`` (the simulated jobs) with a row per rejected job (``job_id, model, num_gpus,
    submit_s, duration_s`` given; outcome "rejected", nothing happened to it), in trace order:
    ``order`` holds each row's position in the trace, simulated rows first."""
    if rejected.empty:
        return table
    rows = rejected.assign(
        queue_s=0.0,
        comm_overhead_s=0.0,
        preemptions=0,
        migrations=0,
        finished=False,
        outcome="rejected",
    )
    merged = pd.concat([table, rows], ignore_index=True)
    merged = merged.iloc[np.argsort(order, kind="stable")].reset_index(drop=True)
    return merged[list(table.columns)]


def timeline_table(timeline: Timeline) -> pd.DataFrame:
    """The timeline as a table: time, busy GPUs, queue length, congestion."""
    return pd.DataFrame(
        {
            "time_s": np.frombuffer(timeline.time_s, dtype=np.float64),
            "busy_gpus": np.asarray(timeline.busy_gpus, dtype=np.int64),
            "queued": np.asarray(timeline.queued, dtype=np.int64),
            "congestion": np.frombuffer(timeline.congestion, dtype=np.float64),
        }
    )


def _integral(times: np.ndarray, values: np.ndarray, end: float) -> float:
    """Integral of a step function that holds ``values[i]`` on [times[i], times[i+1])."""
    if len(times) == 0:
        return 0.0
    widths = np.diff(np.append(times, end))
    return float(np.sum(values * widths))


def summarise(
    outcome: RunOutcome,
    *,
    policy: str,
    cluster: str,
    trace: str,
    congestion: str,
    seed: int,
    total_gpus: int,
    jobs_rejected: int,
    wall_s: float,
    node_type: tuple[str, ...] = (),
) -> SimResult:
    """The summary of a run (simulated or live): JCTs, queueing, makespan, communication
    overhead, utilisation, moves and fairness, from the core's outcome and the run's labels."""
    table = job_table(outcome.jobs)
    done = table[table["finished"]]
    jct = done["jct_s"].to_numpy()
    queue = done["queue_s"].to_numpy()
    start = float(table["submit_s"].min()) if len(table) else 0.0
    end = float(done["finish_s"].max()) if len(done) else start
    makespan = end - start
    tl = outcome.timeline
    times = np.frombuffer(tl.time_s, dtype=np.float64)
    busy = np.asarray(tl.busy_gpus, dtype=np.float64)
    busy_gpu_s = _integral(times, busy, end)
    run_time = float((done["jct_s"] - done["queue_s"]).sum())
    overhead = float(table["comm_overhead_s"].sum())
    slowdown = jct / np.maximum(done["duration_s"].to_numpy(), 1e-9)
    telemetry_last = {name: value for _, name, value in tl.telemetry}
    moves = (table["preemptions"] + table["migrations"]).to_numpy()

    def q(p: float) -> float:
        return float(np.percentile(jct, p)) if len(jct) else 0.0

    return SimResult(
        policy=policy,
        cluster=cluster,
        trace=trace,
        congestion=congestion,
        seed=seed,
        total_gpus=total_gpus,
        jobs=len(table) + jobs_rejected,
        jobs_finished=len(done),
        jobs_rejected=jobs_rejected,
        makespan_s=makespan,
        avg_jct_s=float(jct.mean()) if len(jct) else 0.0,
        p50_jct_s=q(50),
        p95_jct_s=q(95),
        p99_jct_s=q(99),
        avg_queue_s=float(queue.mean()) if len(queue) else 0.0,
        p99_queue_s=float(np.percentile(queue, 99)) if len(queue) else 0.0,
        comm_overhead_s=overhead,
        comm_overhead_frac=overhead / run_time if run_time > 0 else 0.0,
        gpu_util=busy_gpu_s / (total_gpus * makespan) if makespan > 0 else 0.0,
        avg_slowdown=float(slowdown.mean()) if len(slowdown) else 0.0,
        max_slowdown=float(slowdown.max()) if len(slowdown) else 0.0,
        preemptions=outcome.preemptions,
        migrations=outcome.migrations,
        jobs_moved=int(np.count_nonzero(moves)),
        max_moves_per_job=int(moves.max()) if len(moves) else 0,
        events=outcome.events,
        rounds=outcome.rounds,
        sim_wall_s=wall_s,
        events_per_s=outcome.events / wall_s if wall_s > 0 else 0.0,
        policy_telemetry_last=telemetry_last,
        gpu_s_by_type=gpu_s_by_type(outcome.jobs, node_type) if node_type else {},
    )


def gpu_s_by_type(jobs: list[Job], node_type: tuple[str, ...]) -> dict[str, float]:
    """GPU-seconds the jobs held on each GPU type (``node_type``: each node's), from the
    stretches of service each job recorded with its placement; types in node order."""
    held = dict.fromkeys(node_type, 0.0)
    for job in jobs:
        for placement, seconds in job.service:
            for node, gpus in placement:
                held[node_type[node]] += gpus * seconds
    return held
