"""Where a worker's batches come from: the data contract, the built-in sources, the losses.

A run's data is a callable ``data(rank, world_size) -> iterable of (inputs, targets)``: worker
``rank`` of ``world_size`` takes batch ``i`` of its iterable in iteration ``i``, and iteration
``i``'s global batch is the workers' batches in rank order (the reference trains on exactly
that). An iterable that ends is started again (a new epoch: a ``DataLoader`` reshuffles), so a
run may be longer than an epoch. The data function and every batch are drawn with torch's
global generator seeded by the run's seed, the rank and the iteration, so that a ``DataLoader``
that shuffles gives the same batches in every run of the same seed.

Two built-in sources:

- :class:`~unstall.workload.zoo_jobs.SyntheticData` (the workload's, shared with the profiler
  and the live backend): random batches from a batch function (for a zoo model, its
  ``example_batch``), drawn from a generator seeded by ``(seed, iteration, rank)``.
- :class:`ArrayData`: in-memory features and labels (``digits``: scikit-learn's 8x8
  handwritten digits, 1,797 images, 64 features scaled to [0, 1], 10 classes, shipped inside
  the wheel, :func:`load_digits`). Samples are taken epoch by epoch in a seeded permutation.

Losses are callables ``loss(outputs, targets) -> scalar tensor``;
:data:`unstall.workload.losses.LOSSES` holds the built-in ones by name.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from unstall import checks
from unstall.config import check
from unstall.errors import ConfigError, UnstallError
from unstall.usercode import UserCodeError, call_user, user_code_error, where_defined
from unstall.workload.named import unwrap
from unstall.workload.zoo_jobs import Batch, derive_seed, seeded

DataFn = Callable[[int, int], Iterable[Batch]]


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits: features float32 (1797, 64) scaled to [0, 1], labels int64
    (imported late: sklearn is slow to load)."""
    from sklearn.datasets import load_digits as sk_load_digits

    bunch = sk_load_digits()
    features = (bunch.data / 16.0).astype(np.float32)
    return features, bunch.target.astype(np.int64)


def global_indices(n_samples: int, seed: int, iteration: int, global_batch: int) -> np.ndarray:
    """Sample indices of iteration ``iteration``: positions ``[i*B, (i+1)*B)`` of the stream of
    per-epoch permutations (epoch ``e`` shuffled by ``(seed, e)``)."""
    positions = np.arange(iteration * global_batch, (iteration + 1) * global_batch)
    epochs, offsets = np.divmod(positions, n_samples)
    out = np.empty(global_batch, dtype=np.int64)
    for epoch in np.unique(epochs):
        perm = np.random.default_rng([seed, int(epoch)]).permutation(n_samples)
        mask = epochs == epoch
        out[mask] = perm[offsets[mask]]
    return out


@dataclass(frozen=True, eq=False, init=False)
class ArrayData:
    """In-memory ``features`` (n, ...) and ``labels`` (n,): iteration ``i``'s global batch is
    positions ``[i*B*W, (i+1)*B*W)`` of a stream of per-epoch permutations of the samples
    (epoch ``e`` shuffled by ``(seed, e)``); worker ``r``'s batch is its ``r``-th ``B``
    (``batch_size``) of them.

    ``features`` and ``labels`` are numpy arrays or torch tensors; tensors are copied to numpy
    arrays on the CPU here, once (detached from any autograd graph), so that every worker
    slices the same arrays and gets torch tensors of the same dtypes back. Anything else (a
    list, a DataFrame), an array whose dtype torch has no tensor of (objects, strings) and a
    bfloat16 tensor (numpy has no such dtype) are refused here with a
    :class:`~unstall.errors.ConfigError` naming the field."""

    features: np.ndarray
    labels: np.ndarray
    batch_size: int
    seed: int

    def __init__(
        self,
        features: np.ndarray | torch.Tensor,
        labels: np.ndarray | torch.Tensor,
        batch_size: int = 32,
        seed: int = 0,
    ) -> None:
        # A written __init__ (frozen: through object.__setattr__) so that the fields are the
        # numpy arrays the workers slice while the arguments may be tensors.
        owner = type(self).__name__
        set_field = functools.partial(object.__setattr__, self)
        set_field("features", _as_array(owner, "features", features))
        set_field("labels", _as_array(owner, "labels", labels))
        set_field("batch_size", checks.whole(owner, "batch_size", batch_size, minimum=1))
        set_field("seed", checks.seed_of(owner, seed))
        n = len(self.labels)
        check(len(self.features) == n, self, "features", f"must have {n} rows, as the labels")
        check(n >= 1, self, "labels", "must hold at least one sample")

    def __call__(self, rank: int, world_size: int) -> Iterator[Batch]:
        """Worker ``rank``'s batches, one an iteration, without end."""
        for iteration in itertools.count():
            idx = global_indices(
                len(self.labels), self.seed, iteration, self.batch_size * world_size
            )
            mine = idx[rank * self.batch_size : (rank + 1) * self.batch_size]
            yield torch.from_numpy(self.features[mine]), torch.from_numpy(self.labels[mine])


