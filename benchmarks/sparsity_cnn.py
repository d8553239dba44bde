"""Predicted speed-ups of a zero-skipping systolic array on five CNNs, measured after the
networks have trained for a while, beside the published ranges.

Each model trains with SGD on the learnable synthetic classes (or a ``--data`` image folder) for
its warm-up steps (``--warmup-steps 300`` or per model, ``resnet18=1500,vgg16=300``); trained
weights are cached under ``--cache`` (a rerun resumes from them, so training happens once:
``--train-only`` does only that). The next ``--steps`` steps are recorded and fed to the speed
model: SCALE-Sim dense cycles on every dataflow and skipping model named by ``--accelerators``
(``DATAFLOW/MODEL[:LOOKAHEAD]``; the first is the main one), and the ideal element-level bound.

    python benchmarks/sparsity_cnn.py --image-size 32 --batch-size 16 \\
        --warmup-steps alexnet=500,resnet18=1500,mobilenet_v2=1500,resnet50=800,vgg16=300 \\
        --steps 2 --threads 1 --json bench-results/sparsity_cnn.json

Writes the JSON after every model, so a long run keeps what it finished; prints markdown tables.
Models can run in separate processes and be put together afterwards:

    python benchmarks/sparsity_cnn.py --combine a.json b.json --json all.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from unstall.results import to_jsonable
from unstall.sparse.cnn import (
    PUBLISHED_BACKPROP_SPEEDUP_VS_DENSE,
    PUBLISHED_SPEEDUP_VS_SPARSITY_AGNOSTIC,
    AcceleratorConfig,
    AnalyzerConfig,
    CNNSparsityConfig,
    ImageSource,
    analyze_cnn,
    profile_training,
)
from unstall.sparse.cnn import names as resolve

MODELS = "alexnet,resnet18,mobilenet_v2,resnet50,vgg16"
ACCELERATORS = ",".join(
    f"{flow}/{model}"
    for flow in ("os", "ws", "is")
    for model in ("lockstep", "per-row:8", "per-row:64", "per-row")
)


class ProgressLog:
    """A line every 25 steps with the time so far: the run is followed in a log file."""

    def __init__(self, model: str, total: int) -> None:
        self.model, self.total, self.seen = model, total, 0
        self.start = time.perf_counter()

    def __call__(self, n: int) -> None:
        before, self.seen = self.seen, self.seen + n
        if self.seen // 25 > before // 25 or self.seen == self.total:
            elapsed = time.perf_counter() - self.start
            print(f"[{self.model}] step {self.seen}/{self.total} {elapsed:.0f}s", flush=True)


def _mean(values: list[float | None]) -> float:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else float("nan")


def training_row(r: dict[str, Any]) -> dict[str, Any]:
    """How long the model trained, how far it got, its mean densities (from the result JSON)."""
    t, layers = r["training"], [x["sparsity"] for x in r["layers"]]
    return {
        "model": r["model"],
        "image/batch": f"{r['image_size']}px/{r['batch_size']}",
        "warm-up steps": t["warmup_steps"],
        "loss start": t["warmup_loss_start"],
        "loss end": t["warmup_loss_end"],
        "train acc end": t["warmup_accuracy_end"],
        "eval acc": t["eval_accuracy"],
        "input density": _mean([x["input_density"] for x in layers[1:]]),
        "dY density": _mean([x["grad_density"] for x in layers]),
        "dZ density": _mean([x["relu_grad_density"] for x in layers]),
        "known": _mean([x["known_zero_share"] for x in layers]),
        "padding": _weighted_padding(layers),
    }


def _weighted_padding(layers: list[dict[str, Any]]) -> float:
    """The share of the forward im2col operands that is zero padding, weighted by MACs."""
    macs = [_macs(x["gemms"]["forward"]) for x in layers]
    padded = sum(x.get("padding_share", 0.0) * m for x, m in zip(layers, macs, strict=True))
    return padded / sum(macs)


def _macs(g: dict[str, int]) -> int:
    return g["m"] * g["n"] * g["k"] * g["groups"]


def speed_rows(r: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per dataflow and skipping model: the main accelerator, then the comparisons."""
    first = {
        "dataflow": r["array"].split()[-1],
        "skipping": r["skipping"],
        "summary": r["summary"],
        "conv_summary": r["conv_summary"],
    }
    rows = []
    for c in [first, *r["comparisons"]]:
        s, conv = c["summary"], c["conv_summary"]
        rows.append(
            {
                "model": r["model"],
                "dataflow": c["dataflow"],
                "skipping": c["skipping"],
                "fwd": s["forward_speedup"],
                "dX": s["input_grad_speedup"],
                "dW": s["weight_grad_speedup"],
                "bprop vs dense": s["backprop_speedup_vs_dense"],
                "bprop vs input-only": s["speedup_vs_input_only"],
                "input-only bprop": s["input_only_backprop_speedup"],
                "ideal bprop vs dense": s["ideal_backprop_speedup_vs_dense"],
                "ideal vs input-only": s["ideal_speedup_vs_input_only"],
                "conv bprop vs dense": conv["backprop_speedup_vs_dense"],
                "conv vs input-only": conv["speedup_vs_input_only"],
                "conv ideal vs dense": conv["ideal_backprop_speedup_vs_dense"],
            }
        )
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for row in rows:
        cells = [f"{v:.2f}" if isinstance(v, float) else str(v) for v in row.values()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def print_tables(models: dict[str, dict[str, Any]]) -> None:
    lo, hi = PUBLISHED_BACKPROP_SPEEDUP_VS_DENSE
    lo2, hi2 = PUBLISHED_SPEEDUP_VS_SPARSITY_AGNOSTIC
    print(markdown([training_row(r) for r in models.values()]))
    print()
    print(markdown([row for r in models.values() for row in speed_rows(r)]))
    print(
        f"published (Sarma et al. 2021, ImageNet): back-prop {lo}x-{hi}x over dense, "
        f"{lo2}x-{hi2}x over sparsity-agnostic",
        flush=True,
    )


def combine(paths: list[Path], out: Path | None) -> int:
    """Put the models of several runs into one JSON and print their tables (a model in a later
    file replaces the same model in an earlier one)."""
    merged: dict[str, Any] = {"args": [], "models": {}}
    for path in paths:
        part = json.loads(path.read_text())
        merged["args"].append(part["args"])
        merged["models"].update(part["models"])
    print_tables(merged["models"])
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(merged, indent=1) + "\n")
    return 0


