"""The servers' optimizers, as servers apply them and as the reference recomputes them.

One function per optimizer does the arithmetic for both, on float32 numpy arrays, in place: the
gradients of the W workers are summed in worker-rank order, divided by W (the mean of the
workers' mean-loss gradients, which is the gradient of the global batch's mean loss), then the
update. Every element gets the same operations wherever a slice starts or ends, so applying a
step to a slice of a tensor on a server gives bit for bit what applying it to the whole tensor
gives in the reference; that is what keeps a run exact whatever the placement and migrations.

- :class:`SGDConfig`: PyTorch's SGD (momentum, weight decay, Nesterov; no dampening), run by
  torch's fused CPU SGD kernel (what ``torch.optim.SGD(fused=True)`` runs; see
  :func:`fused_momentum_update` for how slices stay exact). State: one momentum buffer.
- :class:`AdamConfig`: Adam with bias correction and L2 weight decay (PyTorch's ``Adam``
  formula), in numpy ufuncs, which round every element alike whatever the slice. State: the
  first and second moments; the step count is the iteration's number plus one.

Both follow :class:`ServerOptimizer`: ``slots`` state arrays per parameter (zero at the start,
moved with their parameters by migrations and saved in checkpoints), ``step(...)`` in place.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np
import torch

from unstall.config import check
from unstall.errors import ConfigError


class ServerOptimizer(Protocol):
    """What a server steps with: ``slots`` float32 state arrays per parameter element range
    (zeros at the start), and an in-place ``step`` of a range from the workers' gradients in
    rank order (``step``: the 1-based count of steps taken, for bias corrections)."""

    name: ClassVar[str]
    slots: ClassVar[int]

    def step(
        self,
        param: np.ndarray,
        state: Sequence[np.ndarray],
        grads: Sequence[np.ndarray],
        *,
        step: int,
        scratch: np.ndarray | None = None,
    ) -> None: ...


def _check_rate_and_decay(owner: object, lr: float, weight_decay: float) -> None:
    """What every optimizer needs: a learning rate above 0, a weight decay not below 0."""
    check(lr > 0, owner, "lr", f"must be > 0, got {lr}")
    check(weight_decay >= 0, owner, "weight_decay", f"must be >= 0, got {weight_decay}")


@dataclass(frozen=True, kw_only=True)
class SGDConfig:
    """SGD as PyTorch's ``torch.optim.SGD`` (no dampening): learning rate, momentum, L2 weight
    decay, Nesterov momentum."""

    name: ClassVar[str] = "sgd"
    slots: ClassVar[int] = 1  # the momentum buffer

    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 0.0
    nesterov: bool = False

    def __post_init__(self) -> None:
        _check_rate_and_decay(self, self.lr, self.weight_decay)
        check(0 <= self.momentum < 1, self, "momentum", f"must be in [0, 1), got {self.momentum}")
        check(
            not self.nesterov or self.momentum > 0,
            self,
            "nesterov",
            "needs momentum > 0 (Nesterov momentum with no momentum is plain SGD)",
        )

    def step(
        self,
        param: np.ndarray,
        state: Sequence[np.ndarray],
        grads: Sequence[np.ndarray],
        *,
        step: int,
        scratch: np.ndarray | None = None,
    ) -> None:
        sgd_momentum_step(param, state[0], grads, self, scratch)


@dataclass(frozen=True, kw_only=True)
class AdamConfig:
    """Adam as PyTorch's ``torch.optim.Adam`` (``amsgrad=False``): ``m = b1 m + (1-b1) g``,
    ``v = b2 v + (1-b2) g^2``, ``p -= lr / (1-b1^t) * m / (sqrt(v) / sqrt(1-b2^t) + eps)``,
    with ``g`` the mean gradient plus ``weight_decay * p``."""

    name: ClassVar[str] = "adam"
    slots: ClassVar[int] = 2  # first and second moments

    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        _check_rate_and_decay(self, self.lr, self.weight_decay)
        for name in ("beta1", "beta2"):
            value = getattr(self, name)
            check(0 <= value < 1, self, name, f"must be in [0, 1), got {value}")
        check(self.eps > 0, self, "eps", f"must be > 0, got {self.eps}")

    def step(
        self,
        param: np.ndarray,
        state: Sequence[np.ndarray],
        grads: Sequence[np.ndarray],
        *,
        step: int,
        scratch: np.ndarray | None = None,
    ) -> None:
        check(step >= 1, self, "step", f"the step count starts at 1, got {step}")
        update = functools.partial(adam_update, config=self, step=step)
        blockwise_mean_step(param, state, grads, update, scratch)


def adam_update(
    param: np.ndarray,
    state: Sequence[np.ndarray],
    grad: np.ndarray,
    *,
    config: AdamConfig,
    step: int,
) -> None:
    """One Adam update of ``param`` and its moments ``state`` from the mean gradient ``grad``
    (only read), elementwise float32 ufuncs with float32 constants (no float64 promotion)."""
    f32 = np.float32
    exp_avg, exp_avg_sq = state
    g = grad
    if config.weight_decay:
        g = g + f32(config.weight_decay) * param
    exp_avg *= f32(config.beta1)
    exp_avg += f32(1.0 - config.beta1) * g
    exp_avg_sq *= f32(config.beta2)
    exp_avg_sq += f32(1.0 - config.beta2) * (g * g)
    step_size = f32(config.lr / (1.0 - config.beta1**step))
    denom = np.sqrt(exp_avg_sq)
    denom /= f32(math.sqrt(1.0 - config.beta2**step))
    denom += f32(config.eps)
    param -= step_size * (exp_avg / denom)


OPTIMIZERS: dict[str, type[SGDConfig] | type[AdamConfig]] = {
    SGDConfig.name: SGDConfig,
    AdamConfig.name: AdamConfig,
}


def make_optimizer(
    name: str | None = None,
    *,
    lr: float | None = None,
    momentum: float | None = None,
    weight_decay: float | None = None,
    nesterov: bool = False,
    resume: ServerOptimizer | None = None,
    owner: str = "ps",
) -> SGDConfig | AdamConfig:
    """The optimizer of :data:`OPTIMIZERS` called ``name`` (None: ``resume``'s kind, else
    sgd) with the settings given (None: the optimizer's defaults, or ``resume``'s settings when
    it is of the same kind: a checkpoint's optimizer). ``momentum`` and ``nesterov`` are SGD's;
    with adam they raise a :class:`~unstall.errors.ConfigError`, as an unknown name does."""
    name = name or (resume.name if resume is not None else SGDConfig.name)
    kind = OPTIMIZERS.get(name.lower())
    if kind is None:
        known = ", ".join(OPTIMIZERS)
        raise ConfigError(owner, "optimizer", f"unknown optimizer {name!r}; known: {known}")
    base: dict[str, Any] = {}
    if resume is not None and isinstance(resume, kind):
        base = {f.name: getattr(resume, f.name) for f in dataclasses.fields(kind)}
    for key, value in (("lr", lr), ("weight_decay", weight_decay)):
        if value is not None:
            base[key] = value
    if kind is AdamConfig:
        if momentum is not None or nesterov:
            raise ConfigError(
                owner,
                "momentum" if momentum is not None else "nesterov",
                "momentum and nesterov are SGD's: adam keeps its own moments",
            )
        return AdamConfig(**base)
    if momentum is not None:
        base["momentum"] = momentum
    if nesterov:
        base["nesterov"] = True
    return SGDConfig(**base)


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
        weight_decay=config.weight_decay,
        momentum=config.momentum,
        lr=config.lr,
        dampening=0.0,
        nesterov=config.nesterov,
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

    One gradient is its own mean (dividing by 1 is exact): one fused pass. Several are averaged
    block by block (:func:`blockwise_mean_step`) and each block's mean is applied while in cache.
    The gradients are never written.
    """
    if len(grads) == 1:
        fused_momentum_update(param, momentum_buf, grads[0], config)
        return

    def update(p: np.ndarray, state: Sequence[np.ndarray], mean: np.ndarray) -> None:
        fused_momentum_update(p, state[0], mean, config)

    blockwise_mean_step(param, [momentum_buf], grads, update, scratch)


BlockUpdate = Callable[[np.ndarray, Sequence[np.ndarray], np.ndarray], None]


def blockwise_mean_step(
    param: np.ndarray,
    state: Sequence[np.ndarray],
    grads: Sequence[np.ndarray],
    update: BlockUpdate,
    scratch: np.ndarray | None = None,
) -> None:
    """``update(param block, state blocks, mean gradient block)`` over blocks of
    :data:`STEP_BLOCK` elements: the workers' gradients summed in rank order into ``scratch`` (a
    float32 array of at least ``min(size, STEP_BLOCK)`` elements, which saves an allocation per
    step) and divided by their number. Blocks start at multiples of :data:`FUSED_ALIGN`, so the
    result is the same as one call on the whole. The gradients are never written."""
    n = param.size
    block = min(n, STEP_BLOCK)
    if scratch is None or scratch.size < block:
        scratch = np.empty(block, np.float32)
    workers = np.float32(len(grads))
    for lo in range(0, n, STEP_BLOCK):
        hi = min(lo + STEP_BLOCK, n)
        mean = scratch[: hi - lo]
        if len(grads) == 1:
            np.copyto(mean, grads[0][lo:hi])
        else:
            np.add(grads[0][lo:hi], grads[1][lo:hi], out=mean)
            for g in grads[2:]:
                mean += g[lo:hi]
            mean /= workers
        update(param[lo:hi], [s[lo:hi] for s in state], mean)
