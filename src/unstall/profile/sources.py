"""Where a profiled training loop's batches come from: the data sources of the differential runs.

Every source gives each worker its *in-memory* batches: a small pool held in memory and cycled,
so that the compute run and the DDP runs time compute and communication with no input pipeline
at all. A source that has a real input pipeline also gives the one-worker *data runs* whose
differences are the input stalls (see :mod:`unstall.profile.stalls`):

- :class:`SyntheticBatches`: the random batches of a
  :class:`~unstall.workload.zoo_jobs.SyntheticData`; no data runs.
- :class:`ImageFileData`: an image folder (class folders or the flat layout of
  :mod:`unstall.profile.images`) read through a DataLoader: cold (page cache dropped), warm
  (files in the page cache) and cached (decoded once up front) runs.
- :class:`UserData`: the user's ``data(rank, world_size) -> iterable of (inputs, targets)``. The
  profiler builds the variants itself from the first batches each worker's iterable yields: held
  in memory they are the in-memory batches and the cached run; the iterable read as it runs is
  the warm run (the whole pipeline, its files wherever the operating system holds them), the
  function called again for a new iterable when one ends (a new epoch). Fetch
  and prep are not told apart: the whole input stall is ``prep_stall_s`` (warm - cached).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from unstall.config import check
from unstall.profile import images
from unstall.profile.config import InjectedDelays
from unstall.profile.images import Batch, BatchFeed, ImageSet
from unstall.usercode import UserCodeError, call_user, user_code_error, where_defined
from unstall.workload.zoo_jobs import SyntheticData

DataFunction = Callable[[int, int], Iterable[Any]]
# Batches each worker holds in memory (cycled): enough that no one batch stays in a cache.
POOL = 4


class DataSource(ABC):
    """A source of batches for the profiled loop (see the module docstring).

    ``label`` is what results say the data was; ``data_runs`` the one-worker data runs the
    source offers, a subset of ``("cold", "warm", "cached")``.
    """

    label: str
    data_runs: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def memory_feed(self, rank: int, world_size: int, seed: int) -> BatchFeed:
        """Worker ``rank``'s in-memory batches (cycled) for the compute and DDP runs."""

    def data_feeds(self, *, seed: int, delays: InjectedDelays) -> dict[str, BatchFeed]:
        """One worker alone: the feed of each of :attr:`data_runs`."""
        return {}

    def before_run(self, run: str) -> None:  # noqa: B027 (a hook: most sources need nothing)
        """Called before every timed data run (the cold run drops the page cache here)."""

    @abstractmethod
    def describe(self) -> str:
        """One line for the report: what the data is, and how each run is fed from it."""


def _cycle(pool: list[Batch]) -> BatchFeed:
    return lambda index: pool[index % len(pool)]


@dataclass(frozen=True)
class SyntheticBatches(DataSource):
    """The random batches of a :class:`~unstall.workload.zoo_jobs.SyntheticData` (the one
    synthetic source of every part, with its one seed rule): worker ``rank`` holds the batches
    of its first steps, drawn as ``data.batch(rank, step)`` would draw them, so every run of a
    profile sees the same batches. :func:`unstall.profile.measure_stalls` wraps a
    ``SyntheticData`` in one."""

    data: SyntheticData
    label: str = "synthetic"

    def describe(self) -> str:
        return (
            f"{self.label}: {POOL} random batches per worker held in memory and cycled; no"
            " input pipeline, so no data runs"
        )

    def memory_feed(self, rank: int, world_size: int, seed: int) -> BatchFeed:
        data = self.data
        pool = [
            call_user(
                data.make_batch,
                data.batch_size,
                generator=data.generator(rank, step),
                what="batch function",
            )
            for step in range(POOL)
        ]
        return _cycle(pool)


def as_source(data: DataSource | SyntheticData) -> DataSource:
    """``data`` as a profiler's source (a :class:`SyntheticData` in :class:`SyntheticBatches`)."""
    return SyntheticBatches(data) if isinstance(data, SyntheticData) else data


