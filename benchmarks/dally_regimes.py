"""Where Dally wins and where it does not: a regime map over generated traces.

Each cell is one regime: offered load x share of multi-GPU jobs x job-size tail (largest job)
x network efficiency (line rate, or the calibrated share of it) x background congestion, on the
256-GPU ``medium`` cluster. Per cell, ``--seeds`` traces (generator seed = simulator seed) are
simulated by Dally, its four variants (no delay timers, no preemption at all, no priority
preemption, autotune on) and the baselines. For each baseline, Dally's average JCT,
makespan and communication overhead are reported as ratios to the baseline's on the same
trace (below 1: Dally better), mean and standard deviation over the seeds; the variants give
each mechanism's share of the gain (how much worse, or better, Dally's JCT gets with the
mechanism switched). Dally here is ``dally-fixed``: fixed settings, without the look-ahead tuner
that the policy ``dally`` adds (``dally_tuned.py --shape map`` runs the tuner on the same map);
each variant is ``dally-fixed`` with one setting changed. ``--summarise-only`` reads a
``results.json`` saved before 2026-11-28, whose Dally is labelled ``dally``, as ``dally-fixed``.

    .venv/bin/python benchmarks/dally_regimes.py [--jobs 1500] [--seeds 3] [--workers 2]
        [--out bench-results/dally_regimes]

Writes ``results.json`` (every run), ``summary.md`` (the tables BENCHMARKS.md shows) and heat maps
``regimes_<metric>.png`` into ``--out``. Runs go to a pool of worker processes.
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

REPO = Path(__file__).resolve().parents[1]
BASELINES = ("consolidate", "tiresias", "gandiva", "fifo")
# Each variant switches one mechanism: delay, preemption (both kinds) or priority preemption
# off, autotune (the delay factor moved online; off by default) on.
ABLATIONS: dict[str, dict[str, bool]] = {
    "dally-no-delay": {"delay": False},
    "dally-no-preemption": {"preemption": False},
    "dally-no-priority-preemption": {"priority_preemption": False},
    "dally-autotune": {"autotune": True},
}
DALLY = "dally-fixed"  # Dally without the look-ahead tuner: the figures' policy
POLICIES = (DALLY, *ABLATIONS, *BASELINES)
# Labels of runs saved before 2026-11-28, when ``dally`` was Dally without the tuner (now
# ``dally-fixed``) and ``dally-tuned`` Dally with it (now ``dally``). This script never runs the
# tuner, so a ``dally`` in its saved runs is always an old label.
OLD_LABELS = {"dally": "dally-fixed", "dally-tuned": "dally"}
LOADS = (0.7, 0.9)  # below ~0.7 nothing queues on 1,500 jobs: every policy ties
MULTI_GPU_SHARES = (0.2, 0.5)
MAX_GPUS = (16, 64)  # job-size tail: up to two nodes, or up to eight
EFFICIENCIES = ("line-rate", "calibrated")
CONGESTIONS = ("low", "high")
METRICS = ("avg_jct_s", "makespan_s", "comm_overhead_frac")
# A seed where both policies' communication overhead is below this share of the run time counts
# as a tie: a ratio of near-zeros (1e-6 against 1e-7 of the run time) is noise.
NEGLIGIBLE_COMM = 0.001


@dataclasses.dataclass(frozen=True)
class Cell:
    load: float
    multi_gpu_share: float
    max_gpus: int
    efficiency: str
    congestion: str

    @property
    def label(self) -> str:
        return (
            f"load {self.load:g}, multi {self.multi_gpu_share:g}, max {self.max_gpus}, "
            f"{self.efficiency}, {self.congestion}"
        )


def cell_workload(cell: Cell, seed: int, jobs: int):  # type: ignore[no-untyped-def]
    """The trace (generator seed ``seed``) and cluster of one regime: what every policy of the
    cell runs on (``dally_tuned.py --shape map`` runs the same)."""
    from unstall.net.topology import topology_preset
    from unstall.traces import SyntheticTraceConfig, generate

    trace = generate(
        SyntheticTraceConfig(
            jobs=jobs,
            seed=seed,
            load=cell.load,
            cluster_gpus=256,
            multi_gpu_share=cell.multi_gpu_share,
            max_gpus=cell.max_gpus,
        )
    )
    cluster = topology_preset("medium")
    if cell.efficiency == "line-rate":
        cluster = dataclasses.replace(cluster, network_efficiency=1.0)
    return trace, cluster


def run_one(task: tuple[Cell, int, str, int]) -> dict[str, object]:
    from unstall.sched import Dally, DallyConfig, resolve_policy
    from unstall.sched.base import Policy
    from unstall.sim import resolve_congestion, simulate

    cell, seed, policy_name, jobs = task
    trace, cluster = cell_workload(cell, seed, jobs)
    policy: Policy
    if policy_name in ABLATIONS:
        policy = Dally(DallyConfig(**ABLATIONS[policy_name]), name=policy_name)
    else:
        policy = resolve_policy(policy_name)
    started = time.perf_counter()
    r = simulate(
        trace, cluster, policy, congestion=resolve_congestion(cell.congestion), seed=seed
    ).result
    return {
        "cell": dataclasses.asdict(cell),
        "seed": seed,
        "policy": policy_name,
        "avg_jct_s": r.avg_jct_s,
        "makespan_s": r.makespan_s,
        "comm_overhead_frac": r.comm_overhead_frac,
        "preemptions": r.preemptions,
        "migrations": r.migrations,
        "max_moves_per_job": r.max_moves_per_job,
        "wall_s": time.perf_counter() - started,
    }


def cells() -> list[Cell]:
    return [
        Cell(*values)
        for values in itertools.product(
            LOADS, MULTI_GPU_SHARES, MAX_GPUS, EFFICIENCIES, CONGESTIONS
        )
    ]


def ratios(runs: list[dict], cell: Cell, other: str, metric: str) -> list[float]:  # type: ignore[type-arg]
    """Dally's ``metric`` over ``other``'s, per seed, on this cell (communication overheads both
    below :data:`NEGLIGIBLE_COMM` count as a tie)."""
    mine = {r["seed"]: r for r in runs if r["policy"] == DALLY and Cell(**r["cell"]) == cell}
    theirs = {r["seed"]: r for r in runs if r["policy"] == other and Cell(**r["cell"]) == cell}
    out = []
    for seed, r in mine.items():
        base = float(theirs[seed][metric]) if seed in theirs else 0.0
        if metric == "comm_overhead_frac" and max(base, float(r[metric])) < NEGLIGIBLE_COMM:
            out.append(1.0)
        elif base > 0:
            out.append(float(r[metric]) / base)
    return out


def mean_sd(values: list[float]) -> str:
    if not values:
        return "-"
    sd = statistics.pstdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} ± {sd:.3f}"


def summarise(runs: list[dict], out: Path) -> str:  # type: ignore[type-arg]
    lines = []
    for metric in METRICS:
        lines.append(f"\n#### {DALLY}'s {metric} / each baseline's (mean ± sd over seeds)\n")
        lines.append("| regime | " + " | ".join(BASELINES) + f" | {DALLY}'s own (mean) |")
        lines.append("|---|" + "---:|" * (len(BASELINES) + 1))
        for cell in cells():
            row = [mean_sd(ratios(runs, cell, b, metric)) for b in BASELINES]
            own = [
                float(r[metric]) for r in runs if r["policy"] == DALLY and Cell(**r["cell"]) == cell
            ]
            scale = 3600.0 if metric.endswith("_s") else 1.0
            unit = " h" if metric.endswith("_s") else ""
            row.append(f"{statistics.mean(own) / scale:.4g}{unit}" if own else "-")
            lines.append(f"| {cell.label} | " + " | ".join(row) + " |")
        if metric == "comm_overhead_frac":
            lines.append(
                f"\nA seed where both overheads are below {NEGLIGIBLE_COMM:.1%} of the run time "
                "counts as 1 (a tie): their ratio would be one of near-zeros."
            )
    lines.append(
        "\n#### Each mechanism's part: the variant's average JCT / Dally's (delay or preemption "
        "off, autotune on)\n"
    )
    lines.append("| regime | " + " | ".join(ABLATIONS) + " |")
    lines.append("|---|" + "---:|" * len(ABLATIONS))
    for cell in cells():
        row = []
        for variant in ABLATIONS:
            inverse = ratios(runs, cell, variant, "avg_jct_s")  # dally-fixed / variant
            row.append(mean_sd([1.0 / v for v in inverse if v > 0]))
        lines.append(f"| {cell.label} | " + " | ".join(row) + " |")
    lines.append("\n#### Largest reductions by Dally, per baseline (mean over seeds) and where\n")
    lines.append("| baseline | " + " | ".join(METRICS) + " |")
    lines.append("|---|" + "---|" * len(METRICS))
    for baseline in BASELINES:
        row = []
        for metric in METRICS:
            best = min(
                cells(),
                key=lambda c: statistics.mean(ratios(runs, c, baseline, metric) or [1.0]),
            )
            value = statistics.mean(ratios(runs, best, baseline, metric) or [1.0])
            row.append(f"{100 * (1 - value):.1f}% ({best.label})")
        lines.append(f"| {baseline} | " + " | ".join(row) + " |")
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    return text


def draw_grid(ax, grid, title: str, *, spread: float, digits: int):  # type: ignore[no-untyped-def]
    """One heat map of the regime map on ``ax``: ``grid`` rows (load, multi-GPU share) by
    columns (max GPUs, efficiency, congestion), coloured from 1 - ``spread`` (green) to
    1 + ``spread`` (red), each cell's value written in it; the image, for a colour bar."""
    import numpy as np

    image = ax.imshow(grid, cmap="RdYlGn_r", vmin=1.0 - spread, vmax=1.0 + spread)
    for (i, j), value in np.ndenumerate(grid):
        ax.text(j, i, f"{value:.{digits}f}", ha="center", va="center", fontsize=7)
    cols = list(itertools.product(MAX_GPUS, EFFICIENCIES, CONGESTIONS))
    rows = list(itertools.product(LOADS, MULTI_GPU_SHARES))
    ax.set_xticks(range(len(cols)))
    ax.set_xticklabels([f"max {m}\n{e}\n{c}" for m, e, c in cols], fontsize=7)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"load {lo:g}\nmulti {s:g}" for lo, s in rows], fontsize=8)
    ax.set_title(title, fontsize=9)
    return image


