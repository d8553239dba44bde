"""The simulator against the live backend on the same trace and cluster: how far apart they are.

A local multi-node Ray cluster on loopback (the ``tiny`` preset: 4 nodes x 4 emulated GPUs in 2
racks, one Ray node per node) runs a seeded 40-job trace (half of its jobs multi-GPU, durations
of minutes, arrivals at about the cluster's capacity) compressed so that each live run takes
about ``--minutes`` of wall time, with emulated compute (each step waits the perf model's
iteration time on its placement, links shared as the simulator shares them, and a real gloo
all-reduce). For each policy the same trace, cluster and policy go through ``unstall.sim`` and
``unstall.live`` twice: before the run, a-priori (start-ups and restores from the start-up
model, ``--startup-model``, scaled by the run's speedup: what ``unstall sim run --speedup K``
predicts), and after it, given what the run measured (each job's own start-up, the median
restore).

Reported per policy: average JCT, makespan and per-job JCT, live against simulated (the gap in
%, the per-job median absolute error), moves and communication overhead (the time jobs ran
beyond their consolidated placement's pace) live and simulated, the order of the policies by
average JCT in each, and what the live run measured (job start-up, restore, checkpoint,
decision times).

    .venv/bin/python benchmarks/live_fidelity.py [--policies fifo,consolidate,tiresias,dally-fixed]
        [--jobs 40] [--minutes 10] [--seed 0] [--json bench-results/live_fidelity.json]
        [--plot benchmarks/live_fidelity.png] [--startup-model default|none|FILE]
        [--runs-out DIR]

``--runs-out DIR`` keeps each live run's JSON (as ``unstall live run --json`` writes it), on which
``unstall live calibrate DIR/*.json --out FILE`` fits a start-up model.

``dally-fixed`` is Dally with fixed settings; ``--policies dally`` runs Dally with its look-ahead
tuner (its course, live and simulated, is printed too).

Goal (issue 40): average JCT and makespan within 5% of the simulator's, per-job JCT within 10%
(median absolute error), every policy ranked in the same order. Goal (issue 47): the same
within 5% / 10% for the a-priori prediction.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
POLICIES = ("fifo", "consolidate", "tiresias", "dally-fixed")
MODELS = ("resnet50", "vgg16", "transformer", "lstm_lm", "resnet18", "mobilenet_v2")


def fidelity_trace(jobs: int, seed: int, cluster_gpus: int = 16, load: float = 1.1):  # type: ignore[no-untyped-def]
    """``jobs`` jobs: half of one GPU, the rest of 2, 4 or 8; durations log-normal around 10
    minutes (2 to 40); Poisson arrivals offering ``load`` times the cluster's GPU-time."""
    from unstall.traces import Trace

    rng = np.random.default_rng(seed)
    gpus = np.where(rng.random(jobs) < 0.5, 1, rng.choice([2, 4, 8], size=jobs, p=[0.4, 0.4, 0.2]))
    duration = np.clip(rng.lognormal(np.log(600.0), 0.7, size=jobs), 120.0, 2400.0).round(1)
    mean_gap = float((gpus * duration).mean()) / (cluster_gpus * load)
    submit = np.concatenate([[0.0], np.cumsum(rng.exponential(mean_gap, size=jobs - 1))]).round(1)
    frame = pd.DataFrame(
        {
            "job_id": [f"job-{i:02d}" for i in range(jobs)],
            "submit_s": submit,
            "num_gpus": gpus.astype(int),
            "duration_s": duration,
            "model": rng.choice(MODELS, size=jobs),
        }
    )
    return Trace.from_frame(frame, source=f"fidelity-{jobs}-seed{seed}")


