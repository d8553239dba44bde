"""GPU speeds per model family, fitted on Gavel's measured K80 / P100 / V100 throughputs.

Fits each family's speed relative to a V100 (:func:`unstall.net.device_fit.fit_family_speeds`),
then reports how well cross-device ratios ``t(slow GPU) / t(fast GPU)`` of Gavel's job types are
predicted held out: leave one model family out (the median of the other families' speeds), leave
one batch size out (a family in the table at a batch it was not fitted on), the flat datasheet
model (fp32 peak x a flat efficiency), and leave one family out with the step-time roofline
(:mod:`unstall.net.device_roofline`: fitted on the other families, fed the held-out job's FLOPs,
parameter bytes, layer calls, parameter tensors and 3x3-convolution share from its
architecture, :mod:`unstall.net.gavel_models`), with the spread of its errors per family and
how much its figure moves when one choice changes. ``--write`` stores the fitted table and the
roofline's constants as the package's data file ``src/unstall/net/data/device_speeds.json``.

    .venv/bin/python benchmarks/device_speeds.py [--gavel PATH] [--json OUT] [--write]

Gavel's recommendation job runs slower on a V100 than on a K80 (host-bound on Gavel's machines);
it counts in the held-out errors but is left out of the shipped table and of every roofline fit
(``--keep-all`` keeps it in both).
"""

from __future__ import annotations

import argparse
import dataclasses
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
    ThroughputPoint,
    fit_family_speeds,
    fit_roofline_on,
    gavel_points,
    gavel_step,
    generic_speeds,
    held_out_errors,
    median_error,
)
from unstall.net.device_roofline import GpuFigures, StepFeatures
from unstall.net.device_speeds import gpu_flat_ratio

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_GAVEL = ROOT.parent / "shared" / "data" / "gavel" / "simulation_throughputs.json"
DATA_FILE = ROOT / "src" / "unstall" / "net" / "data" / "device_speeds.json"
METHODS = ("leave-one-family-out", "leave-one-batch-out", "datasheet", "roofline")
# Left out of the shipped table and the roofline fits, with the reason (see the docstring).
LEFT_OUT = {"recommendation": "slower on Gavel's V100 than on its K80: bound by the host"}


def _no_winograd(p: ThroughputPoint) -> StepFeatures:
    return dataclasses.replace(gavel_step(p), winograd_share=0.0)


def _no_tensors(p: ThroughputPoint) -> StepFeatures:
    return dataclasses.replace(gavel_step(p), param_tensors=0.0)


def sensitivity(
    points: list[ThroughputPoint], fit_without: frozenset[str]
) -> dict[str, dict[str, float]]:
    """The roofline's held-out median, over all ratios and by family, when one choice changes
    (how fragile the figure is)."""
    p100_12gb = {"p100": dataclasses.replace(GpuFigures.datasheet("p100"), memory_bytes_s=549e9)}
    runs = {
        "as shipped": {"fit_without": fit_without},
        "recommendation kept in the fits": {"fit_without": frozenset[str]()},
        "no 3x3-convolution term": {"fit_without": fit_without, "step_of": _no_winograd},
        "no host cost per parameter tensor": {"fit_without": fit_without, "step_of": _no_tensors},
        "host and GPU time added (k = 1)": {"fit_without": fit_without, "overlap_power": 1.0},
        "added, no per-tensor cost (the previous roofline)": {
            "fit_without": fit_without,
            "step_of": _no_tensors,
            "overlap_power": 1.0,
        },
        "soft maximum k = 2": {"fit_without": fit_without, "overlap_power": 2.0},
        "soft maximum k = 8": {"fit_without": fit_without, "overlap_power": 8.0},
        "P100 12 GB (549 GB/s)": {"fit_without": fit_without, "figures": p100_12gb},
    }
    out = {}
    for name, kw in runs.items():
        errors = held_out_errors(points, "roofline", **kw)  # type: ignore[arg-type]
        kept = median_error([e for e in errors if e.family not in LEFT_OUT])
        out[name] = {"all": median_error(errors), "kept": kept, **by_family(errors)}
    return out


def roofline_json(points: list[ThroughputPoint], keep_all: bool) -> dict:  # type: ignore[type-arg]
    model = fit_roofline_on([p for p in points if keep_all or p.family not in LEFT_OUT])
    return {
        "launch_s": round(model.launch_s, 7),
        "efficiency": {d: round(v, 4) for d, v in sorted(model.efficiency.items())},
        "winograd": {d: round(v, 4) for d, v in sorted(model.winograd.items())},
        "memory_passes": round(model.memory_passes, 3),
        "tensor_s": round(model.tensor_s, 7),
        "overlap_power": model.overlap_power,
    }


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
        "roofline": roofline_json(points, keep_all),
    }


def spread(errors: list[RatioError]) -> dict[str, dict[str, float]]:
    """Per family: the quartiles and the largest of the errors."""
    groups: dict[str, list[float]] = defaultdict(list)
    for e in errors:
        groups[e.family].append(e.error)
    out = {}
    for family, values in sorted(groups.items()):
        q1, q2, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
        out[family] = {"p25": q1, "median": q2, "p75": q3, "max": max(values), "n": len(values)}
    return out


# Models of no fitted family whose K80 speed the roofline sets (zoo models at 32 samples), and
# ResNet-50 to set against Gavel's measured K80/V100 ratio at that batch.
EXAMPLES = ("mlp", "ncf", "resnet50")