@dataclass(frozen=True)
class ImageFileData(DataSource):
    """An image dataset on disk (``images``: :func:`unstall.profile.images.read_dataset`, class
    folders or the flat layout), fed in batches of ``batch`` images through a DataLoader with
    ``workers`` worker processes, each image resized to ``image_size`` where it differs.
    ``memory`` gives the in-memory batches of the compute and DDP runs (for a zoo model its
    synthetic images); without it, the first decoded batches do."""

    images: ImageSet
    batch: int
    memory: DataSource | SyntheticData | None = None
    label: str = ""
    workers: int = 0
    image_size: int | None = None
    data_runs: ClassVar[tuple[str, ...]] = ("cold", "warm", "cached")

    def __post_init__(self) -> None:
        if self.memory is not None:
            object.__setattr__(self, "memory", as_source(self.memory))
        check(bool(self.images.paths), self, "images", "must hold at least one image file")
        check(self.batch >= 1, self, "batch", f"must be >= 1, got {self.batch!r}")
        check(self.workers >= 0, self, "workers", f"must be >= 0, got {self.workers!r}")

    @property
    def paths(self) -> tuple[Path, ...]:
        return self.images.paths

    def memory_feed(self, rank: int, world_size: int, seed: int) -> BatchFeed:
        if self.memory is not None:
            return as_source(self.memory).memory_feed(rank, world_size, seed)
        return images.cached_feed(self.images, self.batch, image_size=self.image_size)

    def data_feeds(self, *, seed: int, delays: InjectedDelays) -> dict[str, BatchFeed]:
        def files(fetch_s: float, drop_cache: bool) -> BatchFeed:
            return images.loader_feed(
                self.images,
                self.batch,
                workers=self.workers,
                image_size=self.image_size,
                seed=seed,
                fetch_delay_s=fetch_s,
                prep_delay_s=delays.prep_s,
                drop_cache=drop_cache,
            )

        return {
            "cold": files(delays.fetch_s, drop_cache=True),
            "warm": files(0.0, drop_cache=False),
            "cached": images.cached_feed(self.images, self.batch, image_size=self.image_size),
        }

    def describe(self) -> str:
        where = "in the training process" if self.workers == 0 else f"by {self.workers} workers"
        memory = (
            f"{as_source(self.memory).label} batches"
            if self.memory is not None
            else "the cached batches"
        )
        classes = f", {len(self.images.classes)} classes" if self.images.classes else ""
        return (
            f"images {self.label} ({self.images.layout}, {len(self.images.paths)} files"
            f"{classes}), read and decoded with Pillow through a DataLoader {where}: cold"
            " (each file's cached pages dropped before it is read), warm (page cache), cached"
            f" (the first {images.CACHED_BATCHES} batches decoded up front); the compute and DDP"
            f" runs use {memory}"
        )


@dataclass(frozen=True)
class UserData(DataSource):
    """The user's data function ``fn(rank, world_size) -> iterable of (inputs, targets)``; see
    the module docstring for the runs built from it."""

    fn: DataFunction
    label: str = ""
    data_runs: ClassVar[tuple[str, ...]] = ("warm", "cached")

    def _iterate(self, rank: int, world_size: int) -> Iterator[Batch]:
        iterable = call_user(self.fn, rank, world_size, what="data function")
        try:
            items = iter(iterable)
        except TypeError:
            raise UserCodeError(
                f"data function {where_defined(self.fn)} returned a"
                f" {type(iterable).__name__}, not an iterable of (inputs, targets)"
            ) from None
        return self._pairs(items)

    def _pairs(self, items: Iterator[Any]) -> Iterator[Batch]:
        """The batches of ``items``, checked; an error inside the user's iterator names the
        data function (it runs the user's code, as the call did)."""
        while True:
            try:
                item = next(items)
            except StopIteration:
                return
            except Exception as exc:
                raise user_code_error(self.fn, exc, what="data function") from exc
            yield self._pair(item)

    def _pair(self, item: Any) -> Batch:
        if (
            isinstance(item, tuple | list)
            and len(item) == 2
            and all(isinstance(t, torch.Tensor) for t in item)
        ):
            return item[0], item[1]
        got = type(item).__name__
        if isinstance(item, tuple | list):  # what is in it: (dict, Tensor), (Tensor, Tensor, int)
            parts = [type(part).__name__ for part in item[:4]] + ["..."] * (len(item) > 4)
            got += f" ({', '.join(parts)})"
        raise UserCodeError(
            f"data function {where_defined(self.fn)} must yield (inputs, targets) pairs of"
            f" tensors; got a {got}"
        )

    def _first(self, rank: int, world_size: int) -> list[Batch]:
        pool = []
        for batch in self._iterate(rank, world_size):
            pool.append(batch)
            if len(pool) == POOL:
                break
        if not pool:
            raise UserCodeError(
                f"data function {where_defined(self.fn)} yielded no batch for worker {rank}"
                f" of {world_size}"
            )
        return pool

    def memory_feed(self, rank: int, world_size: int, seed: int) -> BatchFeed:
        return _cycle(self._first(rank, world_size))

    def describe(self) -> str:
        return (
            f"your data function {self.label or where_defined(self.fn)}: the compute and DDP runs"
            f" cycle the first {POOL} batches each worker's iterable yields, held in memory; the"
            f" cached run worker 0's first {POOL}; the warm run reads the iterable as it runs,"
            " called again when it ends (a new epoch; fetch and prep not told apart: the whole"
            " input stall is prep)"
        )

    def data_feeds(self, *, seed: int, delays: InjectedDelays) -> dict[str, BatchFeed]:
        return {"warm": self._live_feed(delays.prep_s), "cached": _cycle(self._first(0, 1))}

    def _live_feed(self, extra_delay_s: float) -> BatchFeed:
        """The pipeline as it runs: the next batch of worker 0's iterable, started again when
        it ends (a new epoch)."""
        state: dict[str, Iterator[Batch]] = {"items": self._iterate(0, 1)}

        def feed(index: int) -> Batch:
            if extra_delay_s > 0:
                time.sleep(extra_delay_s)
            batch = next(state["items"], None)
            if batch is None:
                state["items"] = self._iterate(0, 1)
                batch = next(state["items"], None)
            if batch is None:
                raise UserCodeError(f"data function {where_defined(self.fn)} yielded no batch")
            return batch

        return feed
