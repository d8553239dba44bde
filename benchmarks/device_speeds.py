"""GPU speeds per model family, fitted on Gavel's measured K80 / P100 / V100 throughputs.

Fits each family's speed relative to a V100 (:func:`unstall.net.device_fit.fit_family_speeds`),
then reports how well cross-device ratios ``t(slow GPU) / t(fast GPU)`` of Gavel's job types are
predicted held out: leave one model family out (a model outside the table gets the median of the
other families), leave one batch size out (a family in the table at a batch it was not fitted
on), and the flat datasheet model (fp32 peak x a flat efficiency) for comparison. ``--write``
stores the fitted table as the package's data file ``src/unstall/net/data/device_speeds.json``.

    .venv/bin/python benchmarks/device_speeds.py [--gavel PATH] [--json OUT] [--write]

Gavel's recommendation job runs slower on a V100 than on a K80 (host-bound on Gavel's machines);
it counts in the held-out errors but is left out of the shipped table (``--keep-all`` keeps it).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
from collections import defaultdict
from datetime import date
from pathlib import Path

from unstall.net.device_fit import (
    GAVEL_DEVICES,
    REFERENCE_DEVICE,
    RatioError,
    fit_family_speeds,
    gavel_points,
    generic_speeds,
    held_out_errors,
    median_error,
)
from unstall.net.device_speeds import gpu_flat_ratio

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_GAVEL = ROOT.parent / "shared" / "data" / "gavel" / "simulation_throughputs.json"
DATA_FILE = ROOT / "src" / "unstall" / "net" / "data" / "device_speeds.json"
METHODS = ("leave-one-family-out", "leave-one-batch-out", "datasheet")
# Left out of the shipped table, with the reason (see the module docstring).
LEFT_OUT = {"recommendation": "slower on Gavel's V100 than on its K80: bound by the host"}


def table_json(points: list, keep_all: bool) -> dict:  # type: ignore[type-arg]
    kept = [p for p in points if keep_all or p.family not in LEFT_OUT]
    families = fit_family_speeds(kept)
    rounded = {f: {d: round(s[d], 4) for d in GAVEL_DEVICES} for f, s in sorted(families.items())}
    return {
        "about": "GPU speed per model family relative to a V100 (fp32), fitted on measurements",
        "source": "Gavel, stanford-futuredata/gavel scheduler/simulation_throughputs.json (MIT):"
        " single-GPU isolated throughputs, geometric mean over batch sizes",
        "command": "python benchmarks/device_speeds.py --write",
        "reference_device": REFERENCE_DEVICE,
        "left_out": {} if keep_all else LEFT_OUT,
        "families": rounded,
        "generic": {d: round(v, 4) for d, v in generic_speeds(families).items()},
    }


def by_family(errors: list[RatioError]) -> dict[str, float]:
    groups: dict[str, list[RatioError]] = defaultdict(list)
    for e in errors:
        groups[e.family].append(e)
    return {f: median_error(g) for f, g in sorted(groups.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gavel", type=Path, default=DEFAULT_GAVEL)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--write", action="store_true", help=f"write {DATA_FILE.name}")
    parser.add_argument("--keep-all", action="store_true", help="ship every family")
    args = parser.parse_args()
    if not args.gavel.is_file():
        raise SystemExit(f"needs Gavel's throughputs at {args.gavel} (--gavel PATH): not found")
    points = gavel_points(json.loads(args.gavel.read_text()), source=str(args.gavel))
    flat = {d: gpu_flat_ratio(d) for d in GAVEL_DEVICES}
    results = {
        m: held_out_errors(points, m, datasheet=flat if m == "datasheet" else None) for m in METHODS
    }
    families = sorted({p.family for p in points})
    print(f"{len(points)} job types (family x batch) x 3 GPU pairs = {3 * len(points)} ratios")
    print(f"{'family':15s} " + " ".join(f"{m:>21s}" for m in METHODS))
    per = {m: by_family(results[m]) for m in METHODS}
    for f in families:
        print(f"{f:15s} " + " ".join(f"{per[m][f]:21.1%}" for m in METHODS))
    summary = {m: median_error(results[m]) for m in METHODS}
    print(f"{'median, all':15s} " + " ".join(f"{summary[m]:21.1%}" for m in METHODS))
    kept = [e for e in results[METHODS[0]] if e.family not in LEFT_OUT]
    print(f"leave-one-family-out without {sorted(LEFT_OUT)}: {median_error(kept):.1%}")
    table = table_json(points, args.keep_all)
    print("fitted speeds relative to v100:", json.dumps(table["families"]))
    print("generic (no family):", table["generic"])
    if args.write:
        DATA_FILE.parent.mkdir(parents=True, exist_ok=True)
        DATA_FILE.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
        print(f"wrote {DATA_FILE.relative_to(ROOT)}")
    if args.json:
        out = {
            "date": date.today().isoformat(),
            "machine": platform.platform(),
            "median_error": summary,
            "median_error_by_family": per,
            "leave_one_family_out_without_left_out": median_error(kept),
            "mean_error": {m: statistics.fmean(e.error for e in results[m]) for m in METHODS},
            "errors": {m: [e.to_dict() | {"error": e.error} for e in results[m]] for m in METHODS},
            "table": table,
        }
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
