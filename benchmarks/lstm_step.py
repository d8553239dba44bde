"""One LSTM training step (forward + backward over a sequence) in each dropout mode.

Goal (BENCHMARKS.md): at hidden 1024, batch 64, p 0.5, the structured mode's step at least 1.5x
faster than the standard mode's (the same Python loop with elementwise masks and full products).
The fused nn.LSTM is timed for reference.

    python benchmarks/lstm_step.py [--hidden 1024 --batch 64 --p 0.5 --threads 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from unstall.sparse import LSTMBenchConfig, bench_lstm_step

GOAL = 1.5


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--p", type=float, default=0.5)
    parser.add_argument("--seq-len", type=int, default=35)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--mask-source",
        default="device",
        choices=("cpu", "device"),
        help="on a GPU, where standard and locked draw their masks (device: as nn.Dropout; cpu: "
        "the same masks as a CPU run)",
    )
    parser.add_argument(
        "--pipeline",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="structured: two single-threaded streams per layer (default: 2 threads, hidden>=1024)",
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    config = LSTMBenchConfig(
        hidden=args.hidden,
        batch=args.batch,
        p=args.p,
        seq_len=args.seq_len,
        num_layers=args.layers,
        repeats=args.repeats,
        threads=args.threads,
        device=args.device,
        mask_source=args.mask_source,
        pipeline=args.pipeline,
    )
    result = bench_lstm_step(config)
    base = result.step_s["standard"]
    print(
        f"hidden {result.hidden}, batch {result.batch}, {result.seq_len} steps, p={result.p}, "
        f"{result.device}, {result.threads} thread(s)"
        + (
            ", masks drawn on the CPU"
            if result.device != "cpu" and result.mask_source == "cpu"
            else ""
        )
        + (", structured pipelined" if result.pipelined else "")
    )
    print(f"{'mode':<18} {'best s':>8} {'median s':>9} {'vs standard':>12}")
    for name, secs in result.step_s.items():
        median = result.step_s_median[name]
        print(f"{name:<18} {secs:>8.3f} {median:>9.3f} {base / secs:>11.2f}x")
    speedup = result.speedup_structured_vs_standard or 0.0
    verdict = "met" if speedup >= GOAL else "not met"
    print(f"structured vs standard: {speedup:.2f}x (goal {GOAL}x: {verdict})")
    if args.json is not None:
        args.json.write_text(result.to_json() + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
