"""A zoo model as a job to train: its model function, its synthetic data, its loss; one seed rule.

Every part that trains (the parameter server, the profiler, the live backend) takes a job as
three callables: ``model_fn() -> nn.Module``, ``data_fn(rank, world_size) -> iterable of
(inputs, targets)``, ``loss(outputs, targets) -> scalar tensor``. :func:`zoo_job` makes them for
a zoo model by name; :class:`SyntheticData` is the one source of random batches, drawn by one
rule: worker ``rank``'s batch of step ``step`` comes from a generator seeded by
``derive_seed(seed, step, rank)``, so that any step's batch can be drawn again on its own (a
job resumed at a data position gets the batches an unstopped one would have had).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from unstall import checks
from unstall.errors import ConfigError
from unstall.workload import zoo
from unstall.workload.losses import LossFn
from unstall.workload.named import Named

Batch = tuple[Any, Any]  # (inputs, targets)


def derive_seed(*parts: int) -> int:
    """A 63-bit seed from ``parts`` (a run's seed, a step, a rank): independent streams."""
    return int(np.random.SeedSequence(list(parts)).generate_state(1, dtype=np.uint64)[0] >> 1)


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Torch's global generator seeded with ``seed`` inside, and as it was after."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


@dataclass(frozen=True)
class SyntheticData:
    """Random batches: ``make_batch(batch_size, generator=g)`` returns one ``(inputs, targets)``
    batch; worker ``rank``'s batch of step ``i`` is drawn from a generator seeded by
    ``derive_seed(seed, i, rank)`` (:meth:`batch`). Called as ``data(rank, world_size)`` it
    gives that worker's batches, one a step, without end (from step ``start``). For a zoo model
    the batch function is ``functools.partial(unstall.workload.zoo.example_batch, name,
    **options)`` (:func:`zoo_data`)."""

    make_batch: Callable[..., Batch]
    batch_size: int = 32
    seed: int = 0

    def __post_init__(self) -> None:
        owner = type(self).__name__
        if not callable(self.make_batch):
            raise ConfigError(
                owner,
                "make_batch",
                "must be a function make_batch(batch_size, generator=g) that returns one "
                f"(inputs, targets) batch, got {checks.describe(self.make_batch)}",
            )
        # Frozen: the checked values (plain ints) are set through object.__setattr__.
        batch_size = checks.whole(owner, "batch_size", self.batch_size, minimum=1)
        object.__setattr__(self, "batch_size", batch_size)
        object.__setattr__(self, "seed", checks.seed_of(owner, self.seed))

    def generator(self, rank: int, step: int) -> torch.Generator:
        """The generator worker ``rank``'s batch of step ``step`` is drawn from."""
        return torch.Generator().manual_seed(derive_seed(self.seed, step, rank))

    def batch(self, rank: int, step: int) -> Batch:
        """Worker ``rank``'s batch of step ``step``."""
        batch: Batch = self.make_batch(self.batch_size, generator=self.generator(rank, step))
        return batch

    def __call__(self, rank: int, world_size: int, start: int = 0) -> Iterator[Batch]:
        """Worker ``rank``'s batches, one a step from step ``start``, without end."""
        for step in itertools.count(start):
            yield self.batch(rank, step)


def zoo_model(name: str, **options: object) -> Named:
    """The model function of zoo model ``name`` built with ``options`` (checked now: an unknown
    model or option raises a ConfigError), labelled with the name and the options."""
    zoo.resolve_options(name, options)
    return Named(functools.partial(zoo.build, name, **options), name, options)


def zoo_data(
    name: str, batch_size: int, seed: int = 0, options: Mapping[str, object] | None = None
) -> SyntheticData:
    """Synthetic batches of ``batch_size`` samples for zoo model ``name`` built with
    ``options``."""
    typed: dict[str, Any] = dict(options or {})
    make = functools.partial(zoo.example_batch, name, **typed)
    return SyntheticData(make, batch_size=batch_size, seed=seed)


class ZooJob(NamedTuple):
    """A zoo model as a job: ``model_fn() -> nn.Module`` (a :class:`Named` labelled with the
    model's name and options), ``data_fn(rank, world_size) -> iterable of (inputs, targets)``
    (its :class:`SyntheticData`) and ``loss(outputs, targets) -> scalar tensor``."""

    model_fn: Named
    data_fn: SyntheticData
    loss: LossFn


def zoo_job(name: str, batch: int, seed: int = 0, **options: object) -> ZooJob:
    """Zoo model ``name`` (built with ``options``) as a job to train: its model function, its
    synthetic batches of ``batch`` samples per worker (deterministic per ``(seed, rank, step)``:
    ``data_fn.batch(rank, step)`` draws any step's batch again, ``data_fn(rank, world_size,
    start)`` goes on from step ``start``), and its loss. An unknown model or option raises a
    :class:`~unstall.errors.ConfigError`.

    >>> model_fn, data_fn, loss = zoo_job("mlp", batch=4, seed=1)
    >>> inputs, targets = next(iter(data_fn(0, 2)))
    >>> loss(model_fn()(inputs), targets).dim(), tuple(inputs.shape)
    (0, (4, 784))
    """
    model_fn = zoo_model(name, **options)
    return ZooJob(
        model_fn=model_fn,
        data_fn=zoo_data(name, batch, seed, options),
        loss=zoo.loss_fn(name),
    )
