"""An emulated network link for DDP: a communication hook that delays every gradient bucket.

The hook runs the normal all-reduce, then holds the bucket's result back by the time the bucket
would take on a :class:`~unstall.net.link.Link`. A ring all-reduce of ``B`` bytes over ``N``
workers sends ``2 (N - 1) / N * B`` bytes through each worker's link (reduce-scatter, then
all-gather), so::

    delay = latency + 2 (N - 1) / N * B / bytes_per_s

The latency is counted once per bucket (the ring's steps are pipelined across chunks). The
delay is a sleep in the future's callback, so it overlaps backward compute exactly as a real
transfer would, and buckets wait one after the other (the callbacks run in order on one thread).
The hook also records when each bucket started and finished, for the per-phase timers.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from unstall.net.link import Link


def ring_bytes(bucket_bytes: float, workers: int) -> float:
    """Bytes a ring all-reduce of ``bucket_bytes`` sends through each worker's link."""
    return 2.0 * (workers - 1) / workers * bucket_bytes


def bandwidth_delay_s(link: Link, bucket_bytes: float, workers: int) -> float:
    """The bandwidth part of one bucket's delay: the ring's bytes over the link's bandwidth."""
    return link.transfer_s(ring_bytes(bucket_bytes, workers))


def bucket_delay_s(link: Link, bucket_bytes: float, workers: int) -> float:
    """Latency plus the bandwidth part, for one bucket."""
    return link.latency_s + bandwidth_delay_s(link, bucket_bytes, workers)


def link_json(link: Link | None) -> dict[str, float] | None:
    """The emulated link as results and configs show it: the units ``--network GBPS,LATENCY_MS``
    takes on the command line."""
    if link is None:
        return None
    return {"gbps": link.bandwidth_gbps, "latency_ms": link.latency_ms}


@dataclass(kw_only=True)
class HookState:
    """Mutable state of :func:`timed_allreduce_hook`: the link (``None``: none emulated), an
    injected extra delay per bucket, and the (start, end) times of this iteration's buckets
    (recorded only while ``record_spans``: off in the overhead runs without timers)."""

    workers: int
    link: Link | None = None
    extra_delay_s: float = 0.0
    record_spans: bool = True
    spans: list[tuple[float, float]] = field(default_factory=list)
    delay_total_s: float = 0.0
    link_free_at: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def occupy_link(self, delay_s: float, link_delay_s: float) -> float:
        """Book ``delay_s`` on the link after whatever it carries now; returns when it ends.
        ``link_delay_s`` is the emulated link's part of it (the rest is injected).

        gloo completes buckets on several threads at once; the booking keeps the emulated
        transfers one after the other, as on one physical link."""
        with self.lock:
            now = time.perf_counter()
            self.link_free_at = max(now, self.link_free_at) + delay_s
            self.delay_total_s += link_delay_s
            return self.link_free_at


def timed_allreduce_hook(state, bucket):  # type: ignore[no-untyped-def]
    """DDP comm hook: average the bucket across workers, then apply the emulated delay.

    No annotations: DDP rejects a hook whose annotations are not its own classes, and this
    module's annotations are strings (``from __future__ import annotations``)."""
    import torch.distributed as dist

    tensor = bucket.buffer()
    started = time.perf_counter() if state.record_spans else 0.0
    link_delay = 0.0
    if state.link is not None:
        link_delay = bucket_delay_s(
            state.link, tensor.numel() * tensor.element_size(), state.workers
        )
    delay = state.extra_delay_s + link_delay
    future = dist.all_reduce(tensor, async_op=True).get_future()

    def finish(fut: Any) -> Any:
        if delay > 0:
            time.sleep(max(0.0, state.occupy_link(delay, link_delay) - time.perf_counter()))
        if state.record_spans:
            state.spans.append((started, time.perf_counter()))
        return fut.value()[0].div_(state.workers)

    return future.then(finish)
