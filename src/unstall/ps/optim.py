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


# Elements per block of the step: three float32 blocks (gradient sum, momentum, parameters) of
# 256 KB stay in the core's cache between the step's passes, so the memory traffic is one read of
# each gradient and one read and write of momentum and parameters, not one per pass.
STEP_BLOCK = 65_536


def sgd_momentum_step(
    param: np.ndarray,
    momentum_buf: np.ndarray,
    grads: Sequence[np.ndarray],
    config: SGDConfig,
    scratch: np.ndarray | None = None,
) -> None:
    """Update ``param`` and ``momentum_buf`` in place from the workers' ``grads`` (rank order).

    Block by block (:data:`STEP_BLOCK` elements): the same elementwise operations in the same
    order as on whole arrays, so the result is bit for bit the same, at a fraction of the
    memory traffic. The gradients (read-only, straight from the object store) are never
    written. ``scratch``, a float32 array of at least ``min(size, STEP_BLOCK)`` elements, saves
    an allocation per step.
    """
    n = param.size
    block = min(n, STEP_BLOCK)
    if scratch is None or scratch.size < block:
        scratch = np.empty(block, np.float32)
    momentum = np.float32(config.momentum)
    lr = np.float32(config.lr)
    workers = np.float32(len(grads))
    for lo in range(0, n, STEP_BLOCK):
        hi = min(lo + STEP_BLOCK, n)
        buf = scratch[: hi - lo]
        if len(grads) == 1:
            mean = grads[0][lo:hi]  # the mean of one gradient is itself: dividing by 1 is exact
        else:
            mean = np.add(grads[0][lo:hi], grads[1][lo:hi], out=buf)
            for g in grads[2:]:
                mean += g[lo:hi]
            mean /= workers
        m = momentum_buf[lo:hi]
        m *= momentum
        m += mean
        np.multiply(m, lr, out=buf)
        param[lo:hi] -= buf
