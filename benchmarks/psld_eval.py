"""PSLD evaluation: every scenario x strategy (x model), throughput, speed-ups of psld over the
baselines, ratio to oracle, and a plot of the dynamic scenario's iteration time and servers.

    .venv/bin/python benchmarks/psld_eval.py --iterations 30 --json psld_eval.json \
        --plot benchmarks/psld_dynamic.png

"settled" is the mean iteration time (with its boundary pause) over the run's second half.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from unstall.ps.coordinator import ActorPool, ensure_ray
from unstall.ps.train import PSConfig, PSRunResult, run_training

BASELINES = ("mxnet", "byteps", "tf-greedy")


def settled_s(r: PSRunResult) -> float:
    tail = r.telemetry[len(r.telemetry) // 2 :]
    return sum(t.iter_s + t.boundary_s for t in tail) / len(tail)


def plot_dynamic(r: PSRunResult, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 3.5))
    its = [t.iteration for t in r.telemetry]
    ax.plot(
        its,
        [t.iter_s + t.boundary_s for t in r.telemetry],
        color="black",
        label="iteration + pause (s)",
    )
    ax.set_xlabel("iteration")
    ax.set_ylabel("seconds")
    ax2 = ax.twinx()
    ax2.step(its, r.servers_over_time, where="post", color="tab:blue", label="servers")
    ax2.set_ylabel("servers")
    ax2.set_ylim(0, max(r.servers_over_time) + 1)
    fig.legend(loc="upper right")
    ax.set_title(f"psld on {r.scenario}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--scenarios", default="none,bandwidth,interference,imbalance,dynamic,mixed")
    p.add_argument("--strategies", default="psld,mxnet,byteps,tf-greedy,oracle")
    p.add_argument("--models", default="", help="comma-separated zoo models (default: presets')")
    p.add_argument("--iterations", type=int, default=30)
    p.add_argument("--spares", type=int, default=1)
    p.add_argument("--json", type=Path)
    p.add_argument("--plot", type=Path)
    a = p.parse_args()
    ensure_ray(None, num_cpus=3)
    pool = ActorPool()
    rows = []
    models = [m for m in a.models.split(",") if m] or [None]
    try:
        for model in models:
            for scenario in a.scenarios.split(","):
                runs = {}
                for strategy in a.strategies.split(","):
                    config = PSConfig(
                        model=model,
                        scenario=scenario,
                        strategy=strategy,
                        iterations=a.iterations,
                        spares=a.spares,
                    )
                    runs[strategy] = r = run_training(config, pool=pool)
                    print(
                        f"{scenario:12s} {strategy:10s} {r.throughput_it_s:6.2f} it/s "
                        f"settled {settled_s(r):.3f} s servers {r.servers_over_time[-1]}",
                        flush=True,
                    )
                    if scenario == "dynamic" and strategy == "psld" and a.plot:
                        plot_dynamic(r, a.plot)
                for strategy, r in runs.items():
                    row = {
                        "model": r.model,
                        "scenario": scenario,
                        "strategy": strategy,
                        "throughput_it_s": r.throughput_it_s,
                        "settled_s": settled_s(r),
                        "migrations": r.migrations,
                        "scale_outs": r.scale_outs,
                        "scale_ins": r.scale_ins,
                        "max_pause_s": r.max_pause_s,
                        "iter_s": [t.iter_s + t.boundary_s for t in r.telemetry],
                        "servers_over_time": list(r.servers_over_time),
                    }
                    if "oracle" in runs:
                        row["ratio_to_oracle"] = r.throughput_it_s / runs["oracle"].throughput_it_s
                        row["settled_ratio_to_oracle"] = settled_s(runs["oracle"]) / settled_s(r)
                    if strategy == "psld":
                        for b in BASELINES:
                            if b in runs:
                                row[f"speedup_over_{b}"] = (
                                    r.throughput_it_s / runs[b].throughput_it_s
                                )
                    rows.append(row)
    finally:
        pool.close()
    for row in rows:
        if row["strategy"] == "psld":
            keys = [k for k in row if k.startswith(("speedup", "ratio", "settled_ratio"))]
            print(row["scenario"], {k: round(row[k], 2) for k in keys})
    if a.json:
        a.json.write_text(
            json.dumps(
                {"args": vars(a) | {"json": str(a.json), "plot": str(a.plot)}, "rows": rows},
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
