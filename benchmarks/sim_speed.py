"""Simulator speed: the full Philly trace per policy, and a million synthetic jobs.

Each run happens in its own process, so the peak memory (max RSS) reported is that run's alone.
Wall time covers reading or generating the trace (``trace_s``), the simulation itself
(``sim_wall_s``: the event loop) and the whole run including building the jobs and the perf
model (``total_s``, imports and the trace excluded). ``events`` are what happened (arrivals,
finishes, congestion changes, timers, ticks); finish events superseded by re-planning are not
counted.

    .venv/bin/python benchmarks/sim_speed.py [--policies fifo,tiresias] [--synthetic-jobs 1000000]
        [--synthetic-load L] [--skip-philly] [--skip-synthetic]
        [--json bench-results/sim_speed.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PHILLY = REPO / ".." / "shared" / "data" / "traces" / "philly_jobs.csv"
ALL_POLICIES = "fifo,first-fit,consolidate,srtf,tiresias,gandiva"


def one_run(
    kind: str, policy: str, jobs: int, cluster: str, congestion: str, load: float | None
) -> dict[str, object]:
    """Runs in a child process: simulate once and report figures."""
    from unstall.sim import SimRequest, simulate_request
    from unstall.traces import SyntheticTraceConfig, generate, resolve_trace

    started = time.perf_counter()
    if kind == "philly":
        trace = resolve_trace(PHILLY, "philly-csv")
    else:
        # Without a load the generator's defaults hold: Philly's own arrival rate, which offers
        # the philly preset about 0.17 of its GPU-time (the real trace's own share).
        shape = {} if load is None else {"load": load, "cluster_gpus": 2496}
        trace = generate(SyntheticTraceConfig(jobs=jobs, seed=1, **shape))
    trace_s = time.perf_counter() - started
    started = time.perf_counter()
    run = simulate_request(SimRequest(policy=policy, cluster=cluster, congestion=congestion), trace)
    total = time.perf_counter() - started
    r = run.result
    return {
        "trace": kind,
        "policy": policy,
        "jobs": r.jobs,
        "jobs_finished": r.jobs_finished,
        "events": r.events,
        "trace_s": trace_s,
        "sim_wall_s": r.sim_wall_s,
        "total_s": total,
        "events_per_s": r.events_per_s,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "gpu_util": r.gpu_util,
        "avg_queue_s": r.avg_queue_s,
        "synthetic_load": load,
    }


def spawn(
    kind: str, policy: str, jobs: int, cluster: str, congestion: str, load: float | None
) -> dict[str, object]:
    args = [sys.executable, __file__, "--child", kind, policy, str(jobs), cluster, congestion]
    args.append("default" if load is None else str(load))
    out = subprocess.run(args, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, policy, jobs, cluster, congestion, load = sys.argv[2:8]
        offered = None if load == "default" else float(load)
        print(json.dumps(one_run(kind, policy, int(jobs), cluster, congestion, offered)))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", default=ALL_POLICIES)
    parser.add_argument("--synthetic-policies", default="fifo,tiresias")
    parser.add_argument("--synthetic-jobs", type=int, default=1_000_000)
    parser.add_argument(
        "--synthetic-load",
        type=float,
        default=None,
        help="Offered share of the cluster's GPU-time (default: Philly's arrival rate, ~0.17). "
        "At 0.8 the queue grows without bound on this cluster (network slowdowns push the "
        "real load past 1), which measures the policies' per-round cost over the queue.",
    )
    parser.add_argument("--congestion", default="medium")
    parser.add_argument("--skip-philly", action="store_true")
    parser.add_argument("--skip-synthetic", action="store_true")
    parser.add_argument("--json", type=Path, default=REPO / "bench-results" / "sim_speed.json")
    args = parser.parse_args()
    rows = []
    plan = []
    if not args.skip_philly:
        if PHILLY.exists():
            plan += [("philly", p, 0) for p in args.policies.split(",")]
        else:
            print(f"skipping the Philly runs: {PHILLY} is not present", file=sys.stderr)
    if not args.skip_synthetic:
        plan += [("synthetic", p, args.synthetic_jobs) for p in args.synthetic_policies.split(",")]
    header = f"{'trace':10} {'policy':12} {'jobs':>9} {'events':>10} {'trace s':>8} {'sim s':>8}"
    header += f" {'total s':>8}"
    print(header + f" {'events/s':>10} {'peak MB':>8} {'util':>6}")
    for kind, policy, jobs in plan:
        load = args.synthetic_load if kind == "synthetic" else None
        row = spawn(kind, policy, jobs, "philly", args.congestion, load)
        rows.append(row)
        print(
            f"{kind:10} {policy:12} {row['jobs']:>9,} {row['events']:>10,} "
            f"{row['trace_s']:>8.1f} {row['sim_wall_s']:>8.1f} {row['total_s']:>8.1f} "
            f"{row['events_per_s']:>10,.0f} "
            f"{row['peak_rss_mb']:>8.0f} {row['gpu_util']:>6.3f}",
            flush=True,
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    machine = {"platform": platform.platform(), "python": platform.python_version()}
    args.json.write_text(json.dumps({"machine": machine, "runs": rows}, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
