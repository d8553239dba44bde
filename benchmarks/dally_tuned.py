"""Dally's look-ahead tuner (the policy ``dally``, issue 39) against Dally with the tuner off
(``dally-fixed``), each fixed candidate setting (the best of them in hindsight, per trace), and
the other policies.

Traces generated like the embedded default one (its config, on the 32-GPU ``small`` cluster)
with generator seeds 1000, 1001, ... (``--shape default``; congestion medium, as ``make
demo``), or the heavy traces of ``dally_speed.py`` (``--shape heavy``). Per trace: average JCT
(``--metric``) of each run over the best other policy's (tiresias, consolidate, gandiva, fifo,
first-fit, gavel: the registered policies but the oracle srtf) and over the best fixed Dally
setting's; mean ± sd over the traces, and each run's simulation time over consolidate's.

    .venv/bin/python benchmarks/dally_tuned.py [--shape default] [--traces 20] [--jobs 400]
        [--congestion medium] [--workers 2] [--json bench-results/dally_tuned.json]
        [--tuned 'dally;dally?horizon_s=7200'] [--reuse FORMER.json]
        [--shape map --regimes 'load 0.9, multi 0.5'] [--seed-offsets 0,1000,2000]

A ``--reuse`` file saved before 2026-11-28, with the labels of then, is read with today's: the
tuner ``dally``, Dally with it off ``dally-fixed`` (:func:`relabel`).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASELINES = ("tiresias", "consolidate", "gandiva", "fifo", "first-fit", "gavel")
OFF = "dally-fixed"  # Dally with the tuner off (its default settings: fixed:default decides alike)


def relabel(row: dict[str, object]) -> dict[str, object]:
    """A run saved before 2026-11-28, given today's label: ``dally-tuned[?OPTIONS]`` (the tuner)
    is now ``dally[?OPTIONS]``, and ``dally`` (the tuner off) ``dally-fixed``. Only the tuner's
    runs have ``tunings``, so a new ``dally`` run (the tuner) is told from an old one."""
    policy = str(row["policy"])
    name, mark, options = policy.partition("?")
    if name == "dally-tuned":
        row["policy"] = f"dally{mark}{options}"
    elif policy == "dally" and "tunings" not in row:
        row["policy"] = OFF
    return row


def fixed_policies() -> list[str]:
    from unstall.sched.dally.lookahead_config import CANDIDATES

    return [f"fixed:{name}" for name in CANDIDATES]


@functools.cache
def _warm_up() -> None:
    """One small simulation per worker process, so that its one-time costs (imports, the perf
    model's tables) are not counted in the first run it times."""
    from unstall.sim import simulate
    from unstall.traces import default_trace

    simulate(default_trace(), "small", "consolidate", max_jobs=50)


def run_one(
    task: tuple[str, int, int, str, str, dict[str, object] | None, int],
) -> dict[str, object]:
    import dataclasses

    from unstall.net import resolve_cluster
    from unstall.sched import resolve_policy
    from unstall.sched.base import Policy
    from unstall.sched.dally import Dally
    from unstall.sched.dally.lookahead_config import CANDIDATES
    from unstall.sim import resolve_congestion, simulate
    from unstall.sim.lookahead import LookaheadDally
    from unstall.traces import SyntheticTraceConfig, generate, lookalike_trace_config

    shape, jobs, index, policy, congestion, cell, seed_offset = task
    if shape == "gavel":
        # Philly as Gavel's evaluation uses it: about half of the jobs multi-GPU, up to 32
        # GPUs, Philly's per-size run times, arrivals at ``load`` of the 256-GPU medium
        # cluster (above 1 it queues for days).
        config = SyntheticTraceConfig(
            jobs=jobs,
            seed=index,
            load=float(cell["load"]),  # type: ignore[index, arg-type]
            cluster_gpus=256,
            multi_gpu_share=0.5,
            max_gpus=32,
        )
        trace, cluster = generate(config), resolve_cluster("medium")
    elif shape == "map":
        from dally_regimes import Cell, cell_workload

        trace, cluster = cell_workload(Cell(**cell), index, jobs)  # type: ignore[arg-type]
    elif shape == "default":
        config = dataclasses.replace(lookalike_trace_config(index), jobs=jobs)
        trace, cluster = generate(config), resolve_cluster("small")
    else:
        config = SyntheticTraceConfig(
            jobs=jobs, seed=index, load=0.9, cluster_gpus=256, multi_gpu_share=0.5, max_gpus=64
        )
        trace, cluster = generate(config), resolve_cluster("medium")
    built: Policy
    if policy.startswith("fixed:"):
        built = Dally(LookaheadDally().settings_of(policy.removeprefix("fixed:")), name=policy)
        assert policy.removeprefix("fixed:") in CANDIDATES
    else:
        # "dally?horizon_s=7200&max_jobs=150": a variant of the tuner's options.
        name, _, text = policy.partition("?")
        options = tuple(tuple(o.split("=", 1)) for o in text.split("&") if o)
        built = resolve_policy(name, options)  # type: ignore[arg-type]
    _warm_up()
    cpu = time.process_time()
    sim = simulate(
        trace,
        cluster,
        built,
        congestion=resolve_congestion(congestion),
        # The run's seed (its congestion's course): the trace's index, moved by --seed-offsets
        # to run the same trace again under another draw.
        seed=index + seed_offset,
    )
    cpu = time.process_time() - cpu
    r = sim.result
    row: dict[str, object] = {
        "cell": cell,
        "trace": index,
        "seed_offset": seed_offset,
        "policy": policy,
        "avg_jct_s": r.avg_jct_s,
        "makespan_s": r.makespan_s,
        "sim_wall_s": r.sim_wall_s,
        # CPU time of the whole call (after a warm-up in the process): on a machine shared
        # with other work, wall time says more of the others than of the run.
        "sim_cpu_s": cpu,
        "comm_overhead_frac": r.comm_overhead_frac,
        "preemptions": r.preemptions,
        "migrations": r.migrations,
        "max_moves_per_job": r.max_moves_per_job,
    }
    if isinstance(built, LookaheadDally):
        history = built.history
        row["tunings"] = len(history)
        row["switches"] = sum(1 for h in history if h.gain > 0)
        row["chosen"] = [h.chosen for h in history if h.gain > 0]
    return row


def summarise(
    runs: list[dict[str, object]], metric: str, tuned: list[str], baselines: list[str]
) -> str:
    """Per run of a trace (a trace under one seed offset: a unit), each policy's ``metric``
    over the best other policy's, the best fixed Dally setting's and ``dally-fixed``'s; with
    several offsets, how much of the best fixed setting is the draw's (:func:`summarise_draws`)."""
    Unit = tuple[int, int]
    by = {
        ((int(r["trace"]), int(r.get("seed_offset", 0))), str(r["policy"])): r  # type: ignore[call-overload]
        for r in runs
    }
    units = sorted({u for u, _ in by})
    fixed = fixed_policies()

    def value(u: Unit, p: str, key: str = metric) -> float:
        return float(by[u, p][key])  # type: ignore[arg-type]

    def best(u: Unit, group: list[str]) -> float:
        return min(value(u, p) for p in group)

    # CPU time where the runs have it (not in files saved before 2026-11-29): wall time on a
    # shared machine says more of the other work than of the run.
    clock = "sim_cpu_s" if all("sim_cpu_s" in r for r in runs) else "sim_wall_s"
    draws = len({o for _, o in units})
    first = tuned[0] if tuned else OFF
    lines = [
        f"{len(units)} runs of {len({t for t, _ in units})} traces ({draws} draw(s) of the "
        f"congestion each); {metric} over the best other policy's ({', '.join(baselines)}) "
        "and over the best fixed Dally setting's, per run: mean ± sd (below 1: better); "
        "se: the standard error of the mean over the best fixed setting's",
        "",
        f"| policy | / best other | / best fixed | se | / {OFF} | / {first} (se) "
        f"| sim {clock} / consolidate's |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for p in [OFF, *tuned, *fixed]:
        other = [value(u, p) / best(u, baselines) for u in units]
        hind = [value(u, p) / best(u, fixed) for u in units]
        off = [value(u, p) / value(u, OFF) for u in units]
        wall = [value(u, p, clock) / value(u, "consolidate", clock) for u in units]
        # Paired with the first tuner variant's run of the same trace and draw: a variant's
        # difference from it, without the traces' own spread.
        paired = [value(u, p) / value(u, first) for u in units]
        lines.append(
            f"| {p} | {_ms(other)} | {_ms(hind)} | {_se(hind):.3f} | {_ms(off)} "
            f"| {_ms(paired)} ({_se(paired):.3f}) | {_ms(wall)} |"
        )
    wins = {p: sum(1 for u in units if value(u, p) == best(u, fixed)) for p in fixed}
    lines += [
        "",
        "Best fixed setting, runs won: " + ", ".join(f"{p} {n}" for p, n in wins.items()),
    ]
    if draws > 1:
        lines += ["", summarise_draws({u: {p: value(u, p) for p in fixed} for u in units})]
        # Against the setting best on a trace over all its draws (each policy's metric
        # averaged over the draws first): the trace's best fixed setting, less the draw's luck.
        traces = sorted({t for t, _ in units})

        def mean_over_draws(t: int, p: str) -> float:
            return statistics.fmean(value(u, p) for u in units if u[0] == t)

        lines += [
            "",
            f"{metric} averaged over each trace's draws, over the best fixed setting's so "
            "averaged (the trace's best fixed setting, less the draw's luck): mean ± sd (se)",
            "",
        ]
        for p in [OFF, *tuned, *fixed]:
            ratio = [
                mean_over_draws(t, p) / min(mean_over_draws(t, f) for f in fixed) for t in traces
            ]
            lines.append(f"- {p}: {_ms(ratio)} ({_se(ratio):.3f})")
    return "\n".join(lines)


def summarise_draws(values: dict[tuple[int, int], dict[str, float]]) -> str:
    """How much of a trace's best fixed setting is the draw's (the congestion's course, which
    the seed offset moves) rather than the trace's: how many traces have the same best setting
    under every draw, and what choosing per trace the setting best on average over its *other*
    draws would score over each draw's own best (a setting suited to the trace, not to the
    draw: what a tuner that learnt everything lasting about a trace could hope for)."""
    traces = sorted({t for t, _ in values})
    same = 0
    floor: list[float] = []
    for t in traces:
        offsets = sorted(o for tt, o in values if tt == t)
        bests = {min(values[t, o], key=values[t, o].__getitem__) for o in offsets}
        same += len(bests) == 1
        for o in offsets:
            others = [x for x in offsets if x != o]
            if not others:
                continue
            chosen = min(
                values[t, o],
                key=lambda p: statistics.fmean(
                    values[t, x][p] / min(values[t, x].values()) for x in others
                ),
            )
            floor.append(values[t, o][chosen] / min(values[t, o].values()))
    return (
        f"Draws: the best fixed setting is the same under every draw on {same} of "
        f"{len(traces)} traces; the setting best on a trace's other draws scores "
        f"{_ms(floor)} of each draw's best (se {_se(floor):.3f})"
    )


def _se(values: list[float]) -> float:
    """The standard error of the mean of ``values``."""
    return statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else 0.0


def _ms(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.3f} ± {sd:.3f}"


def summarise_gavel(runs: list[dict[str, object]], tuned: list[str]) -> str:
    """Per load and seed of the Gavel-like traces: average JCT over ``dally-fixed``'s,
    communication overhead and simulation time over consolidate's, the most moves of one job
    and the preemptions, for ``dally-fixed`` and each tuner variant."""
    by = {(float(r["cell"]["load"]), int(r["trace"]), str(r["policy"])): r for r in runs}  # type: ignore[index, call-overload, arg-type]
    lines = [
        "| load | seed | policy | avg JCT / dally-fixed | comm / consolidate | max moves "
        "| preemptions | sim CPU time / consolidate | switches |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for load, seed in sorted({(k[0], k[1]) for k in by}):
        cons, off = by[load, seed, "consolidate"], by[load, seed, OFF]
        for p in [OFF, *tuned]:
            r = by.get((load, seed, p))
            if r is None:
                continue
            jct = float(r["avg_jct_s"]) / float(off["avg_jct_s"])  # type: ignore[arg-type]
            comm = float(r["comm_overhead_frac"]) / float(cons["comm_overhead_frac"])  # type: ignore[arg-type]
            wall = float(r["sim_cpu_s"]) / float(cons["sim_cpu_s"])  # type: ignore[arg-type]
            lines.append(
                f"| {load} | {seed} | {p} | {jct:.4f} | {comm:.3f} | {r['max_moves_per_job']} "
                f"| {r['preemptions']} | {wall:.1f} | {r.get('switches', '-')} |"
            )
    return "\n".join(lines)


def cell_label(cell: dict[str, object]) -> str:
    from dally_regimes import Cell

    return Cell(**cell).label  # type: ignore[arg-type]


def summarise_map(runs: list[dict[str, object]], metric: str, tuned: list[str]) -> str:
    """Per regime of the map: each tuner variant's ``metric`` over the best fixed setting's
    (the setting best on average over the regime's seeds, chosen in hindsight: which one it is
    in the last column), over the best fixed setting per trace, over Dally's with the tuner off
    (``fixed:default``, which decides as ``dally-fixed``) and over consolidate's; mean ± sd over
    seeds; then how many regimes are within 2%."""
    fixed = fixed_policies()
    by_cell: dict[str, dict[tuple[int, str], float]] = {}
    for r in runs:
        cell = by_cell.setdefault(cell_label(r["cell"]), {})  # type: ignore[arg-type]
        cell[int(r["trace"]), str(r["policy"])] = float(r[metric])  # type: ignore[call-overload, arg-type]
    lines = [
        f"{metric} per regime, mean ± sd over seeds (below 1: the tuner better)",
        "",
        f"| regime | tuner | / best fixed (regime) | / best fixed (trace) | / {OFF} "
        "| / consolidate | best fixed (regime) |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    within = dict.fromkeys(tuned, 0)
    worst = dict.fromkeys(tuned, 0.0)
    for label, values in by_cell.items():
        seeds = sorted({t for t, _ in values})
        regime_best = min(fixed, key=lambda f: statistics.fmean(values[t, f] for t in seeds))
        for p in tuned:
            hind = [values[t, p] / values[t, regime_best] for t in seeds]
            per = [values[t, p] / min(values[t, f] for f in fixed) for t in seeds]
            off = [values[t, p] / values[t, "fixed:default"] for t in seeds]
            cons = [values[t, p] / values[t, "consolidate"] for t in seeds]
            mean = statistics.fmean(hind)
            within[p] += mean <= 1.02
            worst[p] = max(worst[p], mean)
            lines.append(
                f"| {label} | {p} | {_ms(hind)} | {_ms(per)} | {_ms(off)} | {_ms(cons)} "
                f"| {regime_best.removeprefix('fixed:')} |"
            )
    lines.append("")
    for p in tuned:
        lines.append(
            f"{p}: within 2% of the regime's best fixed setting in {within[p]} of "
            f"{len(by_cell)} regimes (worst {worst[p]:.3f})"
        )
    return "\n".join(lines)


def heat_map(runs: list[dict[str, object]], metric: str, tuner: str, out: Path) -> Path:
    """The map's cells coloured by ``tuner``'s ``metric`` over the regime's best fixed
    setting's (left) and over Dally's with the tuner off (right: ``fixed:default``, which decides
    as ``dally-fixed``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from dally_regimes import (
        CONGESTIONS,
        EFFICIENCIES,
        LOADS,
        MAX_GPUS,
        MULTI_GPU_SHARES,
        Cell,
        draw_grid,
    )

    fixed = fixed_policies()
    values: dict[tuple[Cell, int, str], float] = {}
    for r in runs:
        values[Cell(**r["cell"]), int(r["trace"]), str(r["policy"])] = float(r[metric])  # type: ignore[arg-type, call-overload]
    rows = list(itertools.product(LOADS, MULTI_GPU_SHARES))
    cols = list(itertools.product(MAX_GPUS, EFFICIENCIES, CONGESTIONS))
    fig, axes = plt.subplots(1, 2, figsize=(14, 4.2), constrained_layout=True)
    for ax, against in zip(axes, ("best fixed setting", f"{OFF} (tuner off)"), strict=True):
        grid = np.full((len(rows), len(cols)), np.nan)
        for i, (load, share) in enumerate(rows):
            for j, (max_gpus, eff, cong) in enumerate(cols):
                cell = Cell(load, share, max_gpus, eff, cong)
                seeds = sorted({t for c, t, p in values if c == cell and p == tuner})
                if not seeds:
                    continue
                if against != "best fixed setting":
                    base = "fixed:default"
                else:
                    base = min(
                        fixed, key=lambda f: statistics.fmean(values[cell, t, f] for t in seeds)
                    )
                grid[i, j] = statistics.fmean(
                    values[cell, t, tuner] / values[cell, t, base] for t in seeds
                )
        title = f"{tuner} {metric} / {against}'s (below 1: tuner better)"
        image = draw_grid(ax, grid, title, spread=0.1, digits=3)
    fig.colorbar(image, ax=axes, shrink=0.8)
    path = out.with_suffix(".png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=("default", "heavy", "map", "gavel"), default="default")
    parser.add_argument(
        "--loads",
        default="1.2,0.8",
        help="(--shape gavel) offered loads of medium, comma-separated",
    )
    parser.add_argument(
        "--traces", type=int, default=20, help="traces (with --shape map: seeds per regime)"
    )
    parser.add_argument("--first", type=int, default=0, help="index of the first trace")
    parser.add_argument(
        "--seed-offsets",
        default="0",
        help="comma-separated; each added to a run's seed (the trace's index) runs the same "
        "traces under another draw of the congestion's course (several: how much of a "
        "comparison is that draw's)",
    )
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--congestion", default="medium", help="(--shape map: each regime's)")
    parser.add_argument("--metric", default="avg_jct_s", choices=("avg_jct_s", "makespan_s"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--baselines", default=",".join(BASELINES), help="the other policies, comma-separated"
    )
    parser.add_argument(
        "--tuned",
        default="dally",
        help="tuner variants, separated by ;: dally?KEY=VALUE&KEY=VALUE",
    )
    parser.add_argument(
        "--reuse", type=Path, help="a former --json: runs of the same traces not done again"
    )
    parser.add_argument(
        "--regimes",
        help="(--shape map) run only the regimes whose label contains this text, e.g. "
        "'load 0.9, multi 0.5'",
    )
    parser.add_argument(
        "--only",
        help="run only these of the policies (separated by ; as --tuned is, or by commas when "
        "none has options; --reuse gives the others)",
    )
    parser.add_argument("--json", type=Path, default=REPO / "bench-results" / "dally_tuned.json")
    args = parser.parse_args()
    tuned = [v for v in args.tuned.split(";") if v]
    offsets = [int(o) for o in args.seed_offsets.split(",") if o]
    baselines = [b for b in args.baselines.split(",") if b]
    if args.shape == "gavel":
        policies = [OFF, *tuned, "consolidate"]
    elif args.shape == "map":
        # The map compares the tuner with fixed settings; fixed:default is Dally with the tuner
        # off (it decides as dally-fixed).
        baselines = ["consolidate"]
        policies = [*tuned, *fixed_policies(), "consolidate"]
    else:
        policies = [OFF, *tuned, *fixed_policies(), *baselines]
    runs: list[dict[str, object]] = []
    if args.reuse:
        former = [relabel(r) for r in json.loads(args.reuse.read_text())]
        # Only the runs of this command's policies, traces and draws: a file of more traces
        # (or other draws) is summarised over those asked for.
        wanted = range(args.first, args.first + args.traces)
        runs = [
            r
            for r in former
            if r["policy"] in policies
            and int(r["trace"]) in wanted  # type: ignore[call-overload]
            and r.get("seed_offset", 0) in offsets
        ]
    # A variant's options may hold commas (candidates=a,b): then the names are split on ; only.
    only_sep = ";" if ";" in (args.only or "") or "?" in (args.only or "") else ","
    only = {o for o in args.only.split(only_sep) if o} if args.only else set(policies)
    runs = [r for r in runs if r["policy"] not in only or not args.only]  # --only: run anew

    def key(cell: object, trace: object, policy: object, offset: object) -> str:
        return json.dumps([cell, trace, policy, offset], sort_keys=True)

    done = {key(r.get("cell"), r["trace"], r["policy"], r.get("seed_offset", 0)) for r in runs}
    workloads: list[tuple[dict[str, object] | None, str]] = [(None, args.congestion)]
    if args.shape == "map":
        import dataclasses

        from dally_regimes import cells

        workloads = [
            (dataclasses.asdict(c), c.congestion)
            for c in cells()
            if not args.regimes or args.regimes in c.label
        ]
    elif args.shape == "gavel":
        workloads = [({"load": float(x)}, args.congestion) for x in args.loads.split(",")]
    tasks = [
        (args.shape, args.jobs, t, p, congestion, cell, offset)
        for offset in offsets
        for cell, congestion in workloads
        for t in range(args.first, args.first + args.traces)
        for p in policies
        if p in only and key(cell, t, p, offset) not in done
    ]
    started = time.perf_counter()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(args.workers) as pool:
        for i, row in enumerate(pool.map(run_one, tasks), 1):
            runs.append(row)
            if i % 10 == 0 or i == len(tasks):
                print(f"{i}/{len(tasks)} runs, {time.perf_counter() - started:.0f} s", flush=True)
                args.json.write_text(json.dumps(runs, indent=1))  # a long map survives a stop
    args.json.write_text(json.dumps(runs, indent=1))
    if args.shape == "map":
        print(summarise_map(runs, args.metric, tuned))
        for tuner in tuned:
            name = tuner.replace("?", "_").replace("&", "_").replace("=", "-")
            out = args.json.with_name(f"{args.json.stem}_{name}")
            print(f"wrote {heat_map(runs, args.metric, tuner, out)}")
        return
    if args.shape == "gavel":
        print(summarise_gavel(runs, tuned))
        return
    print(summarise(runs, args.metric, tuned, baselines))


if __name__ == "__main__":
    main()
