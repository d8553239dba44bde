"""Matplotlib on the Agg backend: files only, never a window."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from unstall.results import replaced_atomically


def new_figure(width: float = 7.0, height: float = 4.0) -> tuple[Any, Any]:
    fig, ax = plt.subplots(figsize=(width, height), dpi=110)
    ax.grid(True, alpha=0.3)
    return fig, ax


def save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    with replaced_atomically(path) as tmp:
        fig.savefig(tmp)
    plt.close(fig)
    return path
