"""Group commit: submissions that arrive together share one transaction of the store.

A request hands its item to :class:`GroupCommit` and waits for its result; one writer thread
takes every item waiting (up to ``max_batch``), hands them to ``write`` at once (one transaction
of the store for all of them), and answers each request only after ``write`` has returned, so
that an answered submission is as durable as if it had had a transaction of its own. Alone, a
submission waits for its own commit only; under load, the requests that came in while one
transaction was written share the next, and a commit's fixed cost is paid once for them all.

An item whose waiter gave up (its future cancelled) before its batch was taken is left out.
If ``write`` raises, every item of that batch gets the exception (the transaction is one).
"""

from __future__ import annotations

import asyncio
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
        self._waiting: queue.SimpleQueue[tuple[ItemT, Future[ResultT]] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()
        self._closed = False
        self.batches = 0  # transactions written
        self.items = 0  # items written in them

    def future(self, item: ItemT) -> Future[ResultT]:
        """``item``'s result, once the transaction that holds it has committed."""
        if self._closed:
            raise RuntimeError(f"{self._name}: closed")
        if self._thread is None:
            with self._start:  # started on first use: a service that takes no job needs none
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                    self._thread.start()
        future: Future[ResultT] = Future()
        self._waiting.put((item, future))
        return future

    def submit(self, item: ItemT) -> ResultT:
        """``item``'s result, waiting in this thread."""
        return self.future(item).result()

    async def submit_async(self, item: ItemT) -> ResultT:
        """``item``'s result, waiting in the running event loop (which goes on meanwhile)."""
        return await asyncio.wrap_future(self.future(item))

    def close(self) -> None:
        """Write what is waiting, then stop the writer thread."""
        self._closed = True
        if self._thread is not None:
            self._waiting.put(None)
            self._thread.join(timeout=30)

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

    def _commit(self, batch: list[tuple[ItemT, Future[ResultT]]]) -> None:
        # A future whose waiter gave up before now is dropped; the rest can no longer be
        # cancelled (their item is being written).
        taken = [(item, future) for item, future in batch if future.set_running_or_notify_cancel()]
        if not taken:
            return
        try:
            results = self._write([item for item, _ in taken])
            if len(results) != len(taken):
                raise RuntimeError(f"{self._name}: {len(results)} results for {len(taken)} items")
        except BaseException as exc:  # every waiter of the batch learns it; the thread goes on
            for _, future in taken:
                future.set_exception(exc)
            return
        self.batches += 1
        self.items += len(taken)
        for (_, future), result in zip(taken, results, strict=True):
            future.set_result(result)
