"""Whole-PTB language-model training, standard vs structured dropout at the same p and epochs.

Reports the training time of every epoch and the validation/test perplexity of each mode, the
per-epoch speedup of each structured mode over ``standard``, and the validation perplexity gap.
Goals (BENCHMARKS.md): >= 1.23x per epoch, validation perplexity within 3% of standard.

    python benchmarks/lstm_ptb.py --modes standard,structured --epochs 1 --json out.json
    # or one process per mode (e.g. in parallel), then:
    python benchmarks/lstm_ptb.py --compare std.json structured.json --json out.json \
        --plot lstm_ptb.png   # validation perplexity against cumulative training time per mode
    # a long run in pieces: one epoch per process, resumed from a checkpoint per run
    python benchmarks/lstm_ptb.py --modes standard --epochs 2 --stop-after 1 \
        --checkpoint-dir ckpt --json std.json    # run twice: epoch 1, then epoch 2 and test

A run is named by its mode, plus ``/in<k>`` and ``/dec<k>`` when the structured input or decoder
dropout set is held for k steps (``--input-mask-steps``, ``--decoder-mask-steps``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from unstall.results import to_jsonable
from unstall.sparse.lstm import LMConfig, batches_per_epoch, load_ptb, train_lm

SPEEDUP_GOAL = 1.23
PPL_GOAL = 0.03


class ProgressLog:
    """Prints a line every 25 batches: the run takes long and is followed in a log file."""

    def __init__(self, mode: str, total: int) -> None:
        self.mode, self.total, self.seen = mode, total, 0
        self.start = time.perf_counter()

    def __call__(self, n: int) -> None:
        self.seen += n
        if self.seen % 25 == 0 or self.seen == self.total:
            rate = self.seen / (time.perf_counter() - self.start)
            print(f"[{self.mode}] batch {self.seen}/{self.total}  {rate:.3f} batch/s", flush=True)


def run_label(config: LMConfig) -> str:
    """The run's name in the JSON and the tables: its mode, and its held dropout sets if any."""
    label = config.mode
    if not config.mode.startswith("structured"):
        # the elementwise modes draw a fresh mask every step whatever is asked; on a GPU, masks
        # drawn on the CPU (--mask-source cpu) slow them down, which the label says
        cpu_masks = config.device != "cpu" and config.mask_source == "cpu"
        return label + ("/cpu-masks" if cpu_masks else "")
    if config.input_mask_steps > 1:
        label += f"/in{config.input_mask_steps}"
    if config.decoder_mask_steps > 1:
        label += f"/dec{config.decoder_mask_steps}"
    if config.pipeline is not None:
        label += "/pipelined" if config.pipeline else "/serial"
    if config.decoder_split is not None:
        label += "/dec-split" if config.decoder_split else "/dec-serial"
    return label


def run(args: argparse.Namespace) -> dict[str, Any]:
    corpus = load_ptb()
    runs: dict[str, Any] = {}
    for mode in args.modes.split(","):
        config = LMConfig(
            mode=mode,
            p=args.p,
            hidden=args.hidden,
            layers=args.layers,
            batch=args.batch,
            epochs=args.epochs,
            max_batches=args.max_batches,
            threads=args.threads,
            device=args.device,
            mask_source=args.mask_source,
            seed=args.seed,
            input_mask_steps=args.input_mask_steps,
            decoder_mask_steps=args.decoder_mask_steps,
            pipeline=args.pipeline,
            decoder_split=args.decoder_split,
        )
        label = run_label(config)
        checkpoint = None
        if args.checkpoint_dir is not None:
            args.checkpoint_dir.mkdir(parents=True, exist_ok=True)
            checkpoint = args.checkpoint_dir / f"{label.replace('/', '_')}.pt"
        pieces = config.epochs if args.stop_after is None else min(args.stop_after, config.epochs)
        total = batches_per_epoch(corpus, config) * pieces
        result = train_lm(config, corpus, ProgressLog(label, total), checkpoint, args.stop_after)
        runs[label] = {"config": to_jsonable(config), "result": result.to_dict()}
        for e in result.epochs:
            print(
                f"[{label}] epoch {e.epoch}: train {e.train_s:.1f} s, train ppl {e.train_ppl:.2f}, "
                f"valid ppl {e.valid_ppl:.2f}",
                flush=True,
            )
        print(f"[{label}] test ppl {result.test_ppl:.2f}", flush=True)
    return runs