def heat_maps(runs: list[dict], out: Path) -> list[Path]:  # type: ignore[type-arg]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = list(itertools.product(LOADS, MULTI_GPU_SHARES))
    cols = list(itertools.product(MAX_GPUS, EFFICIENCIES, CONGESTIONS))
    written = []
    for metric in METRICS:
        fig, axes = plt.subplots(1, 2, figsize=(14, 4.2), constrained_layout=True)
        for ax, baseline in zip(axes, ("consolidate", "best baseline"), strict=True):
            grid = np.zeros((len(rows), len(cols)))
            for i, (load, share) in enumerate(rows):
                for j, (max_gpus, eff, cong) in enumerate(cols):
                    cell = Cell(load, share, max_gpus, eff, cong)
                    if baseline == "consolidate":
                        values = ratios(runs, cell, "consolidate", metric)
                    else:  # the baseline best on this metric in this cell
                        per = [ratios(runs, cell, b, metric) for b in BASELINES]
                        values = max(per, key=lambda v: statistics.mean(v) if v else 0.0)
                    grid[i, j] = statistics.mean(values) if values else np.nan
            title = f"Dally {metric} / {baseline}'s (below 1: Dally better)"
            image = draw_grid(ax, grid, title, spread=0.5, digits=2)
        fig.colorbar(image, ax=axes, shrink=0.8)
        path = out / f"regimes_{metric}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1500)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "dally_regimes")
    parser.add_argument(
        "--summarise-only",
        action="store_true",
        help="Only write the summary and heat maps again from --out's results.json.",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.summarise_only:
        runs = json.loads((args.out / "results.json").read_text())
        for r in runs:
            r["policy"] = OLD_LABELS.get(r["policy"], r["policy"])
        print(summarise(runs, args.out))
        for path in heat_maps(runs, args.out):
            print(f"wrote {path}")
        return
    tasks = [
        (cell, seed, policy, args.jobs)
        for cell in cells()
        for seed in range(args.seeds)
        for policy in POLICIES
    ]
    runs = []
    started = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        for i, result in enumerate(pool.map(run_one, tasks), 1):
            runs.append(result)
            if i % 20 == 0 or i == len(tasks):
                print(f"{i}/{len(tasks)} runs, {time.perf_counter() - started:.0f} s", flush=True)
    (args.out / "results.json").write_text(json.dumps(runs, indent=1))
    print(summarise(runs, args.out))
    for path in heat_maps(runs, args.out):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
