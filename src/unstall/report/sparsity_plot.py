"""Densities per layer of a CNN training step, and the predicted back-propagation speed-ups."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from unstall.report.plotting import save
from unstall.sparse import CNNSparsityResult


def _nan(value: float | None) -> float:
    return float("nan") if value is None else value


def plot_densities(result: CNNSparsityResult, path: Path) -> Path:
    """Top: input-activation density, output-gradient density (raw and at the ReLU input) and the
    share of outputs the forward ReLU mask zeroes, per layer. Bottom: per-layer speed-up of
    back-propagation over dense and over input sparsity only."""
    layers = [r.sparsity for r in result.layers]
    speeds = [r.speed for r in result.layers]
    x = list(range(len(layers)))
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(max(7.0, 0.22 * len(x) + 3), 6.5), dpi=110, sharex=True
    )
    series = (
        ("input activation", [la.input_density for la in layers], "o-"),
        ("output gradient (dL/dY)", [la.grad_density for la in layers], "s-"),
        ("gradient at ReLU input (dL/dZ)", [_nan(la.relu_grad_density) for la in layers], "^-"),
        ("zeroed by forward mask", [_nan(la.mask_zero_fraction) for la in layers], "x:"),
    )
    for label, values, style in series:
        top.plot(x, values, style, label=label, markersize=3, linewidth=1)
    top.set_ylim(-0.02, 1.02)
    top.set_ylabel("density / share")
    top.set_title(
        f"{result.model} at {result.image_size} px, batch {result.batch_size}, "
        f"after {result.training.warmup_steps} warm-up steps ({result.data})",
        fontsize=9,
    )
    top.legend(fontsize=7, loc="lower left")
    top.grid(True, alpha=0.3)
    bottom.plot(x, [s.backprop_speedup_vs_dense for s in speeds], "o-", label="vs dense")
    bottom.plot(x, [s.speedup_vs_input_only for s in speeds], "s-", label="vs input sparsity only")
    bottom.axhline(1.0, color="grey", linewidth=0.8)
    bottom.set_ylabel("back-prop speed-up")
    bottom.set_title(f"{result.array} array, {result.skipping} skipping", fontsize=9)
    bottom.legend(fontsize=7)
    bottom.grid(True, alpha=0.3)
    bottom.set_xticks(x)
    bottom.set_xticklabels([la.name for la in layers], rotation=90, fontsize=6)
    return save(fig, path)
