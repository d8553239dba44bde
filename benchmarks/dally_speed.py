"""Dally's simulation time against strict consolidation's on the same traces, and its churn.

The traces are the ones where Dally's decisions cost the most: long queues of multi-GPU jobs
(generated at 90% offered load of the 256-GPU ``medium`` cluster, half of the jobs multi-GPU,
up to 64 GPUs, high congestion), at 2,000, 20,000 and 100,000 jobs, and the full Philly trace
on its 960-GPU cluster (short queues) when it is present. Each trace is simulated by
``consolidate`` and ``dally-fixed`` (Dally with fixed settings, without the look-ahead tuner) in
turn in one process (a small warm-up run first, so neither pays for loading the zoo); the figure
is the event loop's wall time (``sim_wall_s``) and each policy's ratio to consolidate's.
Churn: preemptions and migrations per job (mean, and the most any one job had), and how many
single-node jobs were migrated at all.

    .venv/bin/python benchmarks/dally_speed.py [--jobs 2000,20000,100000] [--skip-philly]
        [--policies consolidate,dally-fixed,dally] [--json bench-results/dally_speed.json]

``--policies consolidate,dally-fixed,dally`` adds ``dally``, Dally with its look-ahead tuner.

Goal (issue 22): dally-fixed within 5x of consolidate on every trace, the 100,000-job trace in under
two minutes.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PHILLY = REPO / ".." / "shared" / "data" / "traces" / "philly_jobs.csv"
PHILLY_CLUSTER = str(Path(__file__).resolve().parent / "philly_960.toml")
POLICIES = ("consolidate", "dally-fixed")


def heavy_trace(jobs: int):  # type: ignore[no-untyped-def]
    from unstall.traces import SyntheticTraceConfig, generate

    return generate(
        SyntheticTraceConfig(
            jobs=jobs, seed=7, load=0.9, cluster_gpus=256, multi_gpu_share=0.5, max_gpus=64
        )
    )


def run(trace, cluster: str, congestion: str, policy: str) -> dict[str, object]:  # type: ignore[no-untyped-def]
    from unstall.net import resolve_cluster
    from unstall.sched import resolve_policy
    from unstall.sim import resolve_congestion, simulate
    from unstall.sim.lookahead import tuner_course

    started = time.perf_counter()
    sim = simulate(
        trace,
        resolve_cluster(cluster),
        resolve_policy(policy),
        congestion=resolve_congestion(congestion),
    )
    total = time.perf_counter() - started
    r, jobs = sim.result, sim.jobs
    moves = jobs["preemptions"] + jobs["migrations"]
    single_node_migrated = jobs[(jobs["num_gpus"] <= 1) & (jobs["migrations"] > 0)]
    course = tuner_course(sim.telemetry)  # what a look-ahead tuner chose (None without one)
    return {
        "policy": policy,
        "jobs": r.jobs,
        "sim_wall_s": r.sim_wall_s,
        "total_s": total,
        "avg_jct_h": r.avg_jct_s / 3600,
        "makespan_h": r.makespan_s / 3600,
        "comm_overhead_frac": r.comm_overhead_frac,
        "preemptions": r.preemptions,
        "migrations": r.migrations,
        "moves_per_job": float(moves.mean()),
        "max_moves_of_a_job": int(moves.max()) if len(moves) else 0,
        "one_gpu_jobs_migrated": len(single_node_migrated),
        "tuner": course.describe() if course is not None else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="2000,20000,100000", help="sizes of the heavy traces")
    parser.add_argument("--skip-philly", action="store_true")
    parser.add_argument(
        "--policies",
        default=",".join(POLICIES),
        help="comma-separated, consolidate first (the ratios are to it); e.g. "
        "consolidate,dally-fixed,dally (dally: Dally with its look-ahead tuner, issue 39)",
    )
    parser.add_argument("--json", type=Path, default=REPO / "bench-results" / "dally_speed.json")
    args = parser.parse_args()
    run(heavy_trace(200), "medium", "high", "dally-fixed")  # warm-up: zoo facts, imports
    cases = [(f"heavy-{n}", int(n), "medium", "high") for n in args.jobs.split(",")]
    if not args.skip_philly:
        if PHILLY.exists():
            cases.append(("philly", 0, PHILLY_CLUSTER, "medium"))
        else:
            print(f"skipping Philly: {PHILLY} is not present", file=sys.stderr)
    print(
        f"{'trace':12} {'policy':12} {'jobs':>8} {'sim s':>7} {'ratio':>6} {'JCT h':>8} "
        f"{'mksp h':>9} {'comm':>6} {'moves/job':>9} {'max':>4} {'1-GPU migr':>10}"
    )
    rows = []
    for label, jobs, cluster, congestion in cases:
        if label == "philly":
            from unstall.traces import resolve_trace

            trace = resolve_trace(PHILLY, "philly-csv")
        else:
            trace = heavy_trace(jobs)
        base = None
        for policy in [p for p in args.policies.split(",") if p]:
            row = run(trace, cluster, congestion, policy)
            row["trace"] = label
            base = base or float(row["sim_wall_s"])  # type: ignore[arg-type]
            row["ratio_to_consolidate"] = float(row["sim_wall_s"]) / base  # type: ignore[arg-type]
            rows.append(row)
            print(
                f"{label:12} {policy:12} {row['jobs']:>8,} {row['sim_wall_s']:>7.1f} "
                f"{row['ratio_to_consolidate']:>6.2f} {row['avg_jct_h']:>8.2f} "
                f"{row['makespan_h']:>9.1f} {row['comm_overhead_frac']:>6.3f} "
                f"{row['moves_per_job']:>9.3f} {row['max_moves_of_a_job']:>4} "
                f"{row['one_gpu_jobs_migrated']:>10}",
                flush=True,
            )
            if row["tuner"]:
                print(f"{'':12} {policy}'s tuner: {row['tuner']}", flush=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    machine = {"platform": platform.platform(), "python": platform.python_version()}
    args.json.write_text(json.dumps({"machine": machine, "runs": rows}, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
