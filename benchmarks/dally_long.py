"""Dally on long overloaded traces, over seeds: makespan, average JCT and communication overhead.

The traces are those of ``dally_speed.py`` (90% offered load of the 256-GPU ``medium`` cluster,
half of the jobs multi-GPU, up to 64 GPUs, high congestion), 20,000 jobs each by default, one per
generator seed. On such traces the makespan is set by a handful of large, long jobs and where in
the run each policy starts them, so one trace says little: the figure is Dally's ratio to each
baseline per seed (below 1: Dally better) and the mean and standard deviation over the seeds.

    .venv/bin/python benchmarks/dally_long.py [--jobs 20000] [--seeds 8] [--workers 2]
        [--policies consolidate,gandiva,fifo] [--out bench-results/dally_long]

``tiresias`` is left out by default: it preempts tens of thousands of times on these traces and
takes minutes a run. Writes ``results.json`` (every run) and ``summary.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
METRICS = ("makespan_s", "avg_jct_s", "comm_overhead_frac")


def run_one(task: tuple[int, int, str]) -> dict[str, object]:
    from unstall.cli.resolvers.sim import resolve_cluster, resolve_congestion, resolve_policy
    from unstall.sim import simulate
    from unstall.traces import SyntheticTraceConfig, generate

    jobs, seed, policy = task
    trace = generate(
        SyntheticTraceConfig(
            jobs=jobs, seed=seed, load=0.9, cluster_gpus=256, multi_gpu_share=0.5, max_gpus=64
        )
    )
    sim = simulate(
        trace,
        resolve_cluster("medium"),
        resolve_policy(policy),
        congestion=resolve_congestion("high"),
        seed=seed,
    )
    r = sim.result
    last = sim.jobs.sort_values("finish_s").iloc[-1]
    return {
        "seed": seed,
        "policy": policy,
        "jobs": r.jobs,
        "makespan_s": r.makespan_s,
        "avg_jct_s": r.avg_jct_s,
        "comm_overhead_frac": r.comm_overhead_frac,
        "sim_wall_s": r.sim_wall_s,
        "last_job_gpus": int(last["num_gpus"]),
        "last_job_start_h": float(last["first_start_s"]) / 3600,
    }


def summarise(runs: list[dict[str, object]], baselines: list[str]) -> str:
    by = {(r["seed"], r["policy"]): r for r in runs}
    seeds = sorted({int(r["seed"]) for r in runs})  # type: ignore[call-overload]
    lines = [
        "Dally over each baseline on the same trace (mean ± sd over seeds; below 1: Dally better)",
        "",
        "| baseline | " + " | ".join(METRICS) + " | worst seed's makespan |",
        "|---|" + "---:|" * (len(METRICS) + 1),
    ]
    for base in baselines:
        cells = []
        for metric in METRICS:
            ratios = [
                float(by[s, "dally"][metric]) / float(by[s, base][metric])  # type: ignore[arg-type]
                for s in seeds
            ]
            sd = statistics.stdev(ratios) if len(ratios) > 1 else 0.0
            cells.append(f"{statistics.fmean(ratios):.3f} ± {sd:.3f}")
        worst = max(
            float(by[s, "dally"]["makespan_s"]) / float(by[s, base]["makespan_s"])  # type: ignore[arg-type]
            for s in seeds
        )
        lines.append(f"| {base} | " + " | ".join(cells) + f" | {worst:.3f} |")
    lines += [
        "",
        "Per seed, Dally over the first baseline:",
        "",
        "| seed | makespan | avg JCT | comm overhead | Dally's last job: GPUs, start h |",
        "|---:|---:|---:|---:|---|",
    ]
    first = baselines[0]
    for s in seeds:
        d, b = by[s, "dally"], by[s, first]
        ratios = [float(d[m]) / float(b[m]) for m in METRICS]  # type: ignore[arg-type]
        lines.append(
            f"| {s} | "
            + " | ".join(f"{x:.3f}" for x in ratios)
            + f" | {d['last_job_gpus']}, {float(d['last_job_start_h']):,.0f} |"  # type: ignore[arg-type]
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--policies", default="consolidate,gandiva,fifo", help="the baselines")
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "dally_long")
    args = parser.parse_args()
    baselines = [p for p in args.policies.split(",") if p]
    tasks = [(args.jobs, seed, p) for seed in range(args.seeds) for p in ("dally", *baselines)]
    runs: list[dict[str, object]] = []
    started = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        for i, result in enumerate(pool.map(run_one, tasks), 1):
            runs.append(result)
            print(f"{i}/{len(tasks)} runs, {time.perf_counter() - started:.0f} s", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(runs, indent=1))
    summary = summarise(runs, baselines)
    (args.out / "summary.md").write_text(summary + "\n")
    print(summary)


if __name__ == "__main__":
    main()
