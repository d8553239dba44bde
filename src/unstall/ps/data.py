"""The global batches of a run, and each worker's shard of them.

Iteration ``i``'s global batch is the concatenation of the workers' shards in rank order; the
reference trains on exactly that. Two sources:

- ``synthetic``: the zoo's random batch for the model, drawn from a generator seeded by
  ``(seed, iteration, rank)``; nothing to load, any model.
- ``digits``: scikit-learn's 8x8 handwritten digits (1,797 images, 64 features scaled to [0, 1],
  10 classes; shipped inside the wheel). Samples are taken epoch by epoch in a seeded
  permutation; a ``features`` model (``mlp``) with 64 inputs and 10 classes learns it, and its
  loss visibly falls.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from unstall.config import check
from unstall.workload import zoo

Dataset = tuple[np.ndarray, np.ndarray]  # features float32 (n, f), labels int64 (n,)


def load_digits() -> Dataset:
    """scikit-learn's digits, features scaled to [0, 1] (imported late: sklearn is slow to load)."""
    from sklearn.datasets import load_digits as sk_load_digits

    bunch = sk_load_digits()
    features = (bunch.data / 16.0).astype(np.float32)
    return features, bunch.target.astype(np.int64)


# name -> (loader or None for synthetic, model options the data set needs)
DATA_SOURCES: dict[str, tuple[Callable[[], Dataset] | None, dict[str, object]]] = {
    "synthetic": (None, {}),
    "digits": (load_digits, {"in_features": 64, "num_classes": 10}),
}


def derive_seed(*parts: int) -> int:
    """A 63-bit seed from ``parts`` (a run's seed, an iteration, a rank): independent streams."""
    return int(np.random.SeedSequence(list(parts)).generate_state(1, dtype=np.uint64)[0] >> 1)


@dataclass(frozen=True, kw_only=True)
class DataSpec:
    """Where batches come from; ``batch_size`` is per worker (the global batch is W times it)."""

    source: str = "synthetic"
    batch_size: int = 32
    seed: int = 0

    def __post_init__(self) -> None:
        known = ", ".join(DATA_SOURCES)
        check(self.source in DATA_SOURCES, self, "source", f"must be one of {known}")
        check(self.batch_size >= 1, self, "batch_size", f"must be >= 1, got {self.batch_size}")


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


def worker_batch(
    spec: DataSpec,
    model: str,
    model_options: dict[str, object],
    *,
    iteration: int,
    rank: int,
    workers: int,
    dataset: Dataset | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Worker ``rank``'s shard of iteration ``iteration``'s global batch."""
    if dataset is None:
        gen = torch.Generator().manual_seed(derive_seed(spec.seed, iteration, rank))
        return zoo.example_batch(model, spec.batch_size, generator=gen, **model_options)
    features, labels = dataset
    idx = global_indices(len(labels), spec.seed, iteration, spec.batch_size * workers)
    mine = idx[rank * spec.batch_size : (rank + 1) * spec.batch_size]
    return torch.from_numpy(features[mine]), torch.from_numpy(labels[mine])
