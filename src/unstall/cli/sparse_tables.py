"""What ``unstall sparse`` prints: the LSTM step-time table, and ``analyze``'s tables (per layer,
per model, the comparisons), its headline lines and its density plot."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from unstall.cli.common import console, table
from unstall.errors import ConfigError
from unstall.sparse import CNNSparsityResult, LSTMBenchResult
from unstall.sparse.cnn import (
    PUBLISHED_BACKPROP_SPEEDUP_VS_DENSE,
    PUBLISHED_SPEEDUP_VS_SPARSITY_AGNOSTIC,
)


def lstm_bench_table(result: LSTMBenchResult) -> Table:
    """Best and median step time of each mode, and its speed-up over ``standard``."""
    standard = result.step_s.get("standard")
    rows = [
        [name, secs, result.step_s_median[name], (standard / secs) if standard else float("nan")]
        for name, secs in result.step_s.items()
    ]
    title = (
        f"LSTM training step: hidden {result.hidden}, batch {result.batch}, {result.seq_len} "
        f"steps, p={result.p}, {result.device}, {result.threads} thread(s)"
        + (", structured pipelined" if result.pipelined else "")
        + (
            ", masks drawn on the CPU"
            if result.device != "cpu" and result.mask_source == "cpu"
            else ""
        )
    )
    return table(title, ["mode", "step s (best)", "median s", "vs standard"], rows)


def _num(value: float | None) -> float:
    return float("nan") if value is None else value


def layer_table(result: CNNSparsityResult) -> Table:
    """One row a layer: densities, forward GEMM shape, speed-ups."""
    rows = []
    for record in result.layers:
        s, v = record.sparsity, record.speed
        fwd = s.gemms.forward
        shape = f"{fwd.m}x{fwd.k}x{fwd.n}" + (f" g{fwd.groups}" if fwd.groups > 1 else "")
        rows.append(
            [
                s.name,
                s.activation,
                s.input_density,
                s.grad_density,
                _num(s.relu_grad_density),
                _num(s.known_zero_share),
                shape,
                v.forward_speedup,
                _num(v.input_grad_speedup),
                v.weight_grad_speedup,
                v.backprop_speedup_vs_dense,
                v.speedup_vs_input_only,
            ]
        )
    columns = [
        "layer",
        "activation",
        "in dens",
        "dY dens",
        "dZ dens",
        "known 0s",
        "fwd MxKxN",
        "fwd x",
        "dX x",
        "dW x",
        "bprop x",
        "vs in-only",
    ]
    title = (
        f"{result.model}: densities and predicted speed-ups per layer "
        f"({result.array} array, {result.skipping} skipping, bn={result.bn_gradient})"
    )
    return table(title, columns, rows)


def model_table(result: CNNSparsityResult) -> Table:
    """Cycles per step of each GEMM kind in each mode, and the speed-ups."""
    s = result.summary
    rows = []
    for gemm, cycles in s.cycles.items():
        dense, input_only, full = cycles["dense"], cycles["input_only"], cycles["full"]
        rows.append([gemm, dense, input_only, full, dense / full if full else float("nan")])
    bp = {
        m: s.cycles["input_grad"][m] + s.cycles["weight_grad"][m]
        for m in ("dense", "input_only", "full")
    }
    rows.append(
        ["back-propagation", bp["dense"], bp["input_only"], bp["full"], s.backprop_speedup_vs_dense]
    )
    columns = ["GEMM", "dense cycles", "input-only cycles", "full cycles", "speed-up"]
    return table(f"{result.model}: cycles per training step", columns, rows)


def headline(result: CNNSparsityResult) -> list[str]:
    """The lines that answer the question, with the published ranges beside them."""
    s = result.summary
    lo, hi = PUBLISHED_BACKPROP_SPEEDUP_VS_DENSE
    lo2, hi2 = PUBLISHED_SPEEDUP_VS_SPARSITY_AGNOSTIC
    t = result.training
    start = "-" if t.warmup_loss_start is None else f"{t.warmup_loss_start:.3f}"
    end = "-" if t.warmup_loss_end is None else f"{t.warmup_loss_end:.3f}"
    evaluated = "-" if t.eval_accuracy is None else f"{t.eval_accuracy:.2f}"
    c = result.conv_summary
    convs = (
        f"convolutions only: back-propagation {c.backprop_speedup_vs_dense:.3f}x over dense, "
        f"{c.speedup_vs_input_only:.3f}x over input-only"
        if c.cycles["forward"]["dense"] > 0
        else "convolutions only: the model has no convolution"  # 0/0 cycles: "nanx" otherwise
    )
    return [
        f"back-propagation speed-up over dense: {s.backprop_speedup_vs_dense:.3f}x "
        f"(published, ImageNet: {lo}x-{hi}x)",
        f"back-propagation speed-up over input sparsity only: {s.speedup_vs_input_only:.3f}x "
        f"(published over sparsity-agnostic: {lo2}x-{hi2}x)",
        f"ideal (element-level) skipping: {s.ideal_backprop_speedup_vs_dense:.3f}x over dense, "
        f"{s.ideal_speedup_vs_input_only:.3f}x over input-only",
        convs,
        f"whole step: {s.step_speedup_vs_dense:.3f}x over dense; forward {s.forward_speedup:.3f}x",
        f"training: {t.warmup_steps} warm-up steps, loss {start} -> {end} "
        f"(chance {t.chance_loss:.3f}); accuracy {evaluated} (eval, fresh images), "
        f"{t.recorded_accuracy:.2f} (recorded batches)",
    ]


def comparison_table(result: CNNSparsityResult) -> Table | None:
    """The same recorded steps on the other dataflows or skipping models, if any."""
    if not result.comparisons:
        return None
    rows = [
        [
            c.dataflow,
            c.skipping,
            c.summary.forward_speedup,
            c.summary.input_grad_speedup,
            c.summary.weight_grad_speedup,
            c.summary.backprop_speedup_vs_dense,
            c.summary.speedup_vs_input_only,
        ]
        for c in result.comparisons
    ]
    columns = ["dataflow", "skipping", "fwd x", "dX x", "dW x", "bprop x dense", "bprop x in-only"]
    return table(
        f"{result.model}: other dataflows and skipping, same recorded steps", columns, rows
    )


def all_tables(result: CNNSparsityResult) -> list[Table]:
    """Per layer, per model, and the comparisons when there are any."""
    extra = comparison_table(result)
    return [layer_table(result), model_table(result), *([extra] if extra is not None else [])]


def show_analysis(result: CNNSparsityResult, png: Path | None) -> None:
    """Print every table and the headline lines; write the density plot to ``png`` if given."""
    from unstall.report.sparsity_plot import plot_densities

    for view in all_tables(result):
        console.print(view)
    for line in headline(result):
        console.print(line, highlight=False)
    if png is not None:
        console.print(f"wrote {plot_densities(result, png)}", highlight=False, markup=False)


def plot_path(plot: str | None, json_path: Path | None) -> Path | None:
    """``--plot``, or ``OUT.densities.png`` beside ``--json OUT.json``, or no plot."""
    if plot is not None:
        return Path(plot)
    if json_path is not None:
        return json_path.with_name(json_path.stem + ".densities.png")
    return None


def set_threads(n: int) -> None:
    """torch's CPU threads (on a busy machine one thread is often the fastest)."""
    import torch

    if n < 1:
        raise ConfigError("analyze", "threads", f"must be >= 1, got {n}")
    torch.set_num_threads(n)
