"""Stall profile of a real DDP run, the 4x-slower-link check, and the profiler's own overhead.

1. ``breakdown``: ResNet-18 at 32x32, batch 8 per worker, 2 gloo workers on 127.0.0.1, a PNG
   dataset written to a temp dir (cold and warm passes, pre-decoded cache), an emulated link of
   1 Gbit/s and 0.5 ms per bucket; the phase timers' overhead measured against the same compute
   run without them.
2. ``link check``: the same model over emulated links of 1 and 0.25 Gbit/s with no latency (so
   the whole emulated delay is the bandwidth part): the network stall should grow about 4x.

    .venv/bin/python benchmarks/profile_stalls.py [--model resnet18] [--repeats 3] [--json OUT]
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

from unstall.profile.config import ProfileConfig
from unstall.profile.data import write_image_dataset
from unstall.profile.link import HookState, LinkSpec
from unstall.profile.report import StallReport, profile_stalls
from unstall.profile.runner import PHASES, phase_totals
from unstall.profile.stalls import STALL_FIELDS

MS = 1e3


def _row(label: str, r: StallReport) -> dict[str, Any]:
    row: dict[str, Any] = {"run": label}
    row |= {name: round(getattr(r, name) * MS, 2) for name in STALL_FIELDS}
    row |= {f"{n}_frac": round(r.fractions[n], 3) for n in STALL_FIELDS}
    row["spread_ms"] = {k: round(v.spread_s * MS, 2) for k, v in r.runs.items()}
    row["emulated_delay_ms"] = (
        None if r.emulated_delay_s is None else round(r.emulated_delay_s * MS, 2)
    )
    row["profiler_overhead"] = r.profiler_overhead
    return row


def _link_check(common: dict[str, Any], model: str, options: dict[str, object]) -> dict[str, Any]:
    """Network stall over 1 and 0.25 Gbit/s links without latency: the bandwidth part only."""
    check = {}
    for gbps in (1.0, 0.25):
        config = ProfileConfig(
            **{**common, "model": model},
            model_options=options,
            iterations=4,
            network=LinkSpec(gbps=gbps),
        )
        check[gbps] = _row(f"{gbps} Gbit/s", profile_stalls(config))
    return {
        "fast": check[1.0],
        "slow": check[0.25],
        "stall_ratio": check[0.25]["network_stall_s"] / check[1.0]["network_stall_s"],
        "emulated_delay_ratio": check[0.25]["emulated_delay_ms"] / check[1.0]["emulated_delay_ms"],
    }


def _instrumentation_cost_us(reps: int = 20000) -> float:
    """What the phase timers add to one iteration: five clock reads, the bucket-span records
    of a four-bucket iteration, and the per-phase sums (measured directly, microseconds)."""
    state = HookState(workers=2)
    started = time.perf_counter()
    for _ in range(reps):
        marks = [time.perf_counter() for _ in range(5)]
        state.spans.clear()
        for _ in range(4):
            state.spans.append((marks[0], time.perf_counter()))
        spans = [(p, marks[i], marks[i + 1]) for i, p in enumerate(PHASES[:3])]
        spans += [("allreduce", a, b) for a, b in state.spans]
        phase_totals(spans)
    return (time.perf_counter() - started) / reps * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    common = dict(model=args.model, workers=2, batch=8, repeats=args.repeats, warmup=2)
    results: dict[str, Any] = {
        "machine": f"{platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"
    }
    with tempfile.TemporaryDirectory() as tmp:
        write_image_dataset(Path(tmp), count=512, image_size=32, num_classes=10, seed=0)
        full = profile_stalls(
            ProfileConfig(
                **common,  # type: ignore[arg-type]
                iterations=args.iterations,
                data_dir=Path(tmp),
                network=LinkSpec(gbps=1.0, latency_ms=0.5),
                measure_overhead=True,
            )
        )
    results["breakdown"] = _row("1 Gbit/s, 0.5 ms", full)
    results["phases_ms"] = {
        run: {p: round(v * MS, 2) for p, v in per.items()} for run, per in full.phases.items()
    }
    results["link_check"] = {
        label: _link_check(common, model, options)
        for label, model, options in (
            (args.model, args.model, {}),
            ("mlp (compute ~1 ms)", "mlp", {"in_features": 64, "width": 512, "depth": 4}),
        )
    }
    results["instrumentation_us_per_iteration"] = _instrumentation_cost_us()
    print(json.dumps(results, indent=1))
    print(
        "\nstall breakdown (ms/iter): "
        + ", ".join(f"{n} {results['breakdown'][n]}" for n in STALL_FIELDS)
    )
    print(
        f"profiler overhead (differential) {full.profiler_overhead:+.1%}; instrumentation "
        f"{results['instrumentation_us_per_iteration']:.1f} us/iteration"
    )
    for label, check in results["link_check"].items():
        print(
            f"{label}: 4x slower link: network stall x{check['stall_ratio']:.2f}"
            f" (emulated delay x{check['emulated_delay_ratio']:.2f})"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