SHAPE_KEYS = (
    "hidden", "layers", "batch", "bptt", "p", "seed", "threads", "device", "mask_source"
)  # fmt: skip


def _config(run_: dict[str, Any]) -> dict[str, Any]:
    """A run's config; a run whose JSON has no device (mask source) ran on the CPU (drew its
    masks there): the defaults before those fields were recorded."""
    return {"device": "cpu", "mask_source": "cpu", **run_["config"]}


def _shape(run_: dict[str, Any]) -> tuple[Any, ...]:
    """What must match for two runs to be compared: sizes, p, seed, threads, device, and on a GPU
    the mask source (on a CPU both sources are the same draws)."""
    config = _config(run_)
    if config["device"] == "cpu":
        config["mask_source"] = "cpu"
    return tuple(config[k] for k in SHAPE_KEYS)


def compare(runs: dict[str, Any]) -> dict[str, Any]:
    """Speedup per epoch and validation-perplexity gap of every run against the ``standard`` run
    of the same sizes, p, seed and threads (runs without one are left out of the summary)."""
    bases = {_shape(r): r["result"] for r in runs.values() if r["config"]["mode"] == "standard"}
    summary: dict[str, Any] = {}
    for label, run_ in runs.items():
        base = bases.get(_shape(run_))
        if base is None:
            continue
        res = run_["result"]
        epochs = min(len(res["epochs"]), len(base["epochs"]))
        base_epochs = base["epochs"][:epochs]  # the baseline over as many epochs
        base_s = sum(e["train_s"] for e in base_epochs) / epochs
        base_ppl = base_epochs[-1]["valid_ppl"]
        mean_s = sum(e["train_s"] for e in res["epochs"][:epochs]) / epochs
        ppl = res["epochs"][epochs - 1]["valid_ppl"]
        summary[label] = {
            "epochs": epochs,
            # after each epoch, not only the last: early gaps close as both models converge
            "valid_ppl_gap_by_epoch": [
                e["valid_ppl"] / b["valid_ppl"] - 1.0
                for e, b in zip(res["epochs"][:epochs], base_epochs, strict=True)
            ],
            "train_s_per_epoch": mean_s,
            "speedup_per_epoch_vs_standard": base_s / mean_s,
            "final_valid_ppl": ppl,
            "valid_ppl_rel_diff_vs_standard": ppl / base_ppl - 1.0,
            "test_ppl": res["test_ppl"],
            "meets_speed_goal": base_s / mean_s >= SPEEDUP_GOAL,
            "meets_ppl_goal": ppl / base_ppl - 1.0 <= PPL_GOAL,
        }
    return {"runs": runs, "summary": summary, "across_seeds": across_seeds(runs, summary)}


