"""Where a profiled training loop's batches come from: the data sources of the differential runs.

Every source gives each worker its *in-memory* batches: a small pool held in memory and cycled,
so that the compute run and the DDP runs time compute and communication with no input pipeline
at all. A source that has a real input pipeline also gives the one-worker *data runs* whose
differences are the input stalls (see :mod:`unstall.profile.stalls`):

- :class:`SyntheticData`: random batches from a batch function; no data runs.
- :class:`ImageFileData`: the PNG folder of :mod:`unstall.profile.images`: cold (page cache
  dropped), warm (files in the page cache) and cached (decoded once up front) runs.
- :class:`UserData`: the user's ``data(rank, world_size) -> iterable of (inputs, targets)``. The
  profiler builds the variants itself from the first batches each worker's iterable yields: held
  in memory they are the in-memory batches and the cached run; the iterable read as it runs is
  the warm run (the whole pipeline, its files wherever the operating system holds them). Fetch
  and prep are not told apart: the whole input stall is ``prep_stall_s`` (warm - cached).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from unstall.config import check
from unstall.profile import images
from unstall.profile.config import InjectedDelays
from unstall.profile.images import Batch, BatchFeed
from unstall.usercode import UserCodeError, call_user, user_code_error, where_defined

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


def _cycle(pool: list[Batch]) -> BatchFeed:
    return lambda index: pool[index % len(pool)]


@dataclass(frozen=True)
class SyntheticData(DataSource):
    """Random batches: ``make_batch(generator=g)`` returns one ``(inputs, targets)`` batch.

    Worker ``rank`` draws its pool from a generator seeded ``seed * 1000 + rank``, so every run
    of a profile sees the same batches. For a zoo model the batch function is
    ``functools.partial(unstall.workload.zoo.example_batch, name, batch_size, **options)``.
    """

    make_batch: Callable[..., Batch]
    label: str = "synthetic"

    def memory_feed(self, rank: int, world_size: int, seed: int) -> BatchFeed:
        generator = torch.Generator().manual_seed(seed * 1000 + rank)
        pool = [
            call_user(self.make_batch, generator=generator, what="batch function")
            for _ in range(POOL)
        ]
        return _cycle(pool)


@dataclass(frozen=True)
class ImageFileData(DataSource):
    """The PNG folder of :mod:`unstall.profile.images` (``paths``: its files, sorted), fed in
    batches of ``batch`` images. ``memory`` gives the in-memory batches of the compute and DDP
    runs (for a zoo model its synthetic images); without it, the decoded files are."""

    paths: tuple[Path, ...]
    batch: int
    memory: DataSource | None = None
    label: str = ""
    data_runs: ClassVar[tuple[str, ...]] = ("cold", "warm", "cached")

    def __post_init__(self) -> None:
        check(bool(self.paths), self, "paths", "must hold at least one image file")
        check(self.batch >= 1, self, "batch", f"must be >= 1, got {self.batch!r}")

    def memory_feed(self, rank: int, world_size: int, seed: int) -> BatchFeed:
        if self.memory is not None:
            return self.memory.memory_feed(rank, world_size, seed)
        return images.cached_feed(list(self.paths), self.batch)

    def data_feeds(self, *, seed: int, delays: InjectedDelays) -> dict[str, BatchFeed]:
        paths = list(self.paths)
        rng = np.random.default_rng(seed)  # one stream: the cold and warm runs continue it
        return {
            "cold": images.file_feed(
                paths, self.batch, rng, fetch_delay_s=delays.fetch_s, prep_delay_s=delays.prep_s
            ),
            "warm": images.file_feed(paths, self.batch, rng, prep_delay_s=delays.prep_s),
            "cached": images.cached_feed(paths, self.batch),
        }

    def before_run(self, run: str) -> None:
        if run == "cold":
            images.drop_page_cache(list(self.paths))


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
        raise UserCodeError(
            f"data function {where_defined(self.fn)} must yield (inputs, targets) pairs of"
            f" tensors; got a {type(item).__name__}"
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
