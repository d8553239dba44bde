"""PSLD evaluation: every scenario x strategy (x model), throughput, speed-ups of psld over the
baselines, ratio to oracle, and a plot of the dynamic scenario's iteration time and servers.

    .venv/bin/python benchmarks/psld_eval.py --iterations 30 --json psld_eval.json \
        --plot benchmarks/psld_dynamic.png

"settled" is the mean iteration time (with its boundary pause) over the run's second half.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from unstall.ps.coordinator import ActorPool, ensure_ray
from unstall.ps.train import PSConfig, PSRunResult, run_training

BASELINES = ("mxnet", "byteps", "tf-greedy")
MAX_SERVERS = 4  # the presets' server count
# Models besides the scenarios' own MLPs (3.7 MB, or 4.5 MB with one 4.2 MB tensor): many small
# tensors, and two sequence models of a few MB (the zoo's defaults are 33-53 MB, minutes a run
# on these 25 MB/s links).
MODELS: dict[str, tuple[str | None, dict[str, object]]] = {
    "preset": (None, {}),
    "mlp-deep": ("mlp", {"in_features": 256, "width": 256, "depth": 16}),
    "transformer": ("transformer", {"d_model": 128, "layers": 4, "ff": 512, "vocab": 2000}),
    "lstm": ("lstm_lm", {"embed_dim": 256, "hidden": 256, "vocab": 2000}),
}


def settled_s(r: PSRunResult) -> float:
    tail = r.telemetry[len(r.telemetry) // 2 :]
    return sum(t.iter_s + t.boundary_s for t in tail) / len(tail)


def recovery_iterations(r: PSRunResult, tolerance: float = 0.10) -> list[int]:
    """Per change of the dynamic scenario (at 1/3 and 2/3 of the run): iterations until the
    iteration time is within ``tolerance`` of the new phase's optimum, taken as the best 3-run
    median of the phase's iterations."""
    n = len(r.telemetry)
    times = [t.iter_s + t.boundary_s for t in r.telemetry]
    cuts = [n // 3, 2 * n // 3, n]
    out = []
    for start, stop in itertools.pairwise(cuts):
        phase = times[start:stop]
        best = min(sorted(phase[i : i + 3])[1] for i in range(len(phase) - 2))
        k = next((i for i, t in enumerate(phase) if t <= (1 + tolerance) * best), len(phase))
        out.append(k)
    return out


def plot_dynamic(r: PSRunResult, path: Path, others: dict[str, PSRunResult]) -> None:
    fig, ax = plt.subplots(figsize=(7, 3.5))
    its = [t.iteration for t in r.telemetry]
    for name, other in others.items():
        times = [t.iter_s + t.boundary_s for t in other.telemetry]
        ax.plot(its, times, linewidth=0.8, alpha=0.7, label=f"{name} (s)")
    ax.plot(
        its,
        [t.iter_s + t.boundary_s for t in r.telemetry],
        color="black",
        label="psld iteration + pause (s)",
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


def markdown(rows: list[dict[str, object]]) -> str:
    """One table row per (model, scenario): throughput of each strategy, then psld's speed-ups,
    its settled time against the oracle's, and its servers at the end."""
    strategies = list(dict.fromkeys(str(r["strategy"]) for r in rows))
    head = [*(f"{s} it/s" for s in strategies), "psld/mxnet", "psld/byteps", "psld/tf-greedy"]
    head += ["psld/mxnet settled", "psld/oracle", "psld/oracle settled", "servers", "migr."]
    lines = ["| model | scenario | " + " | ".join(head) + " |", "|---|---|" + "---:|" * len(head)]
    cells: dict[tuple[str, str], dict[str, dict[str, object]]] = {}
    for r in rows:
        cells.setdefault((str(r["model"]), str(r["scenario"])), {})[str(r["strategy"])] = r
    for (model, scenario), by in cells.items():
        p = by.get("psld", {})
        vals = [f"{float(by[s]['throughput_it_s']):.2f}" if s in by else "" for s in strategies]
        for key in ("speedup_over_mxnet", "speedup_over_byteps", "speedup_over_tf-greedy"):
            vals.append(f"{float(p[key]):.2f}x" if key in p else "")
        if p and "mxnet" in by:
            settled = float(by["mxnet"]["settled_s"]) / float(p["settled_s"])  # type: ignore[arg-type]
            vals.append(f"{settled:.2f}x")
        else:
            vals.append("")
        for key in ("ratio_to_oracle", "settled_ratio_to_oracle"):
            vals.append(f"{float(p[key]):.2f}" if key in p else "")
        sot = p.get("servers_over_time") or [0]
        vals += [f"{sot[0]}->{sot[-1]}", str(p.get("migrations", ""))]  # type: ignore[index]
        lines.append(f"| {model} | {scenario} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--scenarios", default="none,bandwidth,interference,imbalance,dynamic,mixed")
    p.add_argument("--strategies", default="psld,mxnet,byteps,tf-greedy,oracle")
    p.add_argument("--models", default="preset", help=f"comma-separated, of {', '.join(MODELS)}")
    p.add_argument("--iterations", type=int, default=30)
    p.add_argument("--spares", type=int, default=1)
    p.add_argument("--json", type=Path)
    p.add_argument("--plot", type=Path)
    p.add_argument("--from-json", type=Path, help="only print the tables of a saved run")
    a = p.parse_args()
    if a.from_json:
        print(markdown(json.loads(a.from_json.read_text())["rows"]))
        return
    ensure_ray(None, num_cpus=3)
    pool = ActorPool()
    # Spare servers kept warm, as a cluster keeps spare machines: a scale-out then costs the
    # actor's reset and the chunks' move, not a process start (seconds on this machine).
    warm = [pool.take_server() for _ in range(MAX_SERVERS + a.spares)]
    for server in warm:
        pool.give_back_server(server)
    rows = []
    models = [m for m in a.models.split(",") if m] or ["preset"]
    # psld last: the pool then holds the baselines' idle server actors, so that a scale-out
    # reuses one (a live cluster keeps spare machines warm) instead of starting a process.
    strategies = sorted(a.strategies.split(","), key=lambda s: s == "psld")
    try:
        for model in models:
            for scenario in a.scenarios.split(","):
                runs = {}
                for strategy in strategies:
                    name, options = MODELS[model]
                    config = PSConfig(
                        model=name,
                        model_options=options,
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
                        others = {k: v for k, v in runs.items() if k in ("mxnet", "oracle")}
                        plot_dynamic(r, a.plot, others)
                for strategy, r in runs.items():
                    row = {
                        "model": model,
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
                    if strategy == "psld" and scenario == "dynamic":
                        row["recovery_iterations"] = recovery_iterations(r)
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
            print(
                row["model"],
                row["scenario"],
                row.get("recovery_iterations", ""),
                {k: round(row[k], 2) for k in keys},
            )
    if a.json:
        a.json.write_text(
            json.dumps(
                {"args": vars(a) | {"json": str(a.json), "plot": str(a.plot)}, "rows": rows},
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
