"""Run the benchmarks (`make bench`): every script in this folder, one after the other.

    .venv/bin/python benchmarks/run_all.py [--only NAME,NAME] [--skip NAME,NAME] [--list]

Each script prints its own table and writes its JSON (under bench-results/ by default); figures
that BENCHMARKS.md quotes come from these runs. Some take long on two cores (dally_eval,
lstm_ptb, psld_eval): pick with --only.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def scripts() -> list[Path]:
    return sorted(p for p in HERE.glob("*.py") if p.name != Path(__file__).name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated script names (no .py)")
    parser.add_argument("--skip", default="", help="comma-separated script names (no .py)")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = parser.parse_args()
    chosen = scripts()
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {p.stem for p in chosen}
        if unknown:
            parser.error(
                f"unknown benchmark(s) {sorted(unknown)}; known: {[p.stem for p in chosen]}"
            )
        chosen = [p for p in chosen if p.stem in wanted]
    skip = set(filter(None, args.skip.split(",")))
    chosen = [p for p in chosen if p.stem not in skip]
    if args.list:
        for p in chosen:
            print(p.stem)
        return 0
    failed = []
    for script in chosen:
        print(f"=== {script.stem}", flush=True)
        started = time.perf_counter()
        code = subprocess.call([sys.executable, str(script)])
        print(
            f"=== {script.stem}: exit {code} in {time.perf_counter() - started:.0f} s", flush=True
        )
        if code != 0:
            failed.append(script.stem)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
