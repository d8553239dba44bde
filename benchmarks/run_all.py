"""Run the benchmarks (`make bench`): every script in this folder, one after the other.

    .venv/bin/python benchmarks/run_all.py [--only NAME,NAME] [--skip NAME,NAME] [--list]

Each script runs with its default arguments (or those in ARGUMENTS), prints its own table and
writes its JSON (under bench-results/ by default). BENCHMARKS.md gives, per figure, the exact
command that produced it; the defaults here are a quick pass over every script. Some take long on
two cores (dally_eval, live_fidelity, lstm_ptb, psld_eval, psld_warm): pick with --only.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Scripts that need arguments to run at all: profile_stalls takes a subcommand; refitting the
# published sweep is the one that needs no measuring.
ARGUMENTS: dict[str, list[str]] = {
    "profile_stalls": ["fit", "--points", str(HERE / "profile_fit_points.json")],
}


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
        code = subprocess.call([sys.executable, str(script), *ARGUMENTS.get(script.stem, [])])
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