def across_seeds(runs: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    """The perplexity gap of each configuration (mode, held sets, sizes, p, threads, device) over
    the seeds it ran with: after a few epochs one seed's gap moves by several points with the masks
    and even with the float rounding, so a 3% criterion is judged on the mean. Keyed by the
    first run's label; only configurations with two seeds or more."""
    groups: dict[tuple[Any, ...], list[str]] = {}
    for label in summary:
        config = _config(runs[label])
        if config["mode"] == "standard":
            continue
        held = (config.get("input_mask_steps", 1), config.get("decoder_mask_steps", 1))
        key = (config["mode"], *held, *(config[k] for k in SHAPE_KEYS if k != "seed"))
        groups.setdefault(key, []).append(label)
    out: dict[str, Any] = {}
    for labels in groups.values():
        seeds = [runs[label]["config"]["seed"] for label in labels]
        if len(set(seeds)) < 2:
            continue
        gaps = [summary[label]["valid_ppl_rel_diff_vs_standard"] for label in labels]
        per_seed = [summary[label]["valid_ppl_gap_by_epoch"] for label in labels]
        by_epoch = zip(*per_seed, strict=False)
        out[labels[0]] = {
            "seeds": seeds,
            "gaps": gaps,
            "mean_gap": statistics.mean(gaps),
            "stdev_gap": statistics.stdev(gaps),
            "meets_ppl_goal_on_mean": statistics.mean(gaps) <= PPL_GOAL,
            # over the epochs every seed ran (zip stops at the shortest run)
            "mean_gap_by_epoch": [statistics.mean(epoch) for epoch in by_epoch],
        }
    return out


# What a repeated label gets appended, by the config field that differs from the first run's.
LABEL_TAGS = (("batch", "b"), ("threads", "t"), ("seed", "s"), ("device", ""))


def merge_runs(paths: list[Path]) -> dict[str, Any]:
    """Runs of earlier ``--json`` outputs; a label seen twice gets what sets the run apart from
    the first run of that label appended: its batch size (``b128``), threads (``t1``), seed
    (``s2``), device (``cuda``)."""
    runs: dict[str, Any] = {}
    for path in paths:
        for label, run_ in json.loads(path.read_text())["runs"].items():
            if label in runs:
                first, config = _config(runs[label]), _config(run_)
                label += "".join(
                    f" {tag}{config[key]}" for key, tag in LABEL_TAGS if config[key] != first[key]
                )
            if label in runs:
                raise SystemExit(
                    f"{path}: run {label!r} twice with the same batch, threads, seed and device"
                )
            runs[label] = run_
    return runs


def print_table(report: dict[str, Any]) -> None:
    print(
        f"{'run':<24} {'epochs':>6} {'s/epoch':>9} {'speedup':>8} {'valid ppl':>10} {'gap':>7}"
        f" {'test ppl':>9}"
    )
    for mode, s in report.get("summary", {}).items():
        test = "-" if s["test_ppl"] is None else f"{s['test_ppl']:.2f}"  # None: not the last epoch
        print(
            f"{mode:<24} {s['epochs']:>6} {s['train_s_per_epoch']:>9.1f}"
            f" {s['speedup_per_epoch_vs_standard']:>7.3f}x {s['final_valid_ppl']:>10.2f}"
            f" {100 * s['valid_ppl_rel_diff_vs_standard']:>6.2f}% {test:>9}"
        )
    for label, g in report.get("across_seeds", {}).items():
        gaps = ", ".join(f"{100 * gap:+.1f}%" for gap in g["gaps"])
        print(
            f"{label} over seeds {g['seeds']}: valid ppl gap {gaps}; mean"
            f" {100 * g['mean_gap']:+.2f}% (sd {100 * g['stdev_gap']:.2f} points)"
        )
        if len(g["mean_gap_by_epoch"]) > 1:
            means = ", ".join(f"{100 * gap:+.2f}%" for gap in g["mean_gap_by_epoch"])
            print(f"{label} mean gap after each epoch: {means}")


def plot_curves(report: dict[str, Any], path: Path) -> None:
    """Validation perplexity after each epoch against the cumulative training time, per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for mode, run_ in report["runs"].items():
        epochs = run_["result"]["epochs"]
        elapsed, seconds = [], 0.0
        for e in epochs:
            seconds += e["train_s"]
            elapsed.append(seconds / 60.0)
        ax.plot(elapsed, [e["valid_ppl"] for e in epochs], marker="o", label=mode)
    first = next(iter(report["runs"].values()))["config"]
    ax.set_xlabel("training time (min, evaluation excluded)")
    ax.set_ylabel("validation perplexity")
    ax.set_title(f"PTB, hidden {first['hidden']}, {first['layers']} layers, p={first['p']}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="standard,structured")
    parser.add_argument("--p", type=float, default=0.5)
    parser.add_argument("--hidden", type=int, default=650)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-batches", type=int, default=None, help="truncate every epoch")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument(
        "--mask-source",
        default="device",
        choices=("cpu", "device"),
        help="on a GPU, where standard draws its masks (device: as nn.Dropout, the fair baseline;"
        " cpu: the same masks as a CPU run)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--input-mask-steps", type=int, default=1, help="structured input set held")
    parser.add_argument("--decoder-mask-steps", type=int, default=1, help="decoder set held")
    parser.add_argument(
        "--pipeline",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="structured modes: two single-threaded streams (default: when torch has 2 threads)",
    )
    parser.add_argument(
        "--decoder-split",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="structured modes: the decoder's column tiles in two single-threaded streams "
        "(default: when torch has 2 threads)",
    )
    parser.add_argument("--checkpoint-dir", type=Path, default=None, help="resume/save per run")
    parser.add_argument("--stop-after", type=int, default=None, help="epochs in this process")
    parser.add_argument("--compare", nargs="+", type=Path, help="merge earlier --json outputs")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None, help="PNG: validation ppl vs time")
    args = parser.parse_args(argv)
    runs = merge_runs(args.compare) if args.compare else run(args)
    report = compare(runs)
    print_table(report)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}")
    if args.plot is not None:
        plot_curves(report, args.plot)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
