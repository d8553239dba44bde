"""Heterogeneous clusters: Gavel, Dally and the baselines on mixed V100/K80 clusters.

Dally here is ``dally-fixed``: Dally with fixed settings, without the look-ahead tuner that the
policy ``dally`` adds (``--policies`` takes ``dally`` too).

Each cluster holds ``--gpus`` GPUs (64) in two node groups, each its own rack behind a 25 Gbit/s
NIC per node and a 2:1 oversubscribed uplink: nodes of 8 V100s and nodes of 4 K80s, the V100s being
25%, 50% or 75% of the GPUs (``--fast-shares``). ``--shapes`` names other mixed clusters, each
``v{V}k{K}-{racks}[-{gpus}]``: V100 nodes of ``V`` GPUs, K80 nodes of ``K``, ``split`` (the V100
nodes in one rack, the K80 nodes in another: the default ``v8k4-split``) or ``shared`` (two racks,
each with half of each type's nodes), and ``gpus`` GPUs in all (else ``--gpus``). A shape whose
smaller type has fewer GPUs than ``--max-gpus`` caps its jobs at that type's GPUs, so that every
job still fits on each type. Traces are generated (Philly's arrival pattern and
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


DEFAULT_SHAPE = "v8k4-split"
RACKS = ("split", "shared")


@dataclasses.dataclass(frozen=True)
class Shape:
    """A mixed cluster: V100 nodes of ``v100_node`` GPUs, K80 nodes of ``k80_node``, the types
    in racks of their own (``split``) or both in each of two racks (``shared``), ``gpus`` in
    all (0: ``--gpus``)."""

    v100_node: int = 8
    k80_node: int = 4
    racks: str = "split"
    gpus: int = 0

    @classmethod
    def parse(cls, text: str) -> Shape:
        parts = text.strip().split("-")
        if len(parts) not in (2, 3) or not parts[0].startswith("v") or "k" not in parts[0]:
            raise SystemExit(f"--shapes: {text!r} is not v{{V}}k{{K}}-{{split|shared}}[-{{gpus}}]")
        v100, k80 = parts[0][1:].split("k")
        if parts[1] not in RACKS:
            raise SystemExit(f"--shapes: {text!r}: racks must be one of {RACKS}")
        return cls(int(v100), int(k80), parts[1], int(parts[2]) if len(parts) == 3 else 0)

    @property
    def label(self) -> str:
        sized = f"-{self.gpus}" if self.gpus else ""
        return f"v{self.v100_node}k{self.k80_node}-{self.racks}{sized}"


@dataclasses.dataclass(frozen=True)
class Cell:
    fast_share: float
    congestion: str
    shape: str = DEFAULT_SHAPE

    @property
    def label(self) -> str:
        return f"{self.shape}, {self.fast_share:.0%} V100, congestion {self.congestion}"


def node_counts(shape: Shape, gpus: int, fast_share: float) -> tuple[int, int]:
    """V100 and K80 nodes of ``shape`` for ``gpus`` GPUs, ``fast_share`` of them V100s (at
    least one node of each type)."""
    v100_nodes = max(1, round(gpus * fast_share / shape.v100_node))
    k80_nodes = max(1, (gpus - shape.v100_node * v100_nodes) // shape.k80_node)
    return v100_nodes, k80_nodes


def cluster_toml(gpus: int, fast_share: float, shape: Shape | None = None) -> str:
    """Node groups of V100s and of K80s (``shape``; default: nodes of 8 V100s in one rack,
    nodes of 4 K80s in another), ``fast_share`` of the GPUs V100s."""
    shape = shape or Shape()
    v100_nodes, k80_nodes = node_counts(shape, gpus, fast_share)
    header = f'name = "v100-{fast_share:.0%}"\nnic = "25g"\noversubscription = 2.0\n'

    def group(count: int, size: int, device: str, rack: int) -> str:
        if count == 0:
            return ""
        return (
            f'[[nodes]]\ncount = {count}\ngpus_per_node = {size}\ndevice = "{device}"\n'
            f"rack = {rack}\n"
        )

    if shape.racks == "split":
        return (
            header
            + group(v100_nodes, shape.v100_node, "v100", 0)
            + group(k80_nodes, shape.k80_node, "k80", 1)
        )
    # Two racks, each with half of each type's nodes (the first rack the larger half).
    groups = []
    for rack in (0, 1):
        v_here = (v100_nodes + 1 - rack) // 2
        k_here = (k80_nodes + 1 - rack) // 2
        groups.append(group(v_here, shape.v100_node, "v100", rack))
        groups.append(group(k_here, shape.k80_node, "k80", rack))
    return header + "".join(groups)


def run_one(task: tuple[Cell, int, str, argparse.Namespace]) -> dict[str, object]:
    import tempfile

    from unstall.net import load_topology
    from unstall.sched import Policy, make_policy
    from unstall.sched.gavel import Gavel, GavelConfig
    from unstall.sim import resolve_congestion, simulate
    from unstall.traces import SyntheticTraceConfig, generate

    cell, seed, policy, args = task
    shape = Shape.parse(cell.shape)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cluster.toml"
        path.write_text(cluster_toml(shape.gpus or args.gpus, cell.fast_share, shape))
        cluster = load_topology(path)
    v100 = sum(
        g for g, d in zip(cluster.node_gpus, cluster.node_device, strict=True) if d == "v100"
    )
    equivalent = v100 + K80_EQUIVALENT * (cluster.n_gpus - v100)
    # Every job fits on each type (the smaller type's GPUs cap the jobs' sizes).
    max_gpus = min(args.max_gpus, v100, cluster.n_gpus - v100)
    trace = generate(
        SyntheticTraceConfig(
            jobs=args.jobs,
            seed=seed,
            load=args.load,
            cluster_gpus=max(1, round(equivalent)),
            max_gpus=max_gpus,
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
    run = simulate(
        trace, cluster, chosen, congestion=resolve_congestion(cell.congestion), seed=seed
    )
    r = run.result
    held = r.gpu_s_by_type
    total = sum(held.values())
    jobs = run.jobs[run.jobs["finished"]]
    return {
        "cell": dataclasses.asdict(cell),
        "seed": seed,
        "policy": policy,
        "jobs": r.jobs,
        "jobs_finished": r.jobs_finished,
        "avg_jct_s": r.avg_jct_s,
        "makespan_s": r.makespan_s,
        "v100_share": held.get("v100", 0.0) / total if total else 0.0,
        "preemptions": r.preemptions,
        "migrations": r.migrations,
        "max_moves_per_job": r.max_moves_per_job,
        "comm_overhead_frac": r.comm_overhead_frac,
        "avg_queue_s": r.avg_queue_s,
        # Per-job figures: the wait before a job first ran, and the share of jobs last on K80s.
        "avg_first_wait_s": float((jobs["first_start_s"] - jobs["submit_s"]).mean()),
        "k80_job_share": float((jobs["gpu_type"] == "k80").mean()) if len(jobs) else 0.0,
        "max_gpus": max_gpus,
        "wall_s": time.perf_counter() - started,
    }


def mean_sd(values: list[float], scale: float = 1.0) -> str:
    if not values:
        return "-"
    sd = statistics.pstdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values) / scale:.2f} ± {sd / scale:.2f}"


def cluster_label(cell: Cell) -> str:
    share = f"{cell.fast_share:.0%} V100"
    return share if cell.shape == DEFAULT_SHAPE else f"{cell.shape} {share}"


def unfinished(run: dict[str, Any], here: list[dict[str, Any]]) -> int:
    """Jobs of ``run``'s trace it left unfinished (a run of an older file without its job
    count: against the most any run of its seed finished)."""
    jobs = run.get("jobs") or max(int(r["jobs_finished"]) for r in here if r["seed"] == run["seed"])
    return int(jobs) - int(run["jobs_finished"])


def best_by_seed(here: list[dict[str, Any]], others_only: bool = False) -> dict[int, Any]:
    """Each seed's best run, the least average JCT among the runs that finished every job (with
    ``others_only``, not Dally's: ``dally`` and ``dally-fixed`` are not "other" policies to each
    other): ``consolidate`` never starts a job it cannot place consolidated on one type, and an
    average over the jobs it did finish leaves out the largest (its JCT would look best exactly
    where it failed most)."""
    best: dict[int, Any] = {}
    for r in here:
        if others_only and str(r["policy"]).startswith("dally"):
            continue
        seed = int(r["seed"])
        if unfinished(r, here) == 0 and (
            seed not in best or float(r["avg_jct_s"]) < float(best[seed]["avg_jct_s"])
        ):
            best[seed] = r
    return best


def summary(runs: list[dict[str, Any]], cells: list[Cell], policies: tuple[str, ...]) -> str:
    lines = [
        "| cluster | congestion | policy | avg JCT (h) | makespan (h) | V100 share of GPU time "
        "| preemptions | avg JCT / best | wait before first run (h) | comm overhead "
        "| most moves of a job | unfinished jobs |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for cell in cells:
        here = [r for r in runs if Cell(**r["cell"]) == cell]
        best = {seed: float(r["avg_jct_s"]) for seed, r in best_by_seed(here).items()}
        for policy in policies:
            mine = [r for r in here if r["policy"] == policy]
            rel = [
                float(r["avg_jct_s"]) / best[r["seed"]]
                for r in mine
                if best.get(r["seed"], 0) > 0 and unfinished(r, here) == 0
            ]
            lines.append(
                f"| {cluster_label(cell)} | {cell.congestion} | {policy} "
                f"| {mean_sd([float(r['avg_jct_s']) for r in mine], 3600.0)} "
                f"| {mean_sd([float(r['makespan_s']) for r in mine], 3600.0)} "
                f"| {mean_sd([float(r['v100_share']) for r in mine])} "
                f"| {statistics.mean([float(r['preemptions']) for r in mine]):.0f} "
                f"| {mean_sd(rel)} "
                f"| {mean_sd([float(r['avg_first_wait_s']) for r in mine], 3600.0)} "
                f"| {statistics.mean([float(r['comm_overhead_frac']) for r in mine]):.1%} "
                f"| {max(int(r['max_moves_per_job']) for r in mine)} "
                f"| {statistics.mean([unfinished(r, here) for r in mine]):.1f} |"
            )
    return "\n".join(lines) + "\n"


def lead_table(runs: list[dict[str, Any]], cells: list[Cell], dally: str) -> str:
    """``dally``'s average JCT over the best other policy's on each seed of each cell (the
    goal: at most 1.0 on average over the seeds, at most 1.05 on each), and who that was."""
    lines = [
        f"| cluster | congestion | {dally} / best other: mean | worst seed | per seed "
        "| best other (seeds; runs that finished every job) |",
        "|---|---|---|---|---|---|",
    ]
    for cell in cells:
        here = [r for r in runs if Cell(**r["cell"]) == cell]
        best = best_by_seed(here, others_only=True)
        mine = sorted(
            (
                r
                for r in here
                if r["policy"] == dally and int(r["seed"]) in best and unfinished(r, here) == 0
            ),
            key=lambda r: int(r["seed"]),
        )
        if not mine:
            continue
        rel = [float(r["avg_jct_s"]) / float(best[int(r["seed"])]["avg_jct_s"]) for r in mine]
        winners: dict[str, int] = {}
        for r in best.values():
            winners[r["policy"]] = winners.get(r["policy"], 0) + 1
        lines.append(
            f"| {cluster_label(cell)} | {cell.congestion} | {statistics.mean(rel):.3f} "
            f"| {max(rel):.3f} | {' '.join(f'{x:.2f}' for x in rel)} "
            f"| {', '.join(f'{p} {n}' for p, n in sorted(winners.items()))} |"
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
    parser.add_argument(
        "--shapes",
        default=DEFAULT_SHAPE,
        help="mixed clusters, comma-separated: v{V}k{K}-{split|shared}[-{gpus}]",
    )
    parser.add_argument("--congestion", default="low,high")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "hetero_eval")
    args = parser.parse_args()
    policies = tuple(args.policies.split(","))
    shapes = [Shape.parse(text).label for text in args.shapes.split(",")]
    cells = [
        Cell(float(share), level, shape)
        for shape, share, level in itertools.product(
            shapes, args.fast_shares.split(","), args.congestion.split(",")
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
    dally = next((p for p in ("dally", "dally-fixed") if p in policies), None)
    if dally is not None and len(policies) > 1:
        table += "\n" + lead_table(runs, cells, dally)
    (args.out / "summary.md").write_text(table)
    print(table)
    print(f"{len(runs)} runs in {wall:.0f} s with {args.workers} workers")


if __name__ == "__main__":
    main()
