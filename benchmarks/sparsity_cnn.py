"""Predicted back-propagation speed-ups of a zero-skipping systolic array on five CNNs, measured
after the networks have trained for a while, beside the published ranges.

Each model trains with SGD on the learnable synthetic classes (or ``--data`` image folder) for
``--warmup-steps`` steps; the next ``--steps`` steps are recorded and fed to the speed model
(SCALE-Sim dense cycles, tile-level zero skipping). The main array is the plain lockstep one;
``--compare-skip-rows`` adds finer skipping granularities predicted from the same steps, and the
ideal element-level bound is always reported.

    python benchmarks/sparsity_cnn.py --image-size 64 --batch-size 8 --warmup-steps 150 \\
        --steps 2 --threads 1 --json bench-results/sparsity_cnn.json

Writes the JSON after every model, so a long run can be followed and keeps what it finished.
Models can run in separate processes and be put together afterwards:

    python benchmarks/sparsity_cnn.py --combine a.json b.json --json all.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

from unstall.results import to_jsonable
from unstall.sparse.accelerator import AcceleratorConfig
from unstall.sparse.analyzer import AnalyzerConfig
from unstall.sparse.cnn_sparsity import (
    PUBLISHED_BACKPROP_SPEEDUP_VS_DENSE,
    PUBLISHED_SPEEDUP_VS_SPARSITY_AGNOSTIC,
    CNNSparsityConfig,
    CNNSparsityResult,
    analyze_cnn,
)
from unstall.sparse.scalesim_adapter import ArrayConfig

MODELS = "alexnet,resnet18,mobilenet_v2,resnet50,vgg16"


class ProgressLog:
    """A line every 25 steps with the rate: the run is followed in a log file."""

    def __init__(self, model: str, total: int) -> None:
        self.model, self.total, self.seen = model, total, 0
        self.start = time.perf_counter()

    def __call__(self, n: int) -> None:
        self.seen += n
        if self.seen % 25 == 0 or self.seen == self.total:
            elapsed = time.perf_counter() - self.start
            print(f"[{self.model}] step {self.seen}/{self.total} {elapsed:.0f}s", flush=True)


def summary_row(r: CNNSparsityResult) -> dict[str, Any]:
    s = r.summary
    row: dict[str, Any] = {
        "model": r.model,
        "warmup_steps": r.training.warmup_steps,
        "warmup_loss_start": r.training.warmup_loss_start,
        "warmup_loss_end": r.training.warmup_loss_end,
        "recorded_accuracy": r.training.recorded_accuracy,
        "mean_input_density": _mean([x.sparsity.input_density for x in r.layers[1:]]),
        "mean_relu_grad_density": _mean(
            [x.sparsity.relu_grad_density for x in r.layers if x.sparsity.relu_grad_density]
        ),
        "forward_speedup": s.forward_speedup,
        "backprop_speedup_vs_dense": s.backprop_speedup_vs_dense,
        "speedup_vs_input_only": s.speedup_vs_input_only,
        "ideal_backprop_speedup_vs_dense": s.ideal_backprop_speedup_vs_dense,
        "ideal_speedup_vs_input_only": s.ideal_speedup_vs_input_only,
    }
    for c in r.comparisons:
        key = c.accelerator.split(", ")[1]  # "skip_rows=N"
        row[f"{key} backprop_speedup_vs_dense"] = c.summary.backprop_speedup_vs_dense
        row[f"{key} speedup_vs_input_only"] = c.summary.speedup_vs_input_only
    return row


def _mean(values: list[float | None]) -> float:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else float("nan")


def print_table(rows: list[dict[str, Any]]) -> None:
    lo, hi = PUBLISHED_BACKPROP_SPEEDUP_VS_DENSE
    lo2, hi2 = PUBLISHED_SPEEDUP_VS_SPARSITY_AGNOSTIC
    keys = [k for k in rows[0] if k not in ("model",)]
    print("model".ljust(14) + " ".join(k[:22].rjust(22) for k in keys))
    for row in rows:
        cells = [f"{row[k]:.3f}" if isinstance(row[k], float) else str(row[k]) for k in keys]
        print(row["model"].ljust(14) + " ".join(c.rjust(22) for c in cells))
    print(
        f"published (Sarma et al. 2021, ImageNet): back-prop {lo}x-{hi}x over dense, "
        f"{lo2}x-{hi2}x over sparsity-agnostic"
    )


def combine(paths: list[Path], out: Path | None) -> int:
    """Put the models of several runs into one JSON and print their table; each row also says
    how many warm-up steps its model had."""
    merged: dict[str, Any] = {"args": [], "models": {}, "summary": []}
    rows: dict[str, dict[str, Any]] = {}
    for path in paths:  # a model in a later file replaces the same model in an earlier one
        part = json.loads(path.read_text())
        merged["args"].append(part["args"])
        merged["models"].update(part["models"])
        rows.update({row["model"]: row for row in part["summary"]})
    for name, row in rows.items():
        row.setdefault("warmup_steps", merged["models"][name]["training"]["warmup_steps"])
    merged["summary"] = list(rows.values())
    print_table(merged["summary"])
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(merged, indent=1) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=MODELS)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--warmup-steps", type=int, default=150)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--array", default="32x32")
    p.add_argument("--dataflow", default="os")
    p.add_argument("--compare-skip-rows", default="1")
    p.add_argument("--data", type=Path, default=None)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=Path("bench-results/sparsity_cnn.json"))
    p.add_argument("--combine", type=Path, nargs="+", default=None, help="JSONs of earlier runs")
    args = p.parse_args(argv)
    if args.combine:
        return combine(args.combine, args.json)
    torch.set_num_threads(args.threads)
    array = ArrayConfig.parse(args.array, args.dataflow)
    compare = tuple(
        AcceleratorConfig(array=array, skip_rows=int(n))
        for n in args.compare_skip_rows.split(",")
        if n.strip()
    )
    results: dict[str, Any] = {"args": to_jsonable(vars(args)), "models": {}, "summary": []}
    rows = []
    for model in args.models.split(","):
        config = CNNSparsityConfig(
            analyzer=AnalyzerConfig(
                model=model,
                image_size=args.image_size,
                batch_size=args.batch_size,
                warmup_steps=args.warmup_steps,
                steps=args.steps,
                lr=args.lr,
                data=args.data,
                seed=args.seed,
            ),
            accelerator=AcceleratorConfig(array=array),
            compare=compare,
        )
        start = time.perf_counter()
        result = analyze_cnn(config, ProgressLog(model, args.warmup_steps + args.steps))
        print(f"[{model}] done in {time.perf_counter() - start:.0f}s", flush=True)
        rows.append(summary_row(result))
        results["models"][model] = result.to_dict()
        results["summary"] = rows
        if args.json is not None:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(to_jsonable(results), indent=1) + "\n")
        print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
