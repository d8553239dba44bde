"""Stall profiler benchmarks: a real DDP run's breakdown, the 4x-slower-link check, the
profiler's own overhead, and the comm-stall model's depth sweep and fit.

Each subcommand but ``fit`` is one timed piece (run each alone on the machine, or under a
shared lock at high priority); ``fit`` only computes, on saved points::

    .venv/bin/python benchmarks/profile_stalls.py breakdown [--repeats 3] [--json OUT]
    .venv/bin/python benchmarks/profile_stalls.py link [--json OUT]
    .venv/bin/python benchmarks/profile_stalls.py overhead [--repeats 11] [--json OUT]
    .venv/bin/python benchmarks/profile_stalls.py sweep --points PTS [--variant V ...]
    .venv/bin/python benchmarks/profile_stalls.py fit --points PTS [--variant V ...]
        [--cv model|variant] [--json OUT]

1. ``breakdown``: ResNet-18 at 32x32, batch 8 per worker, 2 gloo workers on 127.0.0.1, a PNG
   dataset written to a temp dir (cold and warm passes, pre-decoded cache), an emulated link of
   1 Gbit/s and 0.5 ms per bucket.
2. ``link``: the same model, and a compute-light MLP, over emulated links of 1 and 0.25 Gbit/s
   with no latency (the whole emulated delay is the bandwidth part): the network stall should
   grow about 4x.
3. ``overhead``: the compute run (one worker) and the local DDP run, each with and without the
   phase timers, alternated within every round (ABBA order across rounds); the overhead is the
   median over rounds of timed / untimed - 1, and the timers' direct cost is measured too.
4. ``sweep``: each variant's sweep point (DDP buckets, one-worker backward time, both comm stalls)
   over the fit's link (1 Gbit/s, 1 ms per bucket), appended to ``PTS``; variants already in the
   file are skipped, so the sweep can run in pieces. ``fit`` fits every candidate form of the
   comm-stall model on them, picks one by cross-validation over the sweep (leave one zoo model
   out, or with ``--cv variant`` one point out) and predicts the held-out model (no measuring).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from unstall.net.link import Link
from unstall.profile import (
    CV_GROUPS,
    DEFAULT_HELD_OUT,
    DEFAULT_SWEEP,
    STALL_FIELDS,
    ProfileConfig,
    StallReport,
    SweepPoint,
    fit_comm_stall,
    load_points,
    measure_points,
    measure_stalls,
    save_points,
    sweep_measure,
    write_image_dataset,
)

# private on purpose: the phase timers' own cost is measured on the hook state and the phase
# arithmetic themselves, which no public entry exposes.
from unstall.profile.comm_hook import HookState
from unstall.profile.steps import PHASES, phase_totals

MS = 1e3
BATCH = 8
COMMON: dict[str, Any] = dict(workers=2, warmup=2)
FIT_LINK = Link(bandwidth_gbps=1.0, latency_us=1000.0)  # what `profile fit` sweeps over


def _profile(model_text: str, data_text: str | None = None, **settings: Any) -> StallReport:
    """``model_text`` (a zoo name or variant) on ``data_text`` (default: its synthetic batches),
    by name, profiled with ``COMMON`` and ``settings``."""
    config = ProfileConfig(**{**COMMON, **settings})
    return measure_stalls(model_text, data_text, config, batch=BATCH)


def _machine() -> str:
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    return f"{platform.machine()}, {os.cpu_count()} cores, load average {load}"


def _row(label: str, r: StallReport) -> dict[str, Any]:
    row: dict[str, Any] = {"run": label}
    row |= {name: round(getattr(r, name) * MS, 2) for name in STALL_FIELDS}
    row |= {f"{n}_frac": round(r.fractions[n], 3) for n in STALL_FIELDS}
    row["runs_ms"] = {
        k: {
            "median": round(v.median_s * MS, 2),
            "min": round(v.min_s * MS, 2),
            "max": round(v.max_s * MS, 2),
        }
        for k, v in r.runs.items()
    }
    row["emulated_delay_ms"] = (
        None if r.emulated_delay_s is None else round(r.emulated_delay_s * MS, 2)
    )
    return row


def breakdown(args: argparse.Namespace) -> dict[str, Any]:
    """The full differential profile of ResNet-18 with a dataset and an emulated link."""
    with tempfile.TemporaryDirectory() as tmp:
        write_image_dataset(Path(tmp), count=512, image_size=32, num_classes=10, seed=0)
        report = _profile(
            "resnet18",
            tmp,
            repeats=args.repeats,
            iterations=args.iterations,
            network=Link(bandwidth_gbps=1.0, latency_us=500.0),
        )
    result = _row("1 Gbit/s, 0.5 ms", report)
    result["phases_ms"] = {
        run: {p: round(v * MS, 2) for p, v in per.items()} for run, per in report.phases.items()
    }
    print(
        "stall breakdown (ms/iter): "
        + ", ".join(f"{n} {result[n]} ({result[n + '_frac']:.1%})" for n in STALL_FIELDS)
    )
    return result


def link_check(args: argparse.Namespace) -> dict[str, Any]:
    """Network stall over 1 and 0.25 Gbit/s links without latency: the bandwidth part only."""
    models = (
        ("resnet18", "resnet18"),
        ("mlp 64-512x4", "mlp:in_features=64,width=512,depth=4"),
    )
    results: dict[str, Any] = {}
    for label, model in models:
        rows = {}
        for gbps in (1.0, 0.25):
            report = _profile(
                model, iterations=4, repeats=args.repeats, network=Link(bandwidth_gbps=gbps)
            )
            rows[gbps] = _row(f"{gbps} Gbit/s", report)
        results[label] = {
            "fast": rows[1.0],
            "slow": rows[0.25],
            "stall_ratio": rows[0.25]["network_stall_s"] / rows[1.0]["network_stall_s"],
            "emulated_delay_ratio": rows[0.25]["emulated_delay_ms"]
            / rows[1.0]["emulated_delay_ms"],
        }
        check = results[label]
        print(
            f"{label}: 4x slower link: network stall {rows[1.0]['network_stall_s']} ->"
            f" {rows[0.25]['network_stall_s']} ms, x{check['stall_ratio']:.2f}"
            f" (emulated delay x{check['emulated_delay_ratio']:.2f})"
        )
    return results


def _instrumentation_cost_us(reps: int = 20000) -> float:
    """What the phase timers add to one iteration: five clock reads, the bucket-span records
    of a three-bucket iteration, and the per-phase sums (measured directly, microseconds)."""
    state = HookState(workers=2)
    started = time.perf_counter()
    for _ in range(reps):
        marks = [time.perf_counter() for _ in range(5)]
        state.spans.clear()
        for _ in range(3):
            state.spans.append((time.perf_counter(), time.perf_counter()))
        spans = [(p, marks[i], marks[i + 1]) for i, p in enumerate(PHASES[:3])]
        spans += [("allreduce", a, b) for a, b in state.spans]
        phase_totals(spans)
    return (time.perf_counter() - started) / reps * 1e6


def overhead(args: argparse.Namespace) -> dict[str, Any]:
    """Timed against untimed runs, alternated; paired per round."""
    report = _profile(
        "resnet18", repeats=args.repeats, iterations=args.iterations, measure_overhead=True
    )
    assert report.profiler_overhead is not None and report.profiler_overhead_samples is not None
    result: dict[str, Any] = {"runs_ms": _row("overhead", report)["runs_ms"]}
    result["overhead"] = report.profiler_overhead
    result["paired_ratios"] = report.profiler_overhead_samples
    result["instrumentation_us_per_iteration"] = _instrumentation_cost_us()
    compute_ms = report.runs["compute"].median_s * MS
    result["instrumentation_fraction"] = (
        result["instrumentation_us_per_iteration"] / 1e3 / compute_ms
    )
    for run, value in report.profiler_overhead.items():
        ratios = report.profiler_overhead_samples[run]
        print(
            f"{run}: profiler overhead median {value:+.2%} over {len(ratios)} paired rounds"
            f" (min {min(ratios):+.2%}, max {max(ratios):+.2%})"
        )
    print(
        f"instrumentation {result['instrumentation_us_per_iteration']:.1f} us/iteration"
        f" = {result['instrumentation_fraction']:.4%} of a {compute_ms:.1f} ms iteration"
    )
    return result


def _fit_base(args: argparse.Namespace) -> ProfileConfig:
    return ProfileConfig(
        workers=2,
        network=FIT_LINK,
        iterations=4,
        warmup=2,
        repeats=args.repeats,
    )


def sweep(args: argparse.Namespace) -> dict[str, Any]:
    """Measure the variants not yet in ``--points`` (default: the sweep and the held-out)."""
    variants = args.variant or [*DEFAULT_SWEEP, DEFAULT_HELD_OUT]
    started = time.perf_counter()

    def show(point: SweepPoint, points: dict[str, SweepPoint]) -> None:
        save_points(args.points, points)
        print(
            f"{point.variant}: network {point.network_stall_s * MS:.1f} ms, interconnect"
            f" {point.interconnect_stall_s * MS:.1f} ms, backward {point.backward_s * MS:.1f} ms,"
            f" {len(point.bucket_bytes)} buckets ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )

    known = load_points(args.points)
    missing = [v for v in variants if v not in known]
    measure = sweep_measure(missing, _fit_base(args), batch=BATCH, image_size=32)
    points = measure_points(variants, measure, known=known, on_point=show)
    return {"points": {v: points[v].to_dict() for v in variants}}


def fit(args: argparse.Namespace) -> dict[str, Any]:
    """Fit every candidate on the saved sweep points (``--variant``s, default the whole sweep;
    no measuring), pick one by cross-validation (``--cv``), and predict the held-out variant."""
    points = load_points(args.points)
    sweep_variants = [v for v in args.variant or DEFAULT_SWEEP if v in points]
    if DEFAULT_HELD_OUT not in points or len(sweep_variants) < 3:
        raise SystemExit(f"{args.points}: too few points; run the sweep subcommand first")
    results: dict[str, Any] = {"sweep": sweep_variants, "held_out": DEFAULT_HELD_OUT}
    results["not_measured"] = [v for v in args.variant or DEFAULT_SWEEP if v not in points]
    results["cv"] = args.cv
    print(f"sweep {sweep_variants}; not measured {results['not_measured']}")
    held = points[DEFAULT_HELD_OUT]
    for stall in ("comm", "network", "interconnect"):
        result = fit_comm_stall(
            [points[v] for v in sweep_variants],
            stall=stall,
            held_out=held,
            link=FIT_LINK,
            cv_groups=args.cv,
        )
        results[stall] = result.to_dict()
        print(f"{stall} stall; {DEFAULT_HELD_OUT} measured {held.stall(stall) * MS:.1f} ms")
        for c in result.candidates:
            q, cv = c.quality, c.cross_validation
            assert q.held_out_predicted_s is not None and q.held_out_rel_error is not None
            print(
                f"  {c.name}{' (picked)' if c.name == result.selected else ''}:"
                f" {c.model.describe()}; R^2 {q.r2:.4f}, mean |rel err| {q.mean_abs_rel_error:.1%};"
                f" leave-one-{cv.groups}-out mean {cv.mean_abs_rel_error:.1%}"
                f" (max {cv.max_abs_rel_error:.1%}); held-out predicted"
                f" {q.held_out_predicted_s * MS:.1f} ms ({q.held_out_rel_error:+.1%})"
            )
        print(f"  picked {result.selected}: {result.reason}")
    return results


COMMANDS = {"breakdown": breakdown, "link": link_check, "overhead": overhead}
COMMANDS |= {"sweep": sweep, "fit": fit}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=sorted(COMMANDS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--points", type=Path, default=Path("profile_fit_points.json"))
    parser.add_argument("--variant", action="append", default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--cv", choices=sorted(CV_GROUPS), default="model")
    args = parser.parse_args()
    machine_before = _machine()
    started = time.perf_counter()
    result = COMMANDS[args.command](args)
    result["machine"] = {"before": machine_before, "after": _machine()}
    result["wall_s"] = round(time.perf_counter() - started, 1)
    print(f"{result['machine']}, {result['wall_s']} s")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
