"""Synchronous SGD with momentum, as servers apply it and as the reference recomputes it.

One function does the arithmetic for both, on float32 numpy arrays, in place: the gradients of
the W workers are summed in worker-rank order, divided by W (the mean of the workers' mean-loss
gradients, which is the gradient of the global batch's mean loss), then
``buf = momentum * buf + g`` and ``param -= lr * buf`` (PyTorch's SGD without dampening or
Nesterov), the last two in one pass by torch's fused CPU SGD kernel (what
``torch.optim.SGD(fused=True)`` runs). Every element gets the same operations wherever a slice
starts or ends (see :func:`fused_momentum_update`), so applying the step to a slice of a tensor
on a server gives bit for bit what applying it to the whole tensor gives in the reference.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from unstall.config import check


@dataclass(frozen=True, kw_only=True)
class SGDConfig:
    """Learning rate and momentum of the servers' optimizer."""

    lr: float = 0.05
    momentum: float = 0.9

    def __post_init__(self) -> None:
        check(self.lr > 0, self, "lr", f"must be > 0, got {self.lr}")
        check(0 <= self.momentum < 1, self, "momentum", f"must be in [0, 1), got {self.momentum}")


# Elements per block of the gradient sum (several workers): the sum of a block (1 MiB) and its
# update stay in the core's cache, so the mean never makes a round trip through memory; and a
# block is no smaller, as each block is a kernel call whose fixed overhead counts (1 MiB blocks
# step two workers' 4-64 MB of gradients about a fifth faster than 256 KiB ones).
STEP_BLOCK = 262_144
# torch's fused kernel runs a call's elements in vectors of 8 or 16 (AVX2, AVX-512) and the last
# ``size % width`` ones in a scalar loop that the compiler fuses into one multiply-add (a
# different rounding of ``buf``). A slice's step is run on its first multiple of FUSED_ALIGN
# elements, and its last few on a zero-padded copy of FUSED_ALIGN, so that every element goes
# through the vector code: the result does not depend on where a slice starts or ends.
FUSED_ALIGN = 64


def fused_momentum_update(
    param: np.ndarray, momentum_buf: np.ndarray, grad: np.ndarray, config: SGDConfig
) -> None:
    """``buf = momentum * buf + grad; param -= lr * buf`` in place, one pass over the three
    arrays (20 bytes of memory traffic per element): 1.5 times a memcpy of the parameters at
    16-64 MB, against 2.4-3 times for numpy's four ufuncs over cache-sized blocks
    (``benchmarks/ps_overhead.py --step-only``). ``grad`` is only read (it may be a read-only
    view of the object store)."""
    n = param.size
    body = n - n % FUSED_ALIGN
    if body:
        _fused_kernel(param[:body], momentum_buf[:body], grad[:body], config)
    if body < n:
        tail = np.zeros((3, FUSED_ALIGN), np.float32)
        tail[0, : n - body], tail[1, : n - body], tail[2, : n - body] = (
            param[body:],
            momentum_buf[body:],
            grad[body:],
        )
        _fused_kernel(tail[0], tail[1], tail[2], config)
        param[body:], momentum_buf[body:] = tail[0, : n - body], tail[1, : n - body]


def _fused_kernel(
    param: np.ndarray, momentum_buf: np.ndarray, grad: np.ndarray, config: SGDConfig
) -> None:
    with warnings.catch_warnings():  # a read-only gradient: the kernel never writes it
        warnings.simplefilter("ignore", UserWarning)
        grad_t = torch.from_numpy(grad)
    buffers = [torch.from_numpy(momentum_buf)]
    if config.momentum == 0:  # the kernel takes no buffer then: ``buf = 0 * buf + g`` is g
        np.copyto(momentum_buf, grad)
        buffers = []
    torch._fused_sgd_(
        [torch.from_numpy(param)],
        [grad_t],
        buffers,
        weight_decay=0.0,
        momentum=config.momentum,
        lr=config.lr,
        dampening=0.0,
        nesterov=False,
        maximize=False,
        is_first_step=False,  # a zero buffer gives ``0 * momentum + g = g``, as torch's first
    )


def sgd_momentum_step(
    param: np.ndarray,
    momentum_buf: np.ndarray,
    grads: Sequence[np.ndarray],
    config: SGDConfig,
    scratch: np.ndarray | None = None,
) -> None:
    """Update ``param`` and ``momentum_buf`` in place from the workers' ``grads`` (rank order).

    One gradient is its own mean (dividing by 1 is exact): one fused pass. Several are summed
    block by block (:data:`STEP_BLOCK` elements, into ``scratch``, a float32 array of at least
    ``min(size, STEP_BLOCK)`` elements that saves an allocation per step) and each block's mean
    is applied while in cache. Blocks start at multiples of :data:`FUSED_ALIGN`, so the result
    is the same as one call on the whole. The gradients are never written.
    """
    n = param.size
    if len(grads) == 1:
        fused_momentum_update(param, momentum_buf, grads[0], config)
        return
    block = min(n, STEP_BLOCK)
    if scratch is None or scratch.size < block:
        scratch = np.empty(block, np.float32)
    workers = np.float32(len(grads))
    for lo in range(0, n, STEP_BLOCK):
        hi = min(lo + STEP_BLOCK, n)
        mean = np.add(grads[0][lo:hi], grads[1][lo:hi], out=scratch[: hi - lo])
        for g in grads[2:]:
            mean += g[lo:hi]
        mean /= workers
        fused_momentum_update(param[lo:hi], momentum_buf[lo:hi], mean, config)
