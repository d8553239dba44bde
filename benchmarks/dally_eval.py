"""Dally against every baseline: the Philly trace and a synthetic trace with more multi-GPU jobs,
under congestion none, low, medium and high; plus an ablation of Dally's three mechanisms.

Dally here is ``dally-fixed``: Dally with fixed settings, without the look-ahead tuner that the
policy ``dally`` adds (``dally_tuned.py`` compares the two); each ablation variant is
``dally-fixed`` with one setting changed.

    .venv/bin/python benchmarks/dally_eval.py [--out bench-results/dally] [--workers 2]
        [--congestion none,low,medium,high] [--philly-congestion none,low,medium,high]
        [--skip-philly] [--synthetic-jobs 3000] [--only fifo,dally-fixed] [--no-ablation]
        [--skip-synthetic] [--append] [--merge dir1,dir2]

``--only`` runs just those policies/variants, ``--append`` merges into an existing results.json
(a run replaces the earlier one of the same trace, congestion and variant), so the long
baseline runs on Philly and Dally's own runs can happen at different times. Results saved
before 2026-11-28 label Dally ``dally``: ``--append`` and ``--merge`` read them as ``dally-fixed``.

Writes ``results.json`` (every run's SimResult), ``summary.md`` (the tables BENCHMARKS.md shows)
and plots into ``--out``. Runs go to a pool of worker processes, one simulation each.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PHILLY = REPO / ".." / "shared" / "data" / "traces" / "philly_jobs.csv"
PHILLY_CLUSTER = str(Path(__file__).resolve().parent / "philly_960.toml")
BASELINES = ("fifo", "first-fit", "consolidate", "srtf", "tiresias", "gandiva")
DALLY = "dally-fixed"  # Dally without the look-ahead tuner: the figures' policy
ABLATIONS = {
    DALLY: {},
    "dally-no-delay": {"delay": False},
    "dally-no-preemption": {"preemption": False},
    "dally-no-priority-preemption": {"priority_preemption": False},
    "dally-autotune": {"autotune": True},  # the tuner is off by default
    # The base order: LAS (with the plain preemption cost, no learnt requeue wait) and FIFO.
    "dally-las-order": {"order": "las", "learn_requeue": False},
    "dally-fifo-order": {"order": "fifo"},
}
PUBLISHED = {"makespan": 69.0, "avg JCT": 83.0, "comm overhead": 98.0}  # "up to" reductions, %


@dataclass(frozen=True)
class Job:
    trace: str
    cluster: str
    congestion: str
    policy: str  # a registry name or an ablation name
    synthetic_jobs: int


def load_trace(job: Job):  # type: ignore[no-untyped-def]
    from unstall.traces import SyntheticTraceConfig, generate, resolve_trace

    if job.trace == "philly":
        return resolve_trace(PHILLY, "philly-csv")
    # More multi-GPU jobs than Philly (half of them), at 90% offered load of the medium cluster.
    return generate(
        SyntheticTraceConfig(
            jobs=job.synthetic_jobs,
            seed=7,
            load=0.9,
            cluster_gpus=256,
            multi_gpu_share=0.5,
            max_gpus=64,
        )
    )


def run_one(job: Job) -> dict[str, object]:
    from unstall.net import resolve_cluster
    from unstall.sched import Dally, DallyConfig, resolve_policy
    from unstall.sim import resolve_congestion, simulate

    if job.policy in ABLATIONS:
        # Built here, not by name: each variant labels its results with its own name (Dally
        # with fixed settings, as the registry's ``dally-fixed`` builds it).
        policy = Dally(DallyConfig(**ABLATIONS[job.policy]), name=job.policy)  # type: ignore[arg-type]
    else:
        policy = resolve_policy(job.policy)
    started = time.perf_counter()
    run = simulate(
        load_trace(job),
        resolve_cluster(job.cluster),
        policy,
        congestion=resolve_congestion(job.congestion),
        seed=1,
    )
    out = run.result.to_dict()
    out.update(trace_kind=job.trace, variant=job.policy, wall_total_s=time.perf_counter() - started)
    factor = run.telemetry[run.telemetry["name"] == "dally.wait_factor"]
    out["wait_factor_over_time"] = factor[["time_s", "value"]].values.tolist()[:2000]
    gave_up = run.telemetry[run.telemetry["name"] == "dally.sensitive_spread_starts"]
    out["sensitive_spread_starts"] = float(gave_up["value"].max()) if len(gave_up) else 0.0
    return out


def plan(args: argparse.Namespace) -> list[Job]:
    jobs: list[Job] = []
    traces = [] if args.skip_synthetic else [("synthetic-multi-gpu", "medium")]
    if not args.skip_philly:
        if PHILLY.exists():
            traces.append(("philly", PHILLY_CLUSTER))  # last: its runs are the long ones
        else:
            print(f"skipping Philly: {PHILLY} is not present", file=sys.stderr)
    levels = {"philly": args.philly_congestion, "synthetic-multi-gpu": args.congestion}
    for trace, cluster in traces:
        for congestion in levels[trace].split(","):
            for policy in (*BASELINES, DALLY):
                jobs.append(Job(trace, cluster, congestion, policy, args.synthetic_jobs))
    ablation = (
        []
        if args.skip_synthetic
        else [
            Job("synthetic-multi-gpu", "medium", congestion, variant, args.synthetic_jobs)
            for congestion in ("medium", "high")
            for variant in ABLATIONS
            if variant != DALLY
        ]
    )
    # The synthetic runs and the ablation first: they are quick, Philly's are the long ones.
    quick = [j for j in jobs if j.trace != "philly"]
    # On Philly the locality-blind baselines drown in spread jobs and take many minutes: last.
    slow_last = ("consolidate", DALLY, "gandiva", "tiresias", "srtf", "fifo", "first-fit")
    philly = sorted(
        (j for j in jobs if j.trace == "philly"), key=lambda j: slow_last.index(j.policy)
    )
    ordered = quick + ([] if args.no_ablation else ablation) + philly
    if args.only:
        wanted = set(args.only.split(","))
        ordered = [j for j in ordered if j.policy in wanted]
    return ordered


# Labels of results saved before 2026-11-28, when ``dally`` was Dally without the tuner (now
# ``dally-fixed``) and ``dally-tuned`` Dally with it (now ``dally``).
OLD_LABELS = {"dally": "dally-fixed", "dally-tuned": "dally"}


def load_results(path: Path) -> list[dict[str, object]]:
    """A saved ``results.json``, old labels read as today's. This script never labels a run
    ``dally`` (its Dally is ``dally-fixed``), so a ``dally`` there is always an old label."""
    results: list[dict[str, object]] = json.loads(path.read_text())
    for r in results:
        for field in ("variant", "policy"):
            if r.get(field) in OLD_LABELS:
                r[field] = OLD_LABELS[str(r[field])]
    return results


def key(result: dict[str, object]) -> tuple[str, str, str]:
    return (str(result["trace_kind"]), str(result["congestion"]), str(result["variant"]))


def improvement(base: float, ours: float) -> float:
    return 100.0 * (base - ours) / base if base > 0 else 0.0


def summarise(results: list[dict[str, object]]) -> str:
    lines: list[str] = []
    groups: dict[tuple[str, str], list[dict[str, object]]] = {}
    for r in results:
        groups.setdefault((str(r["trace_kind"]), str(r["congestion"])), []).append(r)
    for (trace, congestion), rows in sorted(groups.items()):
        main = [r for r in rows if r["variant"] in (*BASELINES, DALLY)]
        dally = next((r for r in main if r["variant"] == DALLY), None)
        if dally is None:
            continue
        lines.append(f"\n**{trace}, congestion {congestion}**\n")
        lines.append(
            "| policy | makespan h | avg JCT h | p99 JCT h | comm overhead | "
            f"{DALLY} vs it: makespan | avg JCT | p99 JCT | comm overhead |"
        )
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in sorted(
            main, key=lambda r: BASELINES.index(r["variant"]) if r["variant"] in BASELINES else 99
        ):
            cells = [
                f"{float(r['makespan_s']) / 3600:.1f}",
                f"{float(r['avg_jct_s']) / 3600:.2f}",
                f"{float(r['p99_jct_s']) / 3600:.1f}",
                f"{float(r['comm_overhead_frac']):.3f}",
            ]
            if r is dally:
                gains = ["", "", "", ""]
            else:
                gains = [
                    f"{improvement(float(r[k]), float(dally[k])):+.0f}%"
                    for k in ("makespan_s", "avg_jct_s", "p99_jct_s", "comm_overhead_s")
                ]
            lines.append(f"| {r['variant']} | " + " | ".join(cells + gains) + " |")
        ablation = [r for r in rows if r["variant"] in ABLATIONS]
        if len(ablation) > 1:
            lines.append("\nAblation:\n")
            lines.append(
                "| variant | makespan h | avg JCT h | p99 JCT h | comm overhead | preemptions "
                "| migrations | sensitive jobs started spread |"
            )
            lines.append("|---|---:|---:|---:|---:|---:|---:|---:|")
            for r in sorted(ablation, key=lambda r: list(ABLATIONS).index(str(r["variant"]))):
                lines.append(
                    f"| {r['variant']} | {float(r['makespan_s']) / 3600:.1f} | "
                    f"{float(r['avg_jct_s']) / 3600:.2f} | {float(r['p99_jct_s']) / 3600:.1f} | "
                    f"{float(r['comm_overhead_frac']):.3f} | {r['preemptions']} | "
                    f"{r['migrations']} | {float(r.get('sensitive_spread_starts', 0.0)):.0f} |"
                )
    return "\n".join(lines) + "\n"


def plot(results: list[dict[str, object]], out: Path) -> None:
    from unstall.report.plotting import new_figure, save

    for trace in sorted({str(r["trace_kind"]) for r in results}):
        rows = [
            r for r in results if r["trace_kind"] == trace and r["variant"] in (*BASELINES, DALLY)
        ]
        congestions = [
            c for c in ("none", "low", "medium", "high") if any(r["congestion"] == c for r in rows)
        ]
        for metric, label in (
            ("avg_jct_s", "average JCT (h)"),
            ("comm_overhead_frac", "communication overhead"),
        ):
            fig, ax = new_figure(8, 4)
            width = 0.8 / (len(BASELINES) + 1)
            for i, policy in enumerate((*BASELINES, DALLY)):
                ys = []
                for c in congestions:
                    r = next(
                        (r for r in rows if r["congestion"] == c and r["variant"] == policy), None
                    )
                    v = float(r[metric]) if r else float("nan")
                    ys.append(v / 3600 if metric.endswith("_s") else v)
                ax.bar([j + i * width for j in range(len(congestions))], ys, width, label=policy)
            ax.set_xticks([j + 0.4 - width / 2 for j in range(len(congestions))], congestions)
            ax.set_xlabel("background congestion")
            ax.set_ylabel(label)
            ax.set_yscale("log" if metric.endswith("_s") else "linear")
            ax.set_title(trace)
            ax.legend(fontsize=7, ncol=2)
            save(fig, out / f"{trace}_{metric}.png")
    tuned = [r for r in results if r["variant"] == DALLY and r.get("wait_factor_over_time")]
    if tuned:
        fig, ax = new_figure()
        for r in tuned:
            pts = r["wait_factor_over_time"]
            assert isinstance(pts, list)
            ax.step(
                [p[0] / 3600 for p in pts],
                [p[1] for p in pts],
                where="post",
                label=f"{r['trace_kind']}, {r['congestion']}",
            )
        ax.set_xlabel("time (hours)")
        ax.set_ylabel("delay timer factor (auto-tuned)")
        ax.set_yscale("log")
        ax.legend(fontsize=7)
        save(fig, out / "dally_timer_factor.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "dally")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--congestion", default="none,low,medium,high")
    parser.add_argument(
        "--philly-congestion",
        default="none,low,medium,high",
        help="congestion levels for the (long) Philly runs",
    )
    parser.add_argument("--skip-philly", action="store_true")
    parser.add_argument("--synthetic-jobs", type=int, default=3000)
    parser.add_argument("--only", default="", help="comma-separated policies/variants to run")
    parser.add_argument("--no-ablation", action="store_true")
    parser.add_argument("--skip-synthetic", action="store_true")
    parser.add_argument("--append", action="store_true", help="merge into results.json")
    parser.add_argument(
        "--merge",
        default="",
        help="comma-separated result folders to merge into --out (later ones win); runs nothing",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.merge:
        merged: dict[tuple[str, str, str], dict[str, object]] = {}
        for folder in args.merge.split(","):
            for r in load_results(Path(folder) / "results.json"):
                merged[key(r)] = r
        write_outputs(list(merged.values()), args.out)
        return
    jobs = plan(args)
    results: list[dict[str, object]] = []
    if args.append and (args.out / "results.json").exists():
        results = load_results(args.out / "results.json")
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        for i, result in enumerate(pool.map(run_one, jobs), start=1):
            # Re-read before merging: another invocation may be appending to the same file.
            if args.append and (args.out / "results.json").exists():
                results = load_results(args.out / "results.json")
            results = [r for r in results if key(r) != key(result)] + [result]
            # Saved after every run, so a long evaluation cut short keeps what it has.
            (args.out / "results.json").write_text(json.dumps(results, indent=1))
            (args.out / "summary.md").write_text(summarise(results))
            print(
                f"[{i}/{len(jobs)}] {result['trace_kind']} {result['congestion']} "
                f"{result['variant']}: avg JCT {float(result['avg_jct_s']) / 3600:.2f} h, "
                f"comm {float(result['comm_overhead_frac']):.3f}, "
                f"{float(result['wall_total_s']):.0f} s",
                flush=True,
            )
    write_outputs(results, args.out)


def write_outputs(results: list[dict[str, object]], out: Path) -> None:
    (out / "results.json").write_text(json.dumps(results, indent=1))
    summary = summarise(results) + versus_published(results)
    (out / "summary.md").write_text(summary)
    plot(results, out)
    print(summary)
    print(f"wrote {out}")


CONSOLIDATING = ("consolidate", "gandiva")  # the consolidation-based baselines


def versus_published(results: list[dict[str, object]]) -> str:
    """Dally's best reduction against the consolidation-based baselines, beside the published
    "up to" figures (negative: Dally worse than the best of them)."""
    lines = [
        "\n**Dally vs the consolidation-based baselines (consolidate, gandiva), beside the "
        'published "up to" figures**\n',
        "| trace | congestion | makespan (vs best / vs worst of them) | avg JCT | comm overhead |",
        "|---|---|---:|---:|---:|",
    ]
    metrics = ("makespan_s", "avg_jct_s", "comm_overhead_s")
    by_key = {key(r): r for r in results}
    for trace in sorted({str(r["trace_kind"]) for r in results}):
        for congestion in ("none", "low", "medium", "high"):
            dally = by_key.get((trace, congestion, DALLY))
            bases = [by_key.get((trace, congestion, b)) for b in CONSOLIDATING]
            if dally is None or any(b is None for b in bases):
                continue
            cells = []
            for m in metrics:
                gains = [improvement(float(b[m]), float(dally[m])) for b in bases if b]
                cells.append(f"{min(gains):+.1f}% / {max(gains):+.1f}%")
            lines.append(f"| {trace} | {congestion} | " + " | ".join(cells) + " |")
    published = " | ".join(f"up to +{v:.0f}%" for v in PUBLISHED.values())
    lines.append(f"| published (Dally paper) | | {published} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
