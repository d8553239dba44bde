"""PSLD evaluation: every scenario x strategy x model, repeated; throughput, speed-ups of psld
over the baselines, ratio to oracle, the checks of PSLD's goals, and a plot of the dynamic
scenario's iteration time and servers.

    .venv/bin/python benchmarks/psld_eval.py --models big-tensor --repeats 3 \
        --json psld_big.json --plot benchmarks/psld_dynamic.png
    .venv/bin/python benchmarks/psld_eval.py --from-json psld_big.json psld_deep.json ...

A long grid runs in pieces (one model, or a few scenarios, a command); ``--from-json`` merges
the pieces' rows and prints the tables and goal checks of the whole. Each cell (model, scenario,
strategy) is the median of its repeats, with the spread (max - min over the median) beside it;
ratios are taken between medians. "settled" is the mean iteration time (with its boundary
pause) over a run's second half.

Links: the presets' 25 MB/s suit models whose compute is small beside their transfers; where a
model's compute and the runtime's own cost (its "engine" time, measured with unlimited links)
are not small, no assignment can change most of its iteration. ``--calibrate`` measures each
model's engine time and applies one rule to every model: the links stay at the presets' speed
unless the even split's per-server time (links, latency, step: the part an assignment decides)
would be under ``--transfer-ratio`` (2) times the engine time; then they are slowed to where it
is that ratio, every link of every scenario by the same factor (the stragglers stay relative).
The grid takes the result with ``--links``:

    .venv/bin/python benchmarks/psld_eval.py --calibrate \
        --models big-tensor,mlp-deep,transformer --json links.json
    .venv/bin/python benchmarks/psld_eval.py --models transformer --links links.json \
        --iterations 20 --json tr.json

Every run goes through the parameter server's resolver and :func:`unstall.ps.fit`, as
`unstall ps train --model NAME -o KEY=VALUE --scenario NAME --strategy NAME` does.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import os
import statistics
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from unstall import ps
from unstall.net.link import Link

# private on purpose: the cost model's per-server cost and PSLD's min-max split, for the bound
# of an assignment that follows every change at no cost (which no strategy's run measures)
from unstall.ps.links import server_cost
from unstall.ps.psld.balance import optimal_shares

BASELINES = ("mxnet", "byteps", "tf-greedy", "round-robin")
STATIC_SCENARIOS = ("none", "bandwidth", "interference", "imbalance")
MAX_SERVERS = 4  # the presets' server count
PRESET_LINK_MB_S = 25.0  # the presets' links (ServerSpec's default)
# The models: the scenario's own MLP ("preset": 3.7 MB, or the big-tensor one in imbalance and
# mixed), one very large tensor, many small tensors, and two sequence models of a few MB (the
# zoo's defaults are 33-53 MB, minutes a run on these 25 MB/s links).
MODELS: dict[str, tuple[str | None, dict[str, object]]] = {
    "preset": (None, {}),
    "big-tensor": ("mlp", dict(ps.SCENARIOS["imbalance"]().model_options)),
    "mlp-deep": ("mlp", {"in_features": 256, "width": 256, "depth": 16}),
    "transformer": ("transformer", {"d_model": 128, "layers": 4, "ff": 512, "vocab": 2000}),
    "lstm": ("lstm_lm", {"embed_dim": 256, "hidden": 256, "vocab": 2000}),
}
Row = dict[str, Any]


def case(model: str, scenario: ps.Scenario) -> ps.BenchCase:
    """What the grid trains for ``model`` (a key of MODELS) in ``scenario``: through the
    resolver, as `unstall ps train --model NAME -o KEY=VALUE` would."""
    name, options = MODELS[model]
    texts = {k: str(v) for k, v in options.items()}
    return ps.resolve_case(ps.PSRequest(model=name, model_options=texts), scenario)


def run(
    model: str, scenario: ps.Scenario, strategy: str, iterations: int, spares: int, pool: Any
) -> ps.PSRunResult:
    c = case(model, scenario)
    return ps.fit(
        c.model,
        c.data,
        loss=c.loss,
        scenario=scenario,
        strategy=strategy,
        iterations=iterations,
        spares=spares,
        pool=pool,
    )


def settled_s(r: ps.PSRunResult) -> float:
    tail = r.telemetry[len(r.telemetry) // 2 :]
    return sum(t.iter_s + t.boundary_s for t in tail) / len(tail)


def recovery_iterations(times: Sequence[float], tolerance: float = 0.10) -> list[int]:
    """Per change of the dynamic scenario (at 1/3 and 2/3 of the run): iterations until the
    iteration time is within ``tolerance`` of the new phase's optimum, taken as the best 3-run
    median of the phase's iterations."""
    n = len(times)
    out = []
    for start, stop in itertools.pairwise([n // 3, 2 * n // 3, n]):
        phase = times[start:stop]
        runs = [sorted(phase[i : i + 3])[1] for i in range(len(phase) - 2)]
        best = min(runs or phase)  # a phase under 3 iterations (a smoke run): its best
        out.append(
            next((i for i, t in enumerate(phase) if t <= (1 + tolerance) * best), len(phase))
        )
    return out


def plot_dynamic(rows: Sequence[Row], path: Path) -> None:
    """psld's iteration time and servers on ``dynamic`` (one run), against mxnet and oracle."""
    by = {str(r["strategy"]): r for r in rows}
    p = by["psld"]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    its = list(range(len(p["iter_s"])))
    for name in ("mxnet", "oracle"):
        if name in by:
            ax.plot(its, by[name]["iter_s"], linewidth=0.8, alpha=0.7, label=f"{name} (s)")
    ax.plot(its, p["iter_s"], color="black", label="psld iteration + pause (s)")
    ax.set_xlabel("iteration")
    ax.set_ylabel("seconds")
    ax2 = ax.twinx()
    ax2.step(its, p["servers_over_time"], where="post", color="tab:blue", label="servers")
    ax2.set_ylabel("servers")
    ax2.set_ylim(0, max(p["servers_over_time"]) + 1)
    fig.legend(loc="upper right", bbox_to_anchor=(0.86, 0.86), fontsize=8)
    ax.set_title(f"psld on dynamic ({p['model']} model)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- links at which transfer dominates --------------------------------------------------------


def calibrate(a: argparse.Namespace, pool: ps.ActorPool) -> dict[str, Any]:
    """Per model: the engine time (median iteration with unlimited links, after the first, over
    ``--repeats`` runs of ``--iterations``), the even split's time on the presets' links, and
    the link speed the rule gives (see the module docstring)."""
    preset = ps.SCENARIOS["none"]()
    unlimited = ps.ServerSpec(link=Link.unlimited(), apply_mb_s=math.inf)
    free = dataclasses.replace(preset, base=unlimited, model=None, model_options={})
    out: dict[str, Any] = {"transfer_ratio": a.transfer_ratio, "models": {}}
    for model in a.models.split(","):
        times: list[float] = []
        compute: list[float] = []  # the slowest worker's forward-backward
        for _ in range(a.repeats):
            r = run(model, free, "round-robin", a.iterations, 0, pool)
            times += [t.iter_s for t in r.telemetry[1:]]
            compute += [max(w.compute_s for w in t.workers) for t in r.telemetry[1:]]
        engine = statistics.median(times)
        size = dict(model_bytes=sum(r.server_bytes.values()), workers=r.workers, servers=4)
        even = ps.even_split_s(preset.base, **size)
        rule = ps.link_for_transfer_ratio(
            preset.base, engine_s=engine, ratio=a.transfer_ratio, **size
        )
        link = min(preset.base.link.mb_s, rule)
        out["models"][model] = {
            "engine_s": engine,
            "engine_iqr_s": [float(q) for q in statistics.quantiles(times, n=4)[::2]],
            "compute_s": statistics.median(compute),
            "model_bytes": size["model_bytes"],
            "preset_link_mb_s": preset.base.link.mb_s,
            "even_split_s_preset": even,
            "ratio_preset": even / engine,
            "link_mb_s": link,
        }
        print(
            f"{model:11s} engine {engine * 1e3:6.1f} ms (compute "
            f"{statistics.median(compute) * 1e3:5.1f} ms)  even split at "
            f"{preset.base.link.mb_s:g} MB/s {even * 1e3:6.1f} ms (x{even / engine:.2f}) "
            f"-> links {link:.3g} MB/s",
            flush=True,
        )
    return out


def model_scenario(model: str, scenario: str, links: dict[str, float]) -> ps.Scenario:
    """The scenario to run ``model`` on: the preset, or with its links scaled to the model's."""
    link = links.get(model)
    preset = ps.SCENARIOS[scenario]()
    if link is None or link == preset.base.link.mb_s:
        return preset
    return ps.scaled_links(preset, link / preset.base.link.mb_s)


def adaptive_best_s(scenario: ps.Scenario, workers: int, iterations: int, total: int) -> float:
    """The cost model's slowest-server time of the best split over every server and spare,
    phase by phase (an assignment that follows each change at no cost), weighted by phase."""
    n, sc = iterations, scenario
    out = 0.0
    for start, stop in sc.spans(n):
        costs = [server_cost(sc.spec(s, start, n), workers) for s in range(sc.servers + sc.spares)]
        shares = optimal_shares({s: c.per_byte_s for s, c in enumerate(costs)})
        slowest = max(c.seconds(shares[s] * total) for s, c in enumerate(costs))
        out += (stop - start) / n * slowest
    return out


def bounds(a: argparse.Namespace, engine: dict[str, float], links: dict[str, float]) -> None:
    """Per model and scenario, no run: the engine time (calibrated) plus the cost model's
    slowest server for mxnet's and the static oracle's assignments, and for the best split
    over every server and spare phase by phase; the speed-ups over mxnet these allow. On the
    presets' links and, where the links rule changed them, on the model's own."""
    print(
        "| model | links MB/s | scenario | engine s | mxnet s | oracle s | best split s "
        "| oracle/mxnet | best/mxnet (psld's ceiling) |\n|---|---:|---|" + "---:|" * 6
    )
    # Each model on the presets' links, and on its chosen links where those differ.
    choices = [{}, links]
    for model, chosen, scenario in itertools.product(
        a.models.split(","), choices, a.scenarios.split(",")
    ):
        if chosen and chosen.get(model, PRESET_LINK_MB_S) == PRESET_LINK_MB_S:
            continue
        sc = model_scenario(model, scenario, chosen).with_spares(a.spares)
        built = case(model, sc).model
        total = sum(p.numel() * p.element_size() for p in built().parameters() if p.requires_grad)
        pred = {
            s: ps.predict_iter_s(built, strategy=s, scenario=sc, iterations=a.iterations)
            for s in ("mxnet", "oracle")
        }
        e, best = engine[model], adaptive_best_s(sc, 2, a.iterations, total)
        mx, orc = e + pred["mxnet"], e + pred["oracle"]
        print(
            f"| {model} | {sc.base.link.mb_s:.3g} | {scenario} | {e:.3f} "
            f"| {mx:.3f} | {orc:.3f} | {e + best:.3f} | {mx / orc:.2f}x "
            f"| {mx / (e + best):.2f}x |"
        )


def run_row(model: str, scenario: str, strategy: str, repeat: int, r: ps.PSRunResult) -> Row:
    times = [t.iter_s + t.boundary_s for t in r.telemetry]
    return {
        "model": model,
        "scenario": scenario,
        "strategy": strategy,
        "repeat": repeat,
        "throughput_it_s": r.throughput_it_s,
        "settled_s": settled_s(r),
        "migrations": r.migrations,
        "scale_outs": r.scale_outs,
        "scale_ins": r.scale_ins,
        "max_pause_s": r.max_pause_s,
        "total_pause_s": r.total_pause_s,
        "iter_s": times,
        "servers_over_time": list(r.servers_over_time),
        "recovery_iterations": recovery_iterations(times) if scenario == "dynamic" else None,
    }


def run_grid(a: argparse.Namespace, pool: ps.ActorPool, links: dict[str, float]) -> list[Row]:
    rows: list[Row] = []
    # psld last: the pool then holds the baselines' idle server actors, so that a scale-out
    # reuses one (a live cluster keeps spare machines warm) instead of starting a process.
    strategies = sorted(a.strategies.split(","), key=lambda s: s == "psld")
    repeats = range(a.repeat_start, a.repeat_start + a.repeats)
    for repeat, model, scenario in itertools.product(
        repeats, a.models.split(","), a.scenarios.split(",")
    ):
        sc = model_scenario(model, scenario, links)
        for strategy in strategies:
            rows.append(run_cell(a, model, scenario, sc, strategy, repeat, pool))
    return rows


def run_cell(
    a: argparse.Namespace,
    model: str,
    scenario: str,
    sc: ps.Scenario,
    strategy: str,
    repeat: int,
    pool: ps.ActorPool,
) -> Row:
    row = run_row(
        model, scenario, strategy, repeat, run(model, sc, strategy, a.iterations, a.spares, pool)
    )
    row["link_mb_s"] = sc.base.link.mb_s
    print(
        f"#{repeat} {model:11s} {scenario:12s} {strategy:11s} "
        f"{row['throughput_it_s']:6.2f} it/s settled {row['settled_s']:.3f} s "
        f"servers {row['servers_over_time'][-1]} migrations {row['migrations']}",
        flush=True,
    )
    return row


# --- aggregation over repeats ------------------------------------------------------------------


def cells_of(rows: Sequence[Row]) -> dict[tuple[str, str], dict[str, Row]]:
    """(model, scenario) -> strategy -> the median cell of its repeats: median throughput and
    settled time, their spread, the median recovery per change, psld's elastic counts."""
    groups: dict[tuple[str, str, str], list[Row]] = {}
    for r in rows:
        groups.setdefault((r["model"], r["scenario"], r["strategy"]), []).append(r)
    out: dict[tuple[str, str], dict[str, Row]] = {}
    for (model, scenario, strategy), runs in groups.items():
        tput = [float(r["throughput_it_s"]) for r in runs]
        median = statistics.median(tput)
        cell: Row = {
            "repeats": len(runs),
            "throughput_it_s": median,
            "spread": (max(tput) - min(tput)) / median,
            "settled_s": statistics.median(float(r["settled_s"]) for r in runs),
            "migrations": statistics.median(int(r["migrations"]) for r in runs),
            "servers": sorted(
                {f"{r['servers_over_time'][0]}->{r['servers_over_time'][-1]}" for r in runs}
            ),
            "max_pause_s": max(float(r.get("max_pause_s", 0.0)) for r in runs),
            # rows from before the links rule ran on the presets' links
            "link_mb_s": sorted({float(r.get("link_mb_s", PRESET_LINK_MB_S)) for r in runs}),
        }
        recoveries = [r["recovery_iterations"] for r in runs if r.get("recovery_iterations")]
        if recoveries:
            cell["recovery_iterations"] = [max(ks) for ks in zip(*recoveries, strict=True)]
        out.setdefault((model, scenario), {})[strategy] = cell
    # Models in the order they came, scenarios in the presets' order (pieces come in any).
    models = list(dict.fromkeys(m for m, _ in out))
    order = list(ps.SCENARIOS)

    def rank(key: tuple[str, str]) -> tuple[int, int, str]:
        m, s = key
        return models.index(m), order.index(s) if s in order else len(order), s

    return {key: out[key] for key in sorted(out, key=rank)}


def markdown(cells: dict[tuple[str, str], dict[str, Row]]) -> str:
    """One row per (model, scenario): each strategy's median throughput, psld's speed-ups over
    the baselines, its ratio to the oracle (throughput, and settled), servers, migrations."""
    strategies = list(dict.fromkeys(s for by in cells.values() for s in by))
    head = [f"{s} it/s" for s in strategies] + [f"psld/{b}" for b in BASELINES]
    head += ["psld/oracle", "psld/oracle settled", "spread", "servers", "migr."]
    lines = [
        "| model | links MB/s | scenario | " + " | ".join(head) + " |",
        "|---|---:|---|" + "---:|" * len(head),
    ]
    for (model, scenario), by in cells.items():
        p = by.get("psld")
        link = ",".join(
            f"{v:.3g}" for v in sorted({v for c in by.values() for v in c["link_mb_s"]})
        )
        vals = [f"{by[s]['throughput_it_s']:.2f}" if s in by else "" for s in strategies]
        for b in BASELINES:
            if p is not None and b in by:
                vals.append(f"{p['throughput_it_s'] / by[b]['throughput_it_s']:.2f}x")
            else:
                vals.append("")
        o = by.get("oracle")
        if p is not None and o is not None:
            vals.append(f"{p['throughput_it_s'] / o['throughput_it_s']:.2f}")
            vals.append(f"{o['settled_s'] / p['settled_s']:.2f}")
        else:
            vals += ["", ""]
        vals.append(f"{max(c['spread'] for c in by.values()):.0%}")
        vals += [",".join(p["servers"]), f"{p['migrations']:g}"] if p else ["", ""]
        lines.append(f"| {model} | {link} | {scenario} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def goal_checks(cells: dict[tuple[str, str], dict[str, Row]]) -> list[str]:
    """PSLD's four goals (speed-up over mxnet's default, closeness to the oracle when nothing
    changes, recovery after a change, never below the best static baseline), checked per model
    on the median cells."""
    out = []
    for model in dict.fromkeys(m for m, _ in cells):
        mine = {s: by for (m, s), by in cells.items() if m == model and "psld" in by}
        if not mine:
            continue
        # The worst scenario for MXNet's default: where it is furthest from the best
        # throughput any strategy reached there (the static oracle cannot follow a moving
        # straggler, so it is not the yardstick in dynamic scenarios); its ratio to the oracle
        # is shown too.
        best = {s: max(c["throughput_it_s"] for c in by.values()) for s, by in mine.items()}
        ratio = {
            s: by["mxnet"]["throughput_it_s"] / best[s]
            for s, by in mine.items()
            if "mxnet" in by and s != "none"
        }
        if ratio:
            worst = min(ratio, key=lambda s: ratio[s])
            ups = {
                s: mine[s]["psld"]["throughput_it_s"] / mine[s]["mxnet"]["throughput_it_s"]
                for s in ratio
            }
            up = ups[worst]
            each = ", ".join(f"{s} {v:.2f}x" for s, v in ups.items())
            out.append(
                f"{model}: worst straggler scenario for mxnet {worst} (mxnet/best "
                f"{ratio[worst]:.2f}): psld/mxnet {up:.2f}x [goal >= 2.86x: "
                f"{'met' if up >= 2.86 else 'NOT met'}] (every scenario: {each})"
            )
        static = {
            s: by["oracle"]["settled_s"] / by["psld"]["settled_s"]
            for s, by in mine.items()
            if s in STATIC_SCENARIOS and "oracle" in by
        }
        if static:
            low = min(static.values())
            out.append(
                f"{model}: settled psld/oracle in static scenarios min {low:.2f} "
                f"({', '.join(f'{s} {v:.2f}' for s, v in static.items())}) "
                f"[goal >= 0.90: {'met' if low >= 0.9 else 'NOT met'}]"
            )
        rec = mine.get("dynamic", {}).get("psld", {}).get("recovery_iterations")
        if rec:
            out.append(
                f"{model}: dynamic recovery {rec} iterations (worst repeat) "
                f"[goal <= 20: {'met' if max(rec) <= 20 else 'NOT met'}]"
            )
        margins = {}
        for s, by in mine.items():
            top = max((by[b]["throughput_it_s"] for b in BASELINES if b in by), default=0.0)
            if top > 0:
                margins[s] = by["psld"]["throughput_it_s"] / top
        if margins:
            s_min = min(margins, key=lambda s: margins[s])
            out.append(
                f"{model}: psld / best static baseline min {margins[s_min]:.2f} ({s_min}) "
                f"[goal >= 0.97: {'met' if margins[s_min] >= 0.97 else 'NOT met'}]"
            )
    return out


def report(rows: Sequence[Row], plot: Path | None, plot_model: str | None) -> None:
    cells = cells_of(rows)
    print(markdown(cells))
    print()
    print("\n".join(goal_checks(cells)))
    if plot is not None:
        chosen = [
            r
            for r in rows
            if r["scenario"] == "dynamic"
            and r["repeat"] == 0
            and r["model"] == (plot_model or r["model"])
        ]
        first = chosen[0]["model"] if chosen else None
        if any(r["strategy"] == "psld" for r in chosen):
            plot_dynamic([r for r in chosen if r["model"] == first], plot)
            print(f"wrote {plot}")


def merge_rows(files: Sequence[Path]) -> list[Row]:
    """The rows of saved runs; a run of a (model, scenario, strategy, repeat) in a later file
    replaces the same from an earlier one (a cell run again)."""
    merged: dict[tuple[str, str, str, int], Row] = {}
    for f in files:
        replaced: dict[str, int] = {}
        for r in json.loads(f.read_text())["rows"]:
            key = (r["model"], r["scenario"], r["strategy"], int(r["repeat"]))
            if key in merged:
                cell = f"{key[0]} {key[1]}"
                replaced[cell] = replaced.get(cell, 0) + 1
            merged[key] = r
        if replaced:
            done = ", ".join(f"{cell} ({n})" for cell, n in replaced.items())
            print(f"{f.name} replaces earlier runs of: {done}")
    return list(merged.values())


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--scenarios", default="none,bandwidth,interference,imbalance,dynamic,mixed")
    p.add_argument("--strategies", default="psld,mxnet,byteps,tf-greedy,round-robin,oracle")
    p.add_argument("--models", default="preset", help=f"comma-separated, of {', '.join(MODELS)}")
    p.add_argument("--iterations", type=int, default=30)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--repeat-start", type=int, default=0, help="first repeat's index (pieces)")
    p.add_argument("--spares", type=int, default=2)
    p.add_argument("--json", type=Path)
    p.add_argument("--plot", type=Path, help="psld on dynamic (repeat 0 of --plot-model)")
    p.add_argument("--plot-model", help="the model of the plot (default: the first with psld)")
    p.add_argument("--from-json", type=Path, nargs="+", help="merge saved runs, print, plot")
    p.add_argument("--calibrate", action="store_true", help="measure engine times, choose links")
    p.add_argument("--transfer-ratio", type=float, default=2.0, help="the links rule's ratio")
    p.add_argument("--links", type=Path, help="a --calibrate JSON: each model's link speed")
    p.add_argument("--bounds", action="store_true", help="with --links: the cost model's bounds")
    return p.parse_args()


def main() -> None:
    a = parse_args()
    if a.from_json:
        report(merge_rows(a.from_json), a.plot, a.plot_model)
        return
    links: dict[str, float] = {}
    if a.links:
        chosen = json.loads(a.links.read_text())["models"]
        links = {m: float(c["link_mb_s"]) for m, c in chosen.items()}
        if a.bounds:
            bounds(a, {m: float(c["engine_s"]) for m, c in chosen.items()}, links)
            return
    # Ray's workers at the driver's priority (Ray's default is nice 15): a run started at a
    # raised priority gives it to the whole run, not only to the driver.
    os.environ.setdefault("RAY_worker_niceness", "0")
    ps.ensure_ray(None, num_cpus=3)
    pool = ps.ActorPool()
    # Spare servers kept warm, as a cluster keeps spare machines: a scale-out then costs the
    # actor's reset and the chunks' move, not a process start (seconds on this machine).
    warm = [pool.take_server() for _ in range(MAX_SERVERS + a.spares)]
    for server in warm:
        pool.give_back_server(server)
    try:
        result = calibrate(a, pool) if a.calibrate else {"rows": run_grid(a, pool, links)}
    finally:
        pool.close()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    if a.json:
        args = vars(a) | {
            "json": str(a.json),
            "plot": str(a.plot),
            "links": str(a.links),
            "commit": commit,
        }
        a.json.write_text(json.dumps({"args": args} | result, indent=1))
    if not a.calibrate:
        report(result["rows"], a.plot, a.plot_model)


if __name__ == "__main__":
    main()