def compare(  # type: ignore[no-untyped-def]
    policy: str,
    trace,
    address: str,
    minutes: float,
    seed: int,
    runs_out: Path | None = None,
    startup_model: str = "default",
) -> dict[str, object]:
    from unstall.live import LiveConfig, run_live
    from unstall.net import resolve_cluster
    from unstall.sched import resolve_policy
    from unstall.sim import resolve_startup_model, simulate

    cluster = resolve_cluster("tiny")
    # The speedup that makes the simulated run last ``minutes`` of wall time.
    planned = simulate(trace, cluster, resolve_policy(policy), seed=seed)
    speedup = planned.result.makespan_s / (60.0 * minutes)
    # The a-priori prediction, made before the run: start-ups and restores from the start-up
    # model (fitted on earlier runs), scaled by this run's speedup.
    model = resolve_startup_model(startup_model, owner="live_fidelity", field="startup_model")
    apriori = simulate(
        trace,
        cluster,
        resolve_policy(policy),
        seed=seed,
        startup_model=None if model is None else model.for_speedup(speedup),
    )
    started = time.perf_counter()
    run = run_live(
        trace,
        resolve_policy(policy),
        cluster=cluster,
        address=address,
        config=LiveConfig(speedup=speedup, seed=seed),
        predict=True,
        log=lambda text: print(f"  {policy}: {text}", file=sys.stderr, flush=True),
    )
    wall = time.perf_counter() - started
    if runs_out is not None:
        # The run as `unstall live run --json` writes it: `unstall live calibrate` reads it.
        runs_out.mkdir(parents=True, exist_ok=True)
        (runs_out / f"{_file_name(policy)}-seed{seed}.json").write_text(run.to_json() + "\n")
    assert run.prediction is not None
    live, sim = run.result, run.prediction.result
    joined = run.jobs.merge(run.prediction.jobs, on="job_id", suffixes=("_live", "_sim"))
    done = joined[(joined["outcome_live"] == "finished") & (joined["outcome_sim"] == "finished")]
    per_job = (done["jct_s_live"] - done["jct_s_sim"]).abs() / done["jct_s_sim"]
    ahead = apriori.result
    both = run.jobs.merge(apriori.jobs, on="job_id", suffixes=("_live", "_sim"))
    both = both[(both["outcome_live"] == "finished") & (both["outcome_sim"] == "finished")]
    per_job_ahead = (both["jct_s_live"] - both["jct_s_sim"]).abs() / both["jct_s_sim"]
    return {
        "policy": policy,
        "speedup": speedup,
        "live_avg_jct_s": live.avg_jct_s,
        "sim_avg_jct_s": sim.avg_jct_s,
        "avg_jct_gap": live.avg_jct_s / sim.avg_jct_s - 1.0,
        "live_makespan_s": live.makespan_s,
        "sim_makespan_s": sim.makespan_s,
        "makespan_gap": live.makespan_s / sim.makespan_s - 1.0,
        "per_job_jct_median_abs_err": float(per_job.median()),
        # Made before the run (the start-up model; nothing measured by this run).
        "apriori_avg_jct_s": ahead.avg_jct_s,
        "apriori_avg_jct_gap": live.avg_jct_s / ahead.avg_jct_s - 1.0,
        "apriori_makespan_s": ahead.makespan_s,
        "apriori_makespan_gap": live.makespan_s / ahead.makespan_s - 1.0,
        "apriori_per_job_jct_median_abs_err": float(per_job_ahead.median()),
        "apriori_moves": ahead.preemptions + ahead.migrations,
        # Time jobs ran beyond their consolidated placement's pace (spread, links shared).
        "live_comm_overhead_s": live.comm_overhead_s,
        "sim_comm_overhead_s": sim.comm_overhead_s,
        "live_preemptions": live.preemptions,
        "sim_preemptions": sim.preemptions,
        "live_migrations": live.migrations,
        "sim_migrations": sim.migrations,
        "startup_s": run.facts.startup_s_median,
        "restore_s": run.facts.restore_s_median,
        "checkpoint_s": run.facts.checkpoint_s_median,
        "decide_ms_median": 1000 * run.facts.decide_wall_s_median,
        "decide_ms_max": 1000 * run.facts.decide_wall_s_max,
        # The share of run time the emulation fell behind the perf model's pace (a busy machine).
        "behind_frac": run.facts.emulation_behind_frac,
        "jobs_finished": [live.jobs_finished, sim.jobs_finished],
        "wall_s": wall,
        "jct_pairs": done[["job_id", "jct_s_live", "jct_s_sim"]].to_dict("records"),
        # A look-ahead tuner's course (dally), live and simulated; None without one.
        "tuner_live": _course(run.telemetry),
        "tuner_sim": _course(run.prediction.telemetry),
    }


def _file_name(policy: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in policy).strip("-")


def _course(telemetry: pd.DataFrame) -> str | None:
    from unstall.sim.lookahead import tuner_course

    course = tuner_course(telemetry)
    return course.describe() if course is not None else None


