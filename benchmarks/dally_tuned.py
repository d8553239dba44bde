"""Dally's look-ahead tuner (``dally-tuned``, issue 39) against Dally as it is, each fixed
candidate setting (the best of them in hindsight, per trace), and the other policies.

Traces generated like the embedded default one (its config, on the 32-GPU ``small`` cluster)
with generator seeds 1000, 1001, ... (``--shape default``; congestion medium, as ``make
demo``), or the heavy traces of ``dally_speed.py`` (``--shape heavy``). Per trace: average JCT
(``--metric``) of each run over the best other policy's (tiresias, consolidate, gandiva, fifo,
first-fit, gavel: the registered policies but the oracle srtf) and over the best fixed Dally
setting's; mean ± sd over the traces, and each run's simulation time over consolidate's.

    .venv/bin/python benchmarks/dally_tuned.py [--shape default] [--traces 20] [--jobs 400]
        [--congestion medium] [--workers 2] [--json bench-results/dally_tuned.json]
        [--tuned 'dally-tuned;dally-tuned?horizon_s=7200'] [--reuse FORMER.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASELINES = ("tiresias", "consolidate", "gandiva", "fifo", "first-fit", "gavel")


def fixed_policies() -> list[str]:
    from unstall.sched.dally.lookahead_config import CANDIDATES

    return [f"fixed:{name}" for name in CANDIDATES]


def run_one(task: tuple[str, int, int, str, str]) -> dict[str, object]:
    import dataclasses

    from unstall.net import resolve_cluster
    from unstall.sched import resolve_policy
    from unstall.sched.base import Policy
    from unstall.sched.dally import Dally
    from unstall.sched.dally.lookahead_config import CANDIDATES
    from unstall.sim import resolve_congestion, simulate
    from unstall.sim.lookahead import LookaheadDally
    from unstall.traces import SyntheticTraceConfig, generate, lookalike_trace_config

    shape, jobs, index, policy, congestion = task
    if shape == "default":
        config = dataclasses.replace(lookalike_trace_config(index), jobs=jobs)
        cluster = "small"
    else:
        config = SyntheticTraceConfig(
            jobs=jobs, seed=index, load=0.9, cluster_gpus=256, multi_gpu_share=0.5, max_gpus=64
        )
        cluster = "medium"
    built: Policy
    if policy.startswith("fixed:"):
        built = Dally(LookaheadDally().settings_of(policy.removeprefix("fixed:")), name=policy)
        assert policy.removeprefix("fixed:") in CANDIDATES
    else:
        # "dally-tuned?horizon_s=7200&max_jobs=150": a variant of the tuner's options.
        name, _, text = policy.partition("?")
        options = tuple(tuple(o.split("=", 1)) for o in text.split("&") if o)
        built = resolve_policy(name, options)  # type: ignore[arg-type]
    sim = simulate(
        generate(config),
        resolve_cluster(cluster),
        built,
        congestion=resolve_congestion(congestion),
        seed=index,
    )
    r = sim.result
    row: dict[str, object] = {
        "trace": index,
        "policy": policy,
        "avg_jct_s": r.avg_jct_s,
        "makespan_s": r.makespan_s,
        "sim_wall_s": r.sim_wall_s,
    }
    if policy.startswith("dally-tuned"):
        history = getattr(built, "history", [])
        row["tunings"] = len(history)
        row["switches"] = sum(1 for h in history if h.gain > 0)
        row["chosen"] = [h.chosen for h in history if h.gain > 0]
    return row


def summarise(
    runs: list[dict[str, object]], metric: str, tuned: list[str], baselines: list[str]
) -> str:
    by = {(int(r["trace"]), str(r["policy"])): r for r in runs}  # type: ignore[call-overload]
    traces = sorted({t for t, _ in by})
    fixed = fixed_policies()

    def value(t: int, p: str, key: str = metric) -> float:
        return float(by[t, p][key])  # type: ignore[arg-type]

    def best(t: int, group: list[str]) -> float:
        return min(value(t, p) for p in group)

    lines = [
        f"{len(traces)} traces; {metric} over the best other policy's ({', '.join(baselines)}) "
        "and over the best fixed Dally setting's, per trace: mean ± sd (below 1: better)",
        "",
        "| policy | / best other | / best fixed | / dally (off) | sim time / consolidate's |",
        "|---|---:|---:|---:|---:|",
    ]
    for p in ["dally", *tuned, *fixed]:
        other = [value(t, p) / best(t, baselines) for t in traces]
        hind = [value(t, p) / best(t, fixed) for t in traces]
        off = [value(t, p) / value(t, "dally") for t in traces]
        wall = [value(t, p, "sim_wall_s") / value(t, "consolidate", "sim_wall_s") for t in traces]
        lines.append(f"| {p} | {_ms(other)} | {_ms(hind)} | {_ms(off)} | {_ms(wall)} |")
    wins = {p: sum(1 for t in traces if value(t, p) == best(t, fixed)) for p in fixed}
    lines += [
        "",
        "Best fixed setting, traces won: " + ", ".join(f"{p} {n}" for p, n in wins.items()),
    ]
    return "\n".join(lines)


def _ms(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.3f} ± {sd:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=("default", "heavy"), default="default")
    parser.add_argument("--traces", type=int, default=20)
    parser.add_argument("--first", type=int, default=0, help="index of the first trace")
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--congestion", default="medium")
    parser.add_argument("--metric", default="avg_jct_s", choices=("avg_jct_s", "makespan_s"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--baselines", default=",".join(BASELINES), help="the other policies, comma-separated"
    )
    parser.add_argument(
        "--tuned",
        default="dally-tuned",
        help="tuner variants, separated by ;: dally-tuned?KEY=VALUE&KEY=VALUE",
    )
    parser.add_argument(
        "--reuse", type=Path, help="a former --json: runs of the same traces not done again"
    )
    parser.add_argument("--json", type=Path, default=REPO / "bench-results" / "dally_tuned.json")
    args = parser.parse_args()
    tuned = [v for v in args.tuned.split(";") if v]
    baselines = [b for b in args.baselines.split(",") if b]
    policies = ["dally", *tuned, *fixed_policies(), *baselines]
    runs: list[dict[str, object]] = []
    if args.reuse:
        runs = [r for r in json.loads(args.reuse.read_text()) if r["policy"] in policies]
    done = {(r["trace"], r["policy"]) for r in runs}
    tasks = [
        (args.shape, args.jobs, t, p, args.congestion)
        for t in range(args.first, args.first + args.traces)
        for p in policies
        if (t, p) not in done
    ]
    started = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        for i, row in enumerate(pool.map(run_one, tasks), 1):
            runs.append(row)
            if i % 10 == 0 or i == len(tasks):
                print(f"{i}/{len(tasks)} runs, {time.perf_counter() - started:.0f} s", flush=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(runs, indent=1))
    print(summarise(runs, args.metric, tuned, baselines))


if __name__ == "__main__":
    main()
