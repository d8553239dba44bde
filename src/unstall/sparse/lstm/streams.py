"""Two single-threaded streams on a CPU: the structured kernels' way of using two cores.

With a fresh kept set every step, a structured product is small (batch rows by the kept units),
and two intra-op threads split such products badly, while on one thread the structured mode
beats the dense one (see BENCHMARKS.md). So instead of splitting each product across the cores,
a *pipelined* section runs two streams of whole products, each single-threaded: the calling
thread (stream A) and one worker thread (stream B), handing work over step by step
(:class:`Progress`). :mod:`unstall.sparse.lstm.pipelined` says what each stream computes.

Threads. MKL and OpenMP keep their thread counts per thread: a new Python thread's GEMMs run with
the process default (two here), whatever the main thread set. So the worker sets its own count
to 1 when it starts, and the caller's section sets the caller's count to 1 and restores it on
exit (:func:`in_two_streams`). ``torch.set_num_threads`` also sets process-wide values (the count
that threads not yet started inherit, and the pthreadpool of the quantized kernels): they are 1
while a section runs and restored when it ends, so another thread that starts torch work inside
a section may run single-threaded; after the section nothing has changed.

Results do not depend on timing: each stream runs its operations in a fixed order, a stream reads
only what the other has finished (as :class:`Progress` reports it), and the two write to
disjoint tensors.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TypeVar

import torch

from unstall.sparse.lstm import projections
from unstall.workload.threads import torch_threads

A = TypeVar("A")
B = TypeVar("B")

_WORKER: ThreadPoolExecutor | None = None
_WORKER_LOCK = threading.Lock()


class StreamAbortedError(RuntimeError):
    """The other stream failed; its own exception is the one to report."""


class Progress:
    """A step counter one stream advances and the other waits on.

    Forward passes count up (``value`` = steps done); backward passes count down (``value`` = the
    first step whose gradient is done). :meth:`abort` wakes every waiter with
    :class:`StreamAbortedError`, so a failure in one stream never leaves the other waiting.
    """

    def __init__(self, value: int) -> None:
        self.value = value
        self._aborted = False
        self._cond = threading.Condition()

    def set(self, value: int) -> None:
        with self._cond:
            self.value = value
            self._cond.notify_all()

    def abort(self) -> None:
        with self._cond:
            self._aborted = True
            self._cond.notify_all()

    def wait_until(self, reached: Callable[[int], bool]) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._aborted or reached(self.value))
            if self._aborted:
                raise StreamAbortedError("the other stream failed")


def _one_thread() -> None:
    torch.set_num_threads(1)


def _forget_worker_in_child() -> None:
    """A forked child (a DataLoader worker, say) has no copy of the parent's worker thread, but
    would inherit the pool object, whose queue then nobody serves: start afresh there."""
    global _WORKER
    _WORKER = None


os.register_at_fork(after_in_child=_forget_worker_in_child)


def _worker() -> ThreadPoolExecutor:
    """The process's stream-B thread, started on first use (always inside a section)."""
    global _WORKER
    with _WORKER_LOCK:
        if _WORKER is None:
            _WORKER = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="unstall-stream", initializer=_one_thread
            )
        return _WORKER


def _stream_b(fn: Callable[[], B], progress: Progress) -> Callable[[], B]:
    def run() -> B:
        try:
            with torch.no_grad():  # grad mode is per thread; the kernels record no graph
                return fn()
        except BaseException:
            progress.abort()  # stream A may be waiting for this stream
            raise

    return run


def in_two_streams(
    stream_a: Callable[[], A], stream_b: Callable[[], B], progress: Progress
) -> tuple[A, B]:
    """Run ``stream_b`` on the worker and ``stream_a`` here, both single-threaded; the caller's
    thread count is restored on return. A failure in either stream aborts ``progress`` (waking
    the other) and is re-raised here once both have stopped."""
    with torch_threads(1):
        future = _worker().submit(_stream_b(stream_b, progress))
        try:
            result_a = stream_a()
        except StreamAbortedError:
            future.result()  # raises stream B's exception, the cause
            raise
        except BaseException:
            progress.abort()
            wait([future])
            raise
        return result_a, future.result()


# Smallest hidden size the pipelined layer is chosen at by default: below it a step's products
# are too small for two streams to pay (measured: benchmarks/BENCHMARKS.md, "Structured-dropout
# LSTM: one training step").
PIPELINE_MIN_HIDDEN = 1024


def use_streams(setting: bool | None, device: torch.device, hidden: int) -> bool:
    """Whether a structured layer of width ``hidden`` runs pipelined: ``setting`` when given (on
    a CPU); by default on a CPU with exactly two intra-op threads (with more cores, two
    single-threaded streams would leave the rest idle; not measured) and hidden at least
    :data:`PIPELINE_MIN_HIDDEN`."""
    return _two_streams(setting, device, hidden >= PIPELINE_MIN_HIDDEN)


def use_split_decoder(setting: bool | None, device: torch.device, width: int) -> bool:
    """Whether a structured product onto ``width`` outputs runs as two streams of column tiles
    (:class:`unstall.sparse.lstm.pipelined.SplitDecoder`): ``setting`` when given (on a CPU); by
    default on a CPU with exactly two intra-op threads and an output as wide as a vocabulary
    (at least ``projections.TILED_MIN_COLUMNS``): the PTB decoder's forward and backward (hidden
    400, batch 64, 10k words) measured 1.09-1.25x faster that way than on two threads in one
    stream, a whole training step 1.03x by medians (BENCHMARKS.md)."""
    return _two_streams(setting, device, width >= projections.TILED_MIN_COLUMNS)


def _two_streams(setting: bool | None, device: torch.device, large_enough: bool) -> bool:
    """``setting`` when given (streams exist on a CPU only); by default on a CPU with exactly
    two intra-op threads where the products are ``large_enough`` to pay for the hand-offs."""
    if setting is not None:
        return setting and device.type == "cpu"
    two = device.type == "cpu" and torch.get_num_threads() == 2
    return two and large_enough