def plot(rows: list[dict[str, object]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 5))
    top = 0.0
    for row in rows:
        pairs = pd.DataFrame(row["jct_pairs"])  # type: ignore[arg-type]
        ax.scatter(pairs["jct_s_sim"] / 60, pairs["jct_s_live"] / 60, s=14, label=row["policy"])
        top = max(top, float(pairs[["jct_s_sim", "jct_s_live"]].to_numpy().max()) / 60)
    ax.plot([0, top], [0, top], color="grey", linewidth=0.8)
    ax.set_xlabel("simulated JCT (min)")
    ax.set_ylabel("live JCT (min)")
    ax.set_title("Per-job JCT, live vs simulated (tiny cluster)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument(
        "--startup-model",
        default="default",
        help="The a-priori prediction's start-up model: default (the package's), a file "
        "(`unstall live calibrate --out`) or none.",
    )
    parser.add_argument(
        "--runs-out",
        type=Path,
        default=None,
        help="Folder for each live run's JSON (what `unstall live calibrate` fits on).",
    )
    args = parser.parse_args()
    from unstall.live.cluster import LocalRayCluster
    from unstall.net import resolve_cluster

    # A SIGTERM (a batch system's stop) ends the run as Ctrl-C does: the local cluster's
    # processes are shut down, none is left behind.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    trace = fidelity_trace(args.jobs, args.seed)
    local = LocalRayCluster(resolve_cluster("tiny"), "unstall_gpu")
    rows = []
    try:
        for policy in args.policies.split(","):
            rows.append(
                compare(
                    policy,
                    trace,
                    local.address,
                    args.minutes,
                    args.seed,
                    args.runs_out,
                    args.startup_model,
                )
            )
            write_json(args, rows)  # after each policy: a long run that stops keeps what it did
    finally:
        local.shutdown()
    head = (
        f"{'policy':<12} {'avg JCT live/sim (min)':>24} {'gap':>7} {'makespan live/sim (h)':>23} "
        f"{'gap':>7} {'per-job err':>11} {'moves live/sim':>15} {'comm ovh live/sim (h)':>22}"
    )
    print(head)
    for r in rows:
        print(
            f"{r['policy']:<12} {r['live_avg_jct_s'] / 60:>11.1f} /"
            f"{r['sim_avg_jct_s'] / 60:>10.1f} "
            f"{100 * r['avg_jct_gap']:>+6.1f}% {r['live_makespan_s'] / 3600:>10.2f} /"
            f"{r['sim_makespan_s'] / 3600:>10.2f} {100 * r['makespan_gap']:>+6.1f}% "
            f"{100 * r['per_job_jct_median_abs_err']:>10.1f}% "
            f"{r['live_preemptions'] + r['live_migrations']:>7} /"
            f"{r['sim_preemptions'] + r['sim_migrations']:>6} "
            f"{r['live_comm_overhead_s'] / 3600:>10.2f} /{r['sim_comm_overhead_s'] / 3600:>10.2f}"
        )
    print_apriori(rows)
    by_live = [r["policy"] for r in sorted(rows, key=lambda r: r["live_avg_jct_s"])]
    by_sim = [r["policy"] for r in sorted(rows, key=lambda r: r["sim_avg_jct_s"])]
    print(f"order by average JCT, live: {', '.join(by_live)}")
    print(f"order by average JCT, simulated: {', '.join(by_sim)}")
    for r in rows:
        print(
            f"{r['policy']}: speedup {r['speedup']:.1f}, start-up {r['startup_s']:.1f} s, restore "
            f"{r['restore_s']:.1f} s, checkpoint {r['checkpoint_s']:.2f} s (trace seconds, "
            f"medians), decisions {r['decide_ms_median']:.2f} ms median / "
            f"{r['decide_ms_max']:.1f} ms max, {r['wall_s'] / 60:.1f} min wall, emulation "
            f"behind pace {100 * float(r['behind_frac']):.1f}% of run time"
        )
        if r["tuner_live"] is not None:
            print(f"{r['policy']}'s tuner live: {r['tuner_live']}")
            print(f"{r['policy']}'s tuner simulated: {r['tuner_sim']}")
    if args.plot is not None:
        plot(rows, args.plot)
    if args.json is not None:
        write_json(args, rows)
        print(f"wrote {args.json}")


def print_apriori(rows: list[dict[str, Any]]) -> None:
    """The prediction made before each run (the start-up model) beside the one given the
    run's own measured start-ups."""
    print(
        f"{'policy':<12} {'a priori: avg JCT gap':>22} {'makespan gap':>13} {'per-job err':>12}"
        f" {'moves':>6} | {'given measured start-ups: avg JCT':>34} {'makespan':>9}"
        f" {'per-job':>8}"
    )
    for r in rows:
        print(
            f"{r['policy']:<12} {100 * r['apriori_avg_jct_gap']:>21.1f}% "
            f"{100 * r['apriori_makespan_gap']:>12.1f}% "
            f"{100 * r['apriori_per_job_jct_median_abs_err']:>11.1f}% {r['apriori_moves']:>6} | "
            f"{100 * r['avg_jct_gap']:>33.1f}% {100 * r['makespan_gap']:>8.1f}% "
            f"{100 * r['per_job_jct_median_abs_err']:>7.1f}%"
        )


def write_json(args: argparse.Namespace, rows: list[dict[str, object]]) -> None:
    if args.json is None:
        return
    by_live = [r["policy"] for r in sorted(rows, key=lambda r: r["live_avg_jct_s"])]  # type: ignore[arg-type, return-value]
    by_sim = [r["policy"] for r in sorted(rows, key=lambda r: r["sim_avg_jct_s"])]  # type: ignore[arg-type, return-value]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "machine": {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "load_average": os.getloadavg(),
        },
        "args": {k: str(v) for k, v in vars(args).items()},
        "same_order": by_live == by_sim,
        "rows": rows,
    }
    args.json.write_text(json.dumps(body, indent=2, default=float))


if __name__ == "__main__":
    main()
