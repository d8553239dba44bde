"""PSLD's warm start and probes, side by side with MXNet and the oracle: every preset
scenario at the defaults of `unstall ps bench` (10 iterations, 2 workers, the scenarios'
models), each run of a seed running every strategy once in each scenario.

    .venv/bin/python benchmarks/psld_warm.py --seeds 0,1,2,3,4,5 --json psld_warm.json

The strategies: ``psld`` as shipped (warm start on, probes sent with every iteration, no
boundary probes), ``psld-cold`` (no warm start: the even split, moved after iteration 0),
``psld-late`` (no probes with the iterations, ``ControllerConfig(probe_in_step=False)``: a
change is seen in the timings of the first iteration it slows), ``psld-boundary`` (a probe at
every iteration boundary instead, ``ControllerConfig(probe_every=1, probe_in_step=False)``),
``mxnet`` and ``oracle``.
Seeds in the first half run the strategies in that order, the others in the reverse (a
scenario's first run can be the slowest). Per scenario: the median (min-max over the seeds) of
each strategy's throughput, and of each psld variant's throughput over MXNet's and over the
oracle's in the same run.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from unstall import ps
from unstall.ps.scenarios import SCENARIOS

VARIANTS = {
    "psld": ps.ControllerConfig(),
    "psld-cold": ps.ControllerConfig(warm_start=False),
    "psld-late": ps.ControllerConfig(probe_in_step=False),
    "psld-boundary": ps.ControllerConfig(probe_every=1, probe_in_step=False),
}


def strategies(reverse: bool) -> list[ps.Strategy]:
    out: list[ps.Strategy] = [
        ps.PSLDStrategy(config=config, name=name) for name, config in VARIANTS.items()
    ]
    out += [ps.STRATEGIES["mxnet"], ps.STRATEGIES["oracle"]]
    return out[::-1] if reverse else out


def run(seeds: Sequence[int], iterations: int) -> list[dict[str, Any]]:
    """One row per (seed, scenario, strategy): throughput and the run's psld figures."""
    rows: list[dict[str, Any]] = []
    for k, seed in enumerate(seeds):
        request = ps.PSRequest(iterations=iterations, seed=seed)
        cases, _ = ps.resolve_bench(request, ["mxnet"], list(SCENARIOS))
        result = ps.compare_strategies(
            cases, strategies(reverse=k >= len(seeds) / 2), iterations=iterations, seed=seed
        )
        for r in result.results:
            rows.append(
                {
                    "seed": seed,
                    "scenario": r.scenario,
                    "strategy": r.strategy,
                    "throughput_it_s": r.throughput_it_s,
                    "migrations": r.migrations,
                    "total_pause_s": r.total_pause_s,
                    "warm_start_s": r.warm_start_s,
                }
            )
        print(f"seed {seed} done", flush=True)
    return rows


def spread(values: Sequence[float], fmt: str) -> str:
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def table(rows: Sequence[dict[str, Any]]) -> str:
    it_s = {(r["seed"], r["scenario"], r["strategy"]): float(r["throughput_it_s"]) for r in rows}
    seeds = sorted({r["seed"] for r in rows}, key=str)
    lines = [
        "| scenario | variant | it/s | / mxnet | / oracle | warm start ms |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for scenario in SCENARIOS:
        for name in ("mxnet", "oracle", *VARIANTS):
            own = [it_s[(s, scenario, name)] for s in seeds]
            cells = [scenario, name, spread(own, ".2f")]
            if name in VARIANTS:
                mx = [it_s[(s, scenario, name)] / it_s[(s, scenario, "mxnet")] for s in seeds]
                orc = [it_s[(s, scenario, name)] / it_s[(s, scenario, "oracle")] for s in seeds]
                warm = [
                    1e3 * float(r["warm_start_s"])
                    for r in rows
                    if (r["scenario"], r["strategy"]) == (scenario, name)
                ]
                cells += [spread(mx, ".2f") + "x", spread(orc, ".2f"), spread(warm, ".0f")]
            else:
                cells += ["", "", ""]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2,3,4,5", help="comma-separated seeds")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument(
        "--from-json",
        type=Path,
        nargs="+",
        help="print the table of saved runs (their rows joined)",
    )
    args = parser.parse_args()
    if args.from_json is not None:
        rows = [row for path in args.from_json for row in json.loads(path.read_text())]
    else:
        rows = run([int(s) for s in args.seeds.split(",")], args.iterations)
        if args.json is not None:
            args.json.write_text(json.dumps(rows, indent=1))
    print(table(rows))


if __name__ == "__main__":
    main()
