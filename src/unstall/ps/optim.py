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
    scratch: np.ndarray | None = None,
) -> None:
    """Update ``param`` and ``momentum_buf`` in place from the workers' ``grads`` (rank order).

    Four passes over the elements with one worker, W + 3 with W; the gradients (read-only,
    straight from the object store) are never written. ``scratch``, a float32 array of the
    same size, saves an allocation (and its page faults) per step.
    """
    if len(grads) == 1:
        mean = grads[0]  # the mean of one gradient is itself: dividing by 1 is exact
        scratch = np.empty_like(param) if scratch is None else scratch
    else:
        mean = np.add(grads[0], grads[1], dtype=np.float32)
        for g in grads[2:]:
            mean += g
        mean /= np.float32(len(grads))
        scratch = mean
    momentum_buf *= np.float32(config.momentum)
    momentum_buf += mean
    np.multiply(momentum_buf, np.float32(config.lr), out=scratch)
    param -= scratch
