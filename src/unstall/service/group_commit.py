"""Group commit: submissions that arrive together share one transaction of the store.

A request hands its item to :class:`GroupCommit` and waits for its result; one writer thread
takes every item waiting (up to ``max_batch``), hands them to ``write`` at once (one transaction
of the store for all of them), and answers each request only after ``write`` has returned, so
that an answered submission is as durable as if it had had a transaction of its own. Alone, a
submission waits for its own commit only; under load, the requests that came in while one
transaction was written share the next, and a commit's fixed cost is paid once for them all.

An item handed over is written even if its waiter gives up meanwhile (as a request whose client
went away after sending it). If ``write`` raises, every item of that batch gets the exception
(the transaction is one).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Generic, TypeVar

ItemT = TypeVar("ItemT")
ResultT = TypeVar("ResultT")

# Items one transaction takes at most: a burst is written in a few transactions, each answered
# as soon as it commits, rather than in one that keeps every request of the burst waiting.
MAX_BATCH = 256

# What a waiter is: a thread's future, or an event loop's future with its loop.
_Waiter = Future | tuple[asyncio.AbstractEventLoop, asyncio.Future]


class GroupCommit(Generic[ItemT, ResultT]):
    """``write(items) -> results`` (one result per item, in order) in a writer thread of its
    own, for every item waiting at once (see the module docstring)."""

    def __init__(
        self,
        write: Callable[[Sequence[ItemT]], Sequence[ResultT]],
        *,
        name: str,
        max_batch: int = MAX_BATCH,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        self._write = write
        self._name = name
        self._max_batch = max_batch
        self._waiting: queue.SimpleQueue[tuple[ItemT, _Waiter] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()
        self._closed = False
        self.batches = 0  # transactions written
        self.items = 0  # items written in them

    def submit(self, item: ItemT) -> ResultT:
        """``item``'s result, waiting in this thread."""
        future: Future[ResultT] = Future()
        self._hand_over(item, future)
        return future.result()

    async def submit_async(self, item: ItemT) -> ResultT:
        """``item``'s result, waiting in the running event loop (which goes on meanwhile)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ResultT] = loop.create_future()
        self._hand_over(item, (loop, future))
        return await future

    def close(self) -> None:
        """Write what is waiting, then stop the writer thread."""
        self._closed = True
        if self._thread is not None:
            self._waiting.put(None)
            self._thread.join(timeout=30)

    def _hand_over(self, item: ItemT, waiter: _Waiter) -> None:
        if self._closed:
            raise RuntimeError(f"{self._name}: closed")
        if self._thread is None:
            with self._start:  # started on first use: a service that takes no job needs none
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                    self._thread.start()
        self._waiting.put((item, waiter))

    def _run(self) -> None:
        while True:
            first = self._waiting.get()
            if first is None:
                return
            batch = [first]
            stop = False
            while len(batch) < self._max_batch:
                try:
                    more = self._waiting.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                batch.append(more)
            self._commit(batch)
            if stop:
                return

    def _commit(self, batch: list[tuple[ItemT, _Waiter]]) -> None:
        outcomes: list[ResultT | BaseException]
        try:
            results = self._write([item for item, _ in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"{self._name}: {len(results)} results for {len(batch)} items")
            outcomes = list(results)
            self.batches += 1
            self.items += len(batch)
        except BaseException as exc:  # every waiter of the batch learns it; the thread goes on
            outcomes = [exc] * len(batch)
        # An event loop's waiters are settled in that loop, all of a batch in one call: one
        # wake-up of the loop per transaction, not one per request.
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future, object]]] = {}
        for (_, waiter), outcome in zip(batch, outcomes, strict=True):
            if isinstance(waiter, Future):
                _settle(waiter, outcome)
            else:
                loop, future = waiter
                by_loop.setdefault(loop, []).append((future, outcome))
        for loop, settled in by_loop.items():
            # A loop that has closed has nobody waiting in it any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle_all, settled)


def _settle(future: Future | asyncio.Future, outcome: object) -> None:
    if future.done():  # its waiter gave up (cancelled)
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


def _settle_all(settled: list[tuple[asyncio.Future, object]]) -> None:
    for future, outcome in settled:
        _settle(future, outcome)
