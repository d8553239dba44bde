"""Heterogeneous clusters: Gavel, Dally and the baselines on mixed V100/K80 clusters.

Dally here is ``dally-fixed``: Dally with fixed settings, without the look-ahead tuner that the
policy ``dally`` adds (``--policies`` takes ``dally`` too).

Each cluster holds ``--gpus`` GPUs (64) in two node groups, each its own rack behind a 25 Gbit/s
NIC per node and a 2:1 oversubscribed uplink: nodes of 8 V100s and nodes of 4 K80s, the V100s being
25%, 50% or 75% of the GPUs (``--fast-shares``). Traces are generated (Philly's arrival pattern and
per-size durations; half of the jobs multi-GPU, up to ``--max-gpus`` = 16 so that every job fits on
each type; durations capped at ``--max-duration-h`` = 24 h) with an offered load of ``--load``
(0.8) of the cluster's V100-equivalent capacity (V100s plus K80s at 0.2 of a V100, about their
measured speed on the zoo's families) and their durations declared as V100 run times (the default
duration GPU). ``gavel-blind`` is Gavel with every type counted as equally fast
(``type_aware=False``: its heterogeneity-agnostic LAS), which separates what Gavel gains from
knowing the speeds from what it gains from time-sharing in rounds.

Per cluster, background congestion level (``--congestion``) and seed (trace seed = simulator seed),
every policy runs the same trace; the table gives the mean and standard deviation over the seeds of
the average JCT and the makespan, of each policy's average JCT over the best one's on the same
trace, and of the share of GPU time each policy gave the V100s.

    .venv/bin/python benchmarks/hetero_eval.py [--jobs 200] [--seeds 3] [--workers 2]
        [--out bench-results/hetero_eval]

Writes ``results.json`` (every run) and ``summary.md`` (the table BENCHMARKS.md shows) into
``--out``. Runs go to a pool of worker processes.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
POLICIES = ("dally-fixed", "gavel", "gavel-blind", "consolidate", "tiresias", "fifo")
K80_EQUIVALENT = 0.2  # a K80 GPU's work in V100s, roughly (relative_speed("k80", family))


@dataclasses.dataclass(frozen=True)
class Cell:
    fast_share: float
    congestion: str

    @property
    def label(self) -> str:
        return f"{self.fast_share:.0%} V100, congestion {self.congestion}"


def cluster_toml(gpus: int, fast_share: float) -> str:
    """Node groups of 8 V100s and of 4 K80s, ``fast_share`` of the GPUs V100s."""
    v100_nodes = round(gpus * fast_share / 8)
    k80_nodes = (gpus - 8 * v100_nodes) // 4
    return (
        f'name = "v100-{fast_share:.0%}"\nnic = "25g"\noversubscription = 2.0\n'
        f'[[nodes]]\ncount = {v100_nodes}\ngpus_per_node = 8\ndevice = "v100"\nrack = 0\n'
        f'[[nodes]]\ncount = {k80_nodes}\ngpus_per_node = 4\ndevice = "k80"\nrack = 1\n'
    )


def run_one(task: tuple[Cell, int, str, argparse.Namespace]) -> dict[str, object]:
    import tempfile

    from unstall.net import load_topology
    from unstall.sched import Policy, make_policy
    from unstall.sched.gavel import Gavel, GavelConfig
    from unstall.sim import resolve_congestion, simulate
    from unstall.traces import SyntheticTraceConfig, generate

    cell, seed, policy, args = task
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cluster.toml"
        path.write_text(cluster_toml(args.gpus, cell.fast_share))
        cluster = load_topology(path)
    v100 = sum(
        g for g, d in zip(cluster.node_gpus, cluster.node_device, strict=True) if d == "v100"
    )
    equivalent = v100 + K80_EQUIVALENT * (cluster.n_gpus - v100)
    trace = generate(
        SyntheticTraceConfig(
            jobs=args.jobs,
            seed=seed,
            load=args.load,
            cluster_gpus=max(1, round(equivalent)),
            max_gpus=args.max_gpus,
            multi_gpu_share=args.multi_gpu_share,
            max_duration_s=args.max_duration_h * 3600.0,
        )
    )
    chosen: Policy = (
        Gavel(GavelConfig(type_aware=False), name=policy)
        if policy == "gavel-blind"
        else make_policy(policy)
    )
    started = time.perf_counter()
    r = simulate(
        trace, cluster, chosen, congestion=resolve_congestion(cell.congestion), seed=seed
    ).result
    held = r.gpu_s_by_type
    total = sum(held.values())
    return {
        "cell": dataclasses.asdict(cell),
        "seed": seed,
        "policy": policy,
        "jobs_finished": r.jobs_finished,
        "avg_jct_s": r.avg_jct_s,
        "makespan_s": r.makespan_s,
        "v100_share": held.get("v100", 0.0) / total if total else 0.0,
        "preemptions": r.preemptions,
        "migrations": r.migrations,
        "wall_s": time.perf_counter() - started,
    }


def mean_sd(values: list[float], scale: float = 1.0) -> str:
    if not values:
        return "-"
    sd = statistics.pstdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values) / scale:.2f} ± {sd / scale:.2f}"


def summary(runs: list[dict[str, Any]], cells: list[Cell], policies: tuple[str, ...]) -> str:
    lines = [
        "| cluster | congestion | policy | avg JCT (h) | makespan (h) | V100 share of GPU time "
        "| preemptions | avg JCT / best |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for cell in cells:
        here = [r for r in runs if Cell(**r["cell"]) == cell]
        best = {}
        for seed in {r["seed"] for r in here}:
            best[seed] = min(float(r["avg_jct_s"]) for r in here if r["seed"] == seed)
        for policy in policies:
            mine = [r for r in here if r["policy"] == policy]
            rel = [float(r["avg_jct_s"]) / best[r["seed"]] for r in mine if best[r["seed"]] > 0]
            lines.append(
                f"| {cell.fast_share:.0%} V100 | {cell.congestion} | {policy} "
                f"| {mean_sd([float(r['avg_jct_s']) for r in mine], 3600.0)} "
                f"| {mean_sd([float(r['makespan_s']) for r in mine], 3600.0)} "
                f"| {mean_sd([float(r['v100_share']) for r in mine])} "
                f"| {statistics.mean([float(r['preemptions']) for r in mine]):.0f} "
                f"| {mean_sd(rel)} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--load", type=float, default=0.8)
    parser.add_argument("--max-gpus", type=int, default=16)
    parser.add_argument("--multi-gpu-share", type=float, default=0.5)
    parser.add_argument("--max-duration-h", type=float, default=24.0)
    parser.add_argument("--fast-shares", default="0.25,0.5,0.75")
    parser.add_argument("--congestion", default="low,high")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "hetero_eval")
    args = parser.parse_args()
    policies = tuple(args.policies.split(","))
    cells = [
        Cell(float(share), level)
        for share, level in itertools.product(
            args.fast_shares.split(","), args.congestion.split(",")
        )
    ]
    tasks = [
        (cell, seed, policy, args)
        for cell in cells
        for seed in range(args.seeds)
        for policy in policies
    ]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        runs = list(pool.map(run_one, tasks))
    wall = time.perf_counter() - started
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(runs, indent=1, default=str))
    table = summary(runs, cells, policies)
    (args.out / "summary.md").write_text(table)
    print(table)
    print(f"{len(runs)} runs in {wall:.0f} s with {args.workers} workers")


if __name__ == "__main__":
    main()
