"""Where an LSTM training step spends its time, per dropout mode (torch.profiler op table).

    python benchmarks/lstm_profile.py --modes standard,structured --threads 2
    python benchmarks/lstm_profile.py --decoder --hidden 400   # the PTB decoder alone, CPU time

The first form profiles one forward+backward step of ``StructuredDropoutLSTM`` (hidden 1024,
batch 64, 35 steps, p 0.5 by default) after two warm-up steps. ``--decoder`` instead times the
language model's decoder (``masked_linear`` onto a 10k vocabulary) forward+backward per mode in
process CPU time, which a busy machine disturbs less than wall time (use with ``--threads 1``);
with one thread the structured decoder runs in column tiles; ``--untiled`` runs it without
them, to measure what the tiles gain. With two threads the structured decoder's tiles are shared
out between two single-threaded streams by default (``--no-split``: one stream on both threads);
compare those by the wall time, which the decoder timing prints too.

    python benchmarks/lstm_profile.py --decoder --hidden 400 --threads 2 --modes structured \
        --variants split,no-split --repeats 9   # the two, round-robin in one process

    python benchmarks/lstm_profile.py --ptb-batches 120 --hidden 400 --threads 2 \
        --modes standard,structured   # the language model's training batches, part by part

``--ptb-batches N`` trains the word language model of ``lstm_ptb.py`` (2 layers, batch 64, 35
steps) on the first Penn Treebank batches, the modes taking turns ten batches at a time (the
first round is warm-up), and prints the mean wall time per batch of each part of the step: the
LSTM's forward, the decoder's, the loss and its gradient, the decoder's backward, the LSTM's,
the embedding's and the rest of backward, gradient clipping, the SGD step, and the whole step.
Each mode writes its logits into one memory kept across batches, as ``train_epoch`` does;
``--logits fresh`` allocates them afresh each batch instead (as before that reuse), and
``--logits kept,fresh`` times both ways of each mode, all taking turns in one process.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.profiler import ProfilerActivity, profile

# private on purpose: --untiled switches the column tiles off through the projections' threshold
import unstall.sparse.lstm.projections as projections
from unstall.sparse.lstm import StructuredDropoutLSTM, masked_linear, sample_mask
from unstall.sparse.lstm.kernels import OutputMemory
from unstall.sparse.lstm.lm import LMConfig, LMTrainer, train_step_loss
from unstall.sparse.lstm.ptb import bptt_batches, load_ptb


def profile_steps(args: argparse.Namespace) -> None:
    gen = torch.Generator().manual_seed(0)
    shape = (args.seq_len, args.batch, args.hidden)
    x = torch.randn(*shape, generator=gen).requires_grad_()
    grad_out = torch.randn(*shape, generator=gen)
    for mode in args.modes.split(","):
        model = StructuredDropoutLSTM(args.hidden, args.hidden, 1, dropout=args.p, mode=mode)
        for _ in range(2):
            out, _ = model(x)
            out.backward(grad_out)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            out, _ = model(x)
            out.backward(grad_out)
        print(f"== {mode}")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14))


def time_decoder(args: argparse.Namespace, vocab: int = 10_000) -> None:
    gen = torch.Generator().manual_seed(0)
    steps, batch, hid = args.seq_len, args.batch, args.hidden
    x = torch.randn(steps, batch, hid, generator=gen, requires_grad=True)
    weight = torch.randn(vocab, hid, generator=gen, requires_grad=True)
    bias = torch.zeros(vocab, requires_grad=True)
    grad_out = torch.randn(steps, batch, vocab, generator=gen)
    runs = [
        (mode, variant)
        for mode in args.modes.split(",")
        for variant in (args.variants.split(",") if mode == "structured" else ["default"])
    ]
    cpu: dict[tuple[str, str], list[float]] = {run: [] for run in runs}
    wall: dict[tuple[str, str], list[float]] = {run: [] for run in runs}
    for _ in range(args.repeats):  # round-robin: every run sees the same machine
        for mode, variant in runs:
            mask = sample_mask(mode, steps, batch, hid, args.p, gen)
            split = SPLIT_VARIANTS[variant]
            start, start_wall = time.process_time(), time.perf_counter()
            masked_linear(x, weight, bias, mask, split).backward(grad_out)
            cpu[mode, variant].append(time.process_time() - start)
            wall[mode, variant].append(time.perf_counter() - start_wall)
    for mode, variant in runs:
        name = mode if variant == "default" else f"{mode} ({variant})"
        print(f"{name:<28} decoder fwd+bwd  CPU s: {_best_median(cpu[mode, variant])}", end="")
        print(f"  wall s: {_best_median(wall[mode, variant])}")


# --variants: how the structured decoder runs (masked_linear's split).
SPLIT_VARIANTS = {"default": None, "split": True, "no-split": False}


def _best_median(seconds: list[float]) -> str:
    ranked = sorted(seconds)
    return f"best {ranked[0]:.3f} median {ranked[len(ranked) // 2]:.3f}"


PARTS = ("lstm fwd", "decoder fwd", "loss", "decoder bwd", "lstm bwd", "embed bwd", "clip",
         "sgd", "step")  # fmt: skip


def time_ptb_batches(args: argparse.Namespace, rounds_of: int = 10) -> None:
    corpus = load_ptb()
    trainers, batches, states, memories = {}, {}, {}, {}
    logits = args.logits.split(",")
    for mode in args.modes.split(","):
        for how in logits:
            run = mode if len(logits) == 1 else f"{mode} ({how})"
            config = LMConfig(mode=mode, p=args.p, hidden=args.hidden, batch=args.batch,
                              bptt=args.seq_len, threads=args.threads)  # fmt: skip
            trainers[run] = LMTrainer(config, corpus)
            batches[run] = bptt_batches(trainers[run].train, config.bptt)
            states[run] = None
            memories[run] = OutputMemory() if how == "kept" else None
    seconds: dict[str, list[list[float]]] = {run: [] for run in trainers}
    for round_ in range(1 + -(-args.ptb_batches // rounds_of)):
        for run, trainer in trainers.items():
            for _ in range(rounds_of):
                inputs, targets = next(batches[run])
                parts, states[run] = _timed_step(
                    trainer, inputs, targets, states[run], memories[run]
                )
                if round_ > 0:  # the first round warms up
                    seconds[run].append(parts)
    print(f"mean s per batch over {len(next(iter(seconds.values())))} batches per run")
    print(f"{'run':<22}" + "".join(f"{part:>12}" for part in PARTS))
    for run, rows in seconds.items():
        means = [sum(column) / len(column) for column in zip(*rows, strict=True)]
        print(f"{run:<22}" + "".join(f"{m:>12.4f}" for m in means))


def _timed_step(
    trainer: LMTrainer,
    inputs: Tensor,
    targets: Tensor,
    state: tuple[Tensor, Tensor] | None,
    memory: OutputMemory | None,
) -> tuple[list[float], tuple[Tensor, Tensor]]:
    """One training step as train_epoch runs it, timed part by part (backward through hooks);
    the logits in ``memory`` (one per mode, as train_epoch keeps one), or new memory if None."""
    model, marks = trainer.model, {}
    model.train()

    def mark(name: str) -> Callable[[Tensor], None]:
        return lambda _grad: marks.__setitem__(name, time.perf_counter())

    start = time.perf_counter()
    state = (state[0].detach(), state[1].detach()) if state is not None else None
    trainer.optimizer.zero_grad(set_to_none=True)
    embedded = model.embed(inputs)
    embedded.register_hook(mark("lstm bwd"))
    out, state = model.lstm(embedded, state)
    out.register_hook(mark("decoder bwd"))
    lstm_done = time.perf_counter()
    steps, batch, hid = out.shape
    mask = sample_mask(model.mode, steps, batch, hid, model.p, model.mask_gen,
                       model.decoder_mask_steps)  # fmt: skip
    logits = masked_linear(out, model.decoder.weight, model.decoder.bias, mask,
                           model.decoder_split, memory)  # fmt: skip
    decoder_done = time.perf_counter()
    logits.register_hook(mark("loss"))  # the gradient of the logits is ready
    train_step_loss(logits, targets)
    del logits
    backward_done = time.perf_counter()
    nn.utils.clip_grad_norm_(model.parameters(), trainer.config.clip)
    clipped = time.perf_counter()
    trainer.optimizer.step()
    end = time.perf_counter()
    return [
        lstm_done - start,
        decoder_done - lstm_done,
        marks["loss"] - decoder_done,
        marks["decoder bwd"] - marks["loss"],
        marks["lstm bwd"] - marks["decoder bwd"],
        backward_done - marks["lstm bwd"],
        clipped - backward_done,
        end - clipped,
        end - start,
    ], state


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="standard,structured,structured-window")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=35)
    parser.add_argument("--p", type=float, default=0.5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--decoder", action="store_true")
    parser.add_argument("--ptb-batches", type=int, default=0, help="time LM training batches")
    parser.add_argument(
        "--logits",
        default="kept",
        help="--ptb-batches: where each batch's logits go, comma-separated of kept (one "
        "memory kept across batches, as train_epoch does) and fresh (new memory each batch)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="decoder timings per mode")
    parser.add_argument("--untiled", action="store_true", help="no column tiles (one thread)")
    parser.add_argument(
        "--variants",
        default="default",
        help="decoder, structured mode: comma-separated of default, split (two single-threaded "
        "streams of column tiles), no-split (one stream on the torch threads)",
    )
    args = parser.parse_args(argv)
    if args.untiled:
        projections.TILED_MIN_COLUMNS = sys.maxsize  # every structured product untiled
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.ptb_batches > 0:
        time_ptb_batches(args)
    else:
        (time_decoder if args.decoder else profile_steps)(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
