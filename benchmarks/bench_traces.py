"""Trace benchmark: reading the full Philly trace, and generating synthetic traces.

Reads ../shared/data/traces/philly_jobs.csv (82,247 jobs) with unstall's reader, and generates
100,000 and 1,000,000 synthetic jobs; each timing is the median of ``--repeats`` runs, in one
process after a warm-up (imports and first-call costs excluded). Prints a table and writes JSON.

    .venv/bin/python benchmarks/bench_traces.py [--repeats 5] [--json out/traces.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from unstall.traces import SyntheticTraceConfig, generate, read_trace

PHILLY = (
    Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "traces" / "philly_jobs.csv"
)


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    rows: list[tuple[str, int, float]] = []
    if PHILLY.is_file():
        jobs = len(read_trace(PHILLY))
        rows.append(
            ("read philly-csv", jobs, median_seconds(lambda: read_trace(PHILLY), args.repeats))
        )
    else:
        print(f"skipping the Philly read: {PHILLY.resolve()} not present")
    for n in (100_000, 1_000_000):
        config = SyntheticTraceConfig(jobs=n, seed=0)
        rows.append(
            (f"generate {n:,}", n, median_seconds(lambda c=config: generate(c), args.repeats))
        )
    print(f"{'task':<22}{'jobs':>11}{'median s':>11}{'jobs/s':>13}")
    for task, jobs, sec in rows:
        print(f"{task:<22}{jobs:>11,}{sec:>11.3f}{jobs / sec:>13,.0f}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        result = {
            "machine": platform.platform(),
            "python": platform.python_version(),
            "repeats": args.repeats,
            "rows": [{"task": t, "jobs": j, "median_s": s} for t, j, s in rows],
        }
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
