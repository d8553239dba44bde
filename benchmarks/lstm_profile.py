"""Where an LSTM training step spends its time, per dropout mode (torch.profiler op table).

    python benchmarks/lstm_profile.py --modes standard,structured --threads 2
    python benchmarks/lstm_profile.py --decoder --hidden 400   # the PTB decoder alone, CPU time

The first form profiles one forward+backward step of ``StructuredDropoutLSTM`` (hidden 1024,
batch 64, 35 steps, p 0.5 by default) after two warm-up steps. ``--decoder`` instead times the
language model's decoder (``masked_linear`` onto a 10k vocabulary) forward+backward per mode in
process CPU time, which a busy machine disturbs less than wall time (use with ``--threads 1``);
with one thread the structured decoder runs in column tiles; ``--untiled`` runs it without
them, to measure what the tiles gain.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

# private on purpose: --untiled switches the column tiles off through the projections' threshold
import unstall.sparse.lstm.projections as projections
from unstall.sparse.lstm import StructuredDropoutLSTM, masked_linear, sample_mask


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
    for mode in args.modes.split(","):
        seconds = []
        for _ in range(args.repeats):
            mask = sample_mask(mode, steps, batch, hid, args.p, gen)
            start = time.process_time()
            masked_linear(x, weight, bias, mask).backward(grad_out)
            seconds.append(time.process_time() - start)
        ranked = sorted(seconds)
        print(
            f"{mode:<18} decoder fwd+bwd CPU s: best {ranked[0]:.3f}"
            f"  median {ranked[len(ranked) // 2]:.3f}  all {[round(s, 3) for s in seconds]}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="standard,structured,structured-window")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=35)
    parser.add_argument("--p", type=float, default=0.5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--decoder", action="store_true")
    parser.add_argument("--repeats", type=int, default=3, help="decoder timings per mode")
    parser.add_argument("--untiled", action="store_true", help="no column tiles (one thread)")
    args = parser.parse_args(argv)
    if args.untiled:
        projections.TILED_MIN_COLUMNS = sys.maxsize  # every structured product untiled
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    (time_decoder if args.decoder else profile_steps)(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