def warmup_steps(text: str, model: str) -> int:
    """``"300"`` or ``"resnet18=1500,vgg16=300"`` (a model left out trains 0 steps)."""
    if "=" not in text:
        return int(text)
    pairs = dict(p.split("=") for p in text.split(",") if p.strip())
    return int(pairs.get(model, 0))


def _analyzer_config(args: argparse.Namespace, model: str) -> AnalyzerConfig:
    return AnalyzerConfig(
        model=model,
        image_size=args.image_size,
        batch_size=args.batch_size,
        warmup_steps=warmup_steps(args.warmup_steps, model),
        steps=args.steps,
        lr=args.lr,
        data=_text(args.data),
        seed=args.seed,
    )


def _text(path: Path | None) -> str | None:
    return None if path is None else str(path)


def _model(name: str, config: AnalyzerConfig, data: ImageSource | None) -> Callable[[], nn.Module]:
    classes = data.num_classes if data is not None else config.num_classes
    return resolve.cnn_model(name, image_size=config.image_size, num_classes=classes)


def train_only(args: argparse.Namespace) -> int:
    """Train each model to its warm-up steps (resuming from the cache); print how far it got."""
    data = resolve.image_source(_text(args.data), args.image_size)
    for model in args.models.split(","):
        config = _analyzer_config(args, model)
        start = time.perf_counter()
        progress = ProgressLog(model, config.warmup_steps + config.steps)
        profile = profile_training(
            _model(model, config, data),
            data,
            config=config,
            loss=resolve.cnn_loss(model),
            progress=progress,
            cache_dir=args.cache,
            checkpoint_every=args.checkpoint_every,
        )
        print(f"[{model}] trained in {time.perf_counter() - start:.0f}s: {profile.training}")
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--models", default=MODELS)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--warmup-steps", default="300", help="N, or MODEL=N,MODEL=N")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--array", default="32x32")
    p.add_argument("--accelerators", default=ACCELERATORS, help="DATAFLOW/MODEL[:LOOKAHEAD],...")
    p.add_argument("--data", type=Path, default=None)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=Path("bench-results/sparsity_cnn.json"))
    p.add_argument("--combine", type=Path, nargs="+", default=None, help="JSONs of earlier runs")
    p.add_argument(
        "--cache",
        type=Path,
        default=Path("bench-results/cnn-weights"),
        help="trained-weight checkpoints, a rerun resumes from them (sparse/cnn/train_cache.py)",
    )
    p.add_argument("--checkpoint-every", type=int, default=50)
    p.add_argument("--train-only", action="store_true", help="train (and cache) only")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.combine:
        return combine(args.combine, args.json)
    torch.set_num_threads(args.threads)
    if args.train_only:
        return train_only(args)
    base = AcceleratorConfig(array=resolve.array_config(args.array))
    accelerators = resolve.accelerators(args.accelerators, base)
    data = resolve.image_source(_text(args.data), args.image_size)
    results: dict[str, Any] = {"args": to_jsonable(vars(args)), "models": {}}
    for model in args.models.split(","):
        config = CNNSparsityConfig(
            analyzer=_analyzer_config(args, model),
            accelerator=accelerators[0],
            compare=tuple(accelerators[1:]),
        )
        start = time.perf_counter()
        total = config.analyzer.warmup_steps + config.analyzer.steps
        result = analyze_cnn(
            _model(model, config.analyzer, data),
            data,
            config=config,
            loss=resolve.cnn_loss(model),
            progress=ProgressLog(model, total),
            cache_dir=args.cache,
        )
        print(f"[{model}] done in {time.perf_counter() - start:.0f}s", flush=True)
        results["models"][model] = to_jsonable(result.to_dict())
        if args.json is not None:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(results, indent=1) + "\n")
        print_tables(results["models"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