def _as_array(owner: str, field: str, value: object) -> np.ndarray:
    """``value`` (a numpy array or a torch tensor) as a numpy array of at least one dimension
    whose dtype torch can take back (``torch.from_numpy`` in the workers)."""
    if isinstance(value, torch.Tensor):
        if value.dtype == torch.bfloat16:  # numpy has no bfloat16
            raise ConfigError(
                owner, field, "is a bfloat16 tensor, which numpy cannot hold: convert it, .float()"
            )
        try:
            tensor = value.detach().cpu()
            # A CPU tensor's array shares its memory: copied, so that the batches do not change
            # when the caller's tensor does (.cpu() copied one on another device already).
            array = tensor.numpy().copy() if value.device.type == "cpu" else tensor.numpy()
        except (RuntimeError, TypeError) as exc:  # a sparse tensor, say
            why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(owner, field, f"cannot become a numpy array: {why}") from None
    elif isinstance(value, np.ndarray):
        array = value
    else:
        raise ConfigError(
            owner, field, f"must be a numpy array or a torch tensor, got {checks.describe(value)}"
        )
    if array.ndim == 0:
        raise ConfigError(owner, field, "must have a dimension of samples, got a scalar")
    try:  # an empty array of the dtype: the array's own strides are no matter here
        torch.from_numpy(np.empty(0, dtype=array.dtype))
    except TypeError:
        raise ConfigError(
            owner, field, f"has dtype {array.dtype}, which no torch tensor can hold"
        ) from None
    return array


_END = object()  # what an exhausted iterator gives


class BatchStream:
    """One worker's batches from a data function (see the module docstring); errors in the
    user's code, and batches that are not ``(inputs, targets)``, raise a one-line
    :class:`~unstall.usercode.UserCodeError` naming the data function."""

    def __init__(self, data: DataFn, rank: int, world_size: int, seed: int) -> None:
        self.fn = unwrap(data)
        self.rank = rank
        self.seed = seed
        with seeded(derive_seed(seed, rank, 3)):
            self.iterable = call_user(self.fn, rank, world_size, what="data function")
        if not isinstance(self.iterable, Iterable):
            raise UserCodeError(
                f"data function {where_defined(self.fn)} returned a "
                f"{type(self.iterable).__name__}, not an iterable of (inputs, targets)"
            )
        self.iterator: Iterator[Any] | None = None
        self.taken = 0  # batches of the current epoch

    def next(self, iteration: int) -> Batch:
        """The batch of ``iteration`` (iterations are asked for in order)."""
        with seeded(derive_seed(self.seed, iteration, self.rank, 2)):
            item = self._next()
            if item is _END and self.taken > 0:  # the end of an epoch: start the next
                self.iterator, self.taken = None, 0
                item = self._next()
                if item is _END:
                    raise UserCodeError(
                        f"data function {where_defined(self.fn)} ran out after {iteration} "
                        f"batches for worker {self.rank} and gave none when started again (a "
                        "spent generator cannot start again: return a list, a DataLoader or an "
                        "endless generator)"
                    )
        if item is _END:
            raise UserCodeError(
                f"data function {where_defined(self.fn)} gave worker {self.rank} no batch"
            )
        self.taken += 1
        if isinstance(item, tuple | list) and len(item) == 2:
            return item[0], item[1]
        raise UserCodeError(
            f"data function {where_defined(self.fn)} must yield (inputs, targets) pairs; "
            f"got a {type(item).__name__}"
        )

    def _next(self) -> Any:
        try:
            if self.iterator is None:
                self.iterator = iter(self.iterable)
            return next(self.iterator, _END)
        except UnstallError:
            raise
        except Exception as exc:
            raise user_code_error(self.fn, exc, what="data function") from exc
