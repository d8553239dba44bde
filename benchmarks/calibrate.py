"""Perf-model calibration against Pollux's measured placements: the error table and its JSON.

Fits the perf model per application on ../shared/data/pollux/placements/APP/placements.csv and
reports the relative error of the predicted step time on held-out placements (group k-fold), next
to the in-sample error and a plain linear regression on the same features.

    .venv/bin/python benchmarks/calibrate.py [--placements DIR] [--out OUT.json]

(default OUT: bench-results/calibration.json)
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

from unstall.workload import CalibrationConfig, read_placements_dir, run_calibration

DEFAULT = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "pollux" / "placements"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--placements", type=Path, default=DEFAULT.resolve())
    parser.add_argument("--out", type=Path, default=Path("bench-results/calibration.json"))
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not args.placements.is_dir():
        sys.exit(f"{args.placements} is not present: give --placements DIR")
    start = time.perf_counter()
    result, _ = run_calibration(
        read_placements_dir(args.placements), CalibrationConfig(folds=args.folds, seed=args.seed)
    )
    seconds = time.perf_counter() - start
    head = (
        f"{'app':<12}{'points':>7}{'in-sample':>10}{'median':>8}{'p90':>8}{'max':>8}{'linear':>8}"
    )
    print(head)
    for a in result.apps:
        figures = (a.in_sample.median, a.held_out.median, a.held_out.p90, a.held_out.max)
        print(
            f"{a.app:<12}{a.points:>7}"
            + "".join(f"{v:>9.1%}" if i == 0 else f"{v:>8.1%}" for i, v in enumerate(figures))
            + f"{a.baseline_held_out.median:>8.1%}"
        )
    print(
        f"{'overall':<12}{result.points:>7}{result.in_sample_median_rel_error:>9.1%}"
        f"{result.median_rel_error:>8.1%}{result.p90_rel_error:>8.1%}"
        f"{result.max_rel_error:>8.1%}{result.baseline_median_rel_error:>8.1%}"
    )
    print(
        f"({result.folds}-fold held-out placements; fit took {seconds:.1f} s, {platform.machine()})"
    )
    print(result.worst_explained)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(result.to_json() + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