def examples(points: list[ThroughputPoint], keep_all: bool) -> dict[str, dict[str, float]]:
    """The roofline's K80 speed (relative to a V100) for :data:`EXAMPLES` at 32 samples, with
    the share of the V100 step that is host time: as shipped, and as the previous (additive, no
    per-tensor cost) roofline had it."""
    from unstall.workload import zoo
    from unstall.workload.job_specs import step_of

    kept = [p for p in points if keep_all or p.family not in LEFT_OUT]
    shipped = fit_roofline_on(kept)
    previous = fit_roofline_on(kept, _no_tensors, overlap_power=1.0)
    out = {}
    for name in EXAMPLES:
        step = step_of(zoo.facts(name), 32)
        old_step = dataclasses.replace(step, param_tensors=0.0)
        out[name] = {
            "k80": shipped.speeds(step, REFERENCE_DEVICE)["k80"],
            "host_share_v100": shipped.host_time(step) / shipped.step_time("v100", step),
            "k80_previous": previous.speeds(old_step, REFERENCE_DEVICE)["k80"],
        }
    return out


def by_family(errors: list[RatioError]) -> dict[str, float]:
    groups: dict[str, list[RatioError]] = defaultdict(list)
    for e in errors:
        groups[e.family].append(e)
    return {f: median_error(g) for f, g in sorted(groups.items())}


def print_table(results: dict[str, list[RatioError]]) -> dict[str, dict[str, float]]:
    """Median error by held-out family and over all ratios, with and without the left-out ones."""
    print(f"{'family':15s} " + " ".join(f"{m:>21s}" for m in METHODS))
    per = {m: by_family(results[m]) for m in METHODS}
    for f in sorted(per[METHODS[0]]):
        print(f"{f:15s} " + " ".join(f"{per[m][f]:21.1%}" for m in METHODS))
    summary = {m: median_error(results[m]) for m in METHODS}
    print(f"{'median, all':15s} " + " ".join(f"{summary[m]:21.1%}" for m in METHODS))
    kept = {m: median_error([e for e in results[m] if e.family not in LEFT_OUT]) for m in METHODS}
    print(f"{'median, kept':15s} " + " ".join(f"{kept[m]:21.1%}" for m in METHODS))
    return {"all": summary, "without_left_out": kept, **{f"by_family.{m}": per[m] for m in per}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gavel", type=Path, default=DEFAULT_GAVEL)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--write", action="store_true", help=f"write {DATA_FILE.name}")
    parser.add_argument("--keep-all", action="store_true", help="ship and fit every family")
    args = parser.parse_args()
    if not args.gavel.is_file():
        raise SystemExit(f"needs Gavel's throughputs at {args.gavel} (--gavel PATH): not found")
    points = gavel_points(json.loads(args.gavel.read_text()), source=str(args.gavel))
    flat = {d: gpu_flat_ratio(d) for d in GAVEL_DEVICES}
    fit_without = frozenset[str]() if args.keep_all else frozenset(LEFT_OUT)
    results = {
        m: held_out_errors(points, m, datasheet=flat, fit_without=fit_without) for m in METHODS
    }
    print(f"{len(points)} job types (family x batch) x 3 GPU pairs = {3 * len(points)} ratios;")
    print(f"family-out methods never learn from {sorted(fit_without)}")
    print("measured ms per step (K80 / P100 / V100):")
    for p in points:
        times = " / ".join(f"{1e3 / p.throughput[d]:7.1f}" for d in GAVEL_DEVICES)
        print(f"  {p.family:15s} batch {p.batch or '-':>5}  {times}")
    medians = print_table(results)
    median_with_all = median_error(held_out_errors(points, "leave-one-family-out"))
    print(f"leave-one-family-out, median of all other families: {median_with_all:.1%}")
    spreads = spread(results["roofline"])
    print("roofline held out, spread by family (p25 / median / p75 / max):")
    for family, q in spreads.items():
        print(
            f"  {family:15s} {q['p25']:6.1%} {q['median']:6.1%} {q['p75']:6.1%} {q['max']:7.1%}"
            f"  ({q['n']:.0f} ratios)"
        )
    fragile = sensitivity(points, fit_without)
    for name, value in fragile.items():
        families = " ".join(f"{f} {v:.1%}" for f, v in value.items() if f not in ("all", "kept"))
        medians = f"{value['all']:.1%}, kept {value['kept']:.1%}"
        print(f"roofline held out, {name}: {medians} ({families})")
    k80 = examples(points, args.keep_all)
    print("roofline, K80 speed relative to a V100 at 32 samples (previous roofline; host share")
    print("of the V100 step):", end="")
    print(
        "; ".join(
            f" {name} {v['k80']:.3f} ({v['k80_previous']:.3f}; {v['host_share_v100']:.0%})"
            for name, v in k80.items()
        )
    )
    table = table_json(points, args.keep_all)
    print("fitted speeds relative to v100:", json.dumps(table["families"]))
    print("generic (no family):", table["generic"])
    print("roofline:", json.dumps(table["roofline"]))
    if args.write:
        DATA_FILE.parent.mkdir(parents=True, exist_ok=True)
        DATA_FILE.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
        print(f"wrote {DATA_FILE.relative_to(ROOT)}")
    if args.json:
        out = {
            "date": date.today().isoformat(),
            "machine": platform.platform(),
            "fit_without": sorted(fit_without),
            "median_error": medians,
            "leave_one_family_out_median_of_all_others": median_with_all,
            "roofline_sensitivity": fragile,
            "roofline_spread": spreads,
            "roofline_k80_examples": k80,
            "mean_error": {m: statistics.fmean(e.error for e in results[m]) for m in METHODS},
            "errors": {m: [e.to_dict() | {"error": e.error} for e in results[m]] for m in METHODS},
            "table": table,
        }
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
