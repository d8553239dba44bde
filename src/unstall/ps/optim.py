"""Synchronous SGD with momentum, as servers apply it and as the reference recomputes it.

One function does the arithmetic for both, on float32 numpy arrays, in place: the gradients of
the W workers are summed in worker-rank order, divided by W (the mean of the workers' mean-loss
gradients, which is the gradient of the global batch's mean loss), then
``buf = momentum * buf + g`` and ``param -= lr * buf`` (PyTorch's SGD without dampening or
Nesterov). Every step is elementwise, so applying it to a slice of a tensor on a server gives
bit for bit what applying it to the whole tensor gives in the reference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from unstall.config import check


@dataclass(frozen=True, kw_only=True)
class SGDConfig:
    """Learning rate and momentum of the servers' optimizer."""

    lr: float = 0.05
    momentum: float = 0.9

    def __post_init__(self) -> None:
        check(self.lr > 0, self, "lr", f"must be > 0, got {self.lr}")
        check(0 <= self.momentum < 1, self, "momentum", f"must be in [0, 1), got {self.momentum}")


def sgd_momentum_step(
    param: np.ndarray,
    momentum_buf: np.ndarray,
    grads: Sequence[np.ndarray],
    config: SGDConfig,
) -> None:
    """Update ``param`` and ``momentum_buf`` in place from the workers' ``grads`` (rank order)."""
    total = np.array(grads[0], dtype=np.float32, copy=True)
    for g in grads[1:]:
        total += g
    total /= np.float32(len(grads))
    momentum_buf *= np.float32(config.momentum)
    momentum_buf += total
    total[...] = momentum_buf  # reuse the buffer for lr * buf
    total *= np.float32(config.lr)
    param -= total
