"""Dally on overloaded traces, over seeds: makespan, average and p99 JCT, communication overhead.

``--shape heavy`` (the default): the traces of ``dally_speed.py`` (90% offered load of the 256-GPU
``medium`` cluster, half of the jobs multi-GPU, up to 64 GPUs), 20,000 jobs each by default, one
per generator seed. ``--shape default``: traces generated like the embedded default trace of
``make demo`` (its config, 400 jobs, on the 32-GPU ``small`` cluster) with other generator seeds
(1000, 1001, ...), to tell that one trace's draw from what such traces do. Congestion high by
default (``--congestion`` takes several levels). On such traces the makespan is set by a handful
of large, long jobs and where in the run each policy starts them, so one trace says little: the
figure is Dally's ratio to each baseline per seed (below 1: Dally better), and to the best of
the baselines on each metric and seed, with the mean and standard deviation over the seeds.
Dally here is ``dally-fixed``: Dally with fixed settings, without the look-ahead tuner that the
policy ``dally`` adds (``dally_tuned.py`` measures the tuner).

    .venv/bin/python benchmarks/dally_long.py [--shape heavy] [--jobs 20000] [--seeds 8]
        [--workers 2] [--policies consolidate,gandiva,fifo] [--congestion high]
        [--out bench-results/dally_long]

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
METRICS = ("makespan_s", "avg_jct_s", "p99_jct_s", "comm_overhead_frac")
DALLY = "dally-fixed"  # Dally without the look-ahead tuner: the figures' policy
# Labels of runs saved before 2026-11-28, when ``dally`` was Dally without the tuner (now
# ``dally-fixed``) and ``dally-tuned`` Dally with it (now ``dally``). This script never runs the
# tuner, so a ``dally`` among the runs it summarises is always an old label.
OLD_LABELS = {"dally": "dally-fixed", "dally-tuned": "dally"}


def run_one(task: tuple[str, int, int, str, str]) -> dict[str, object]:
    import dataclasses

    from unstall.net import resolve_cluster
    from unstall.sched import resolve_policy
    from unstall.sim import resolve_congestion, simulate
    from unstall.traces import SyntheticTraceConfig, generate, lookalike_trace_config

    shape, jobs, seed, policy, congestion = task
    if shape == "default":
        config = dataclasses.replace(lookalike_trace_config(seed), jobs=jobs)
        cluster = "small"
    else:
        config = SyntheticTraceConfig(
            jobs=jobs, seed=seed, load=0.9, cluster_gpus=256, multi_gpu_share=0.5, max_gpus=64
        )
        cluster = "medium"
    trace = generate(config)
    sim = simulate(
        trace,
        resolve_cluster(cluster),
        resolve_policy(policy),
        congestion=resolve_congestion(congestion),
        seed=seed,
    )
    r = sim.result
    last = sim.jobs.sort_values("finish_s").iloc[-1]
    return {
        "seed": seed,
        "policy": policy,
        "congestion": congestion,
        "jobs": r.jobs,
        "makespan_s": r.makespan_s,
        "avg_jct_s": r.avg_jct_s,
        "p99_jct_s": r.p99_jct_s,
        "comm_overhead_frac": r.comm_overhead_frac,
        "sim_wall_s": r.sim_wall_s,
        "last_job_gpus": int(last["num_gpus"]),
        "last_job_start_h": float(last["first_start_s"]) / 3600,
    }


def summarise(runs: list[dict[str, object]], baselines: list[str], congestion: str) -> str:
    """The tables for one congestion level (runs saved with old labels read as today's)."""
    by = {
        (r["seed"], OLD_LABELS.get(str(r["policy"]), r["policy"])): r
        for r in runs
        if r["congestion"] == congestion
    }
    seeds = sorted({int(s) for s, _ in by})  # type: ignore[call-overload]
    lines = [
        f"Congestion {congestion}: Dally ({DALLY}) over each baseline on the same trace (mean ± "
        f"sd over {len(seeds)} seeds; below 1: Dally better)",
        "",
        "| baseline | " + " | ".join(METRICS) + " | worst seed's makespan |",
        "|---|" + "---:|" * (len(METRICS) + 1),
    ]
    for base in baselines:
        cells = []
        for metric in METRICS:
            ratios = [_ratio(by[s, DALLY], by[s, base], metric) for s in seeds]
            cells.append(_mean_sd(ratios))
        worst = max(_ratio(by[s, DALLY], by[s, base], "makespan_s") for s in seeds)
        lines.append(f"| {base} | " + " | ".join(cells) + f" | {worst:.3f} |")
    if len(baselines) > 1:
        # Per seed and metric, the baseline that did best on it (it may differ by metric):
        # Dally's largest ratio.
        cells, worst = [], 0.0
        for metric in METRICS:
            ratios = [max(_ratio(by[s, DALLY], by[s, b], metric) for b in baselines) for s in seeds]
            cells.append(_mean_sd(ratios))
            if metric == "makespan_s":
                worst = max(ratios)
        lines.append("| best of them | " + " | ".join(cells) + f" | {worst:.3f} |")
    lines += [
        "",
        f"Congestion {congestion}, per seed, Dally over the first baseline:",
        "",
        "| seed | " + " | ".join(METRICS) + " | Dally's last job: GPUs, start h |",
        "|---:|" + "---:|" * len(METRICS) + "---|",
    ]
    first = baselines[0]
    for s in seeds:
        d, b = by[s, DALLY], by[s, first]
        lines.append(
            f"| {s} | "
            + " | ".join(f"{_ratio(d, b, m):.3f}" for m in METRICS)
            + f" | {d['last_job_gpus']}, {float(d['last_job_start_h']):,.0f} |"  # type: ignore[arg-type]
        )
    return "\n".join(lines)


def _mean_sd(ratios: list[float]) -> str:
    sd = statistics.stdev(ratios) if len(ratios) > 1 else 0.0
    return f"{statistics.fmean(ratios):.3f} ± {sd:.3f}"


def _ratio(dally: dict[str, object], base: dict[str, object], metric: str) -> float:
    """Dally's figure over the baseline's; 1 where both are 0 (no overhead either way)."""
    d, b = float(dally[metric]), float(base[metric])  # type: ignore[arg-type]
    return 1.0 if d == b else d / b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shape",
        choices=("heavy", "default"),
        default="heavy",
        help="heavy: 90%% load of the medium cluster; default: like the embedded trace (small)",
    )
    parser.add_argument("--jobs", type=int, help="jobs a trace (heavy: 20000; default: 400)")
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--policies", default="consolidate,gandiva,fifo", help="the baselines")
    parser.add_argument("--congestion", default="high", help="comma-separated levels")
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "dally_long")
    args = parser.parse_args()
    baselines = [p for p in args.policies.split(",") if p]
    levels = [c for c in args.congestion.split(",") if c]
    jobs = args.jobs or (20_000 if args.shape == "heavy" else 400)
    tasks = [
        (args.shape, jobs, seed, p, level)
        for level in levels
        for seed in range(args.seeds)
        for p in (DALLY, *baselines)
    ]
    runs: list[dict[str, object]] = []
    started = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        for i, result in enumerate(pool.map(run_one, tasks), 1):
            runs.append(result)
            print(f"{i}/{len(tasks)} runs, {time.perf_counter() - started:.0f} s", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(runs, indent=1))
    from unstall.traces import LOOKALIKE_FIRST_SEED

    first_seed = LOOKALIKE_FIRST_SEED if args.shape == "default" else 0
    header = (
        f"Traces: shape {args.shape}, {jobs} jobs, generator seeds {first_seed}-"
        f"{first_seed + args.seeds - 1} (seed column: counted from {first_seed})"
    )
    summary = "\n\n".join([header, *(summarise(runs, baselines, level) for level in levels)])
    (args.out / "summary.md").write_text(summary + "\n")
    print(summary)


if __name__ == "__main__":
    main()
