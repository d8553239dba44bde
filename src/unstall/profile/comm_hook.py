"""An emulated network link for DDP: a communication hook that delays every gradient bucket.

The hook runs the normal all-reduce, then holds the bucket's result back by the time the bucket
would take on a link of ``gbps`` Gbit/s and ``latency_ms`` per bucket. A ring all-reduce of
``B`` bytes over ``N`` workers sends ``2 (N - 1) / N * B`` bytes through each worker's link
(reduce-scatter, then all-gather), so::

    delay = latency_ms / 1e3 + 2 (N - 1) / N * B * 8 / (gbps * 1e9)

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

from unstall.config import check, check_non_negative, check_positive
from unstall.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class LinkSpec:
    """An emulated link: bandwidth per direction in Gbit/s and latency per bucket in ms."""

    gbps: float
    latency_ms: float = 0.0

    def __post_init__(self) -> None:
        check_positive(self, gbps=self.gbps)
        check_non_negative(self, latency_ms=self.latency_ms)

    @classmethod
    def parse(cls, text: str) -> LinkSpec:
        """``"GBPS,LATENCY_MS"`` (or just ``"GBPS"``), e.g. ``"1,0.5"``."""
        parts = [p.strip() for p in text.split(",")]
        check(len(parts) in (1, 2), "LinkSpec", "network", f"want GBPS,LATENCY_MS, got {text!r}")
        try:
            numbers = [float(p) for p in parts]
        except ValueError as exc:
            raise ConfigError("LinkSpec", "network", f"not numbers: {text!r}") from exc
        return cls(gbps=numbers[0], latency_ms=numbers[1] if len(numbers) == 2 else 0.0)

    def bandwidth_delay_s(self, bucket_bytes: int, workers: int) -> float:
        """The bandwidth part: ring all-reduce bytes through one link over its bandwidth."""
        ring_bytes = 2.0 * (workers - 1) / workers * bucket_bytes
        return ring_bytes * 8.0 / (self.gbps * 1e9)

    def delay_s(self, bucket_bytes: int, workers: int) -> float:
        """Latency plus the bandwidth part, for one bucket."""
        return self.latency_ms / 1e3 + self.bandwidth_delay_s(bucket_bytes, workers)


@dataclass(kw_only=True)
class HookState:
    """Mutable state of :func:`timed_allreduce_hook`: the link (``None``: none emulated), an
    injected extra delay per bucket, and the (start, end) times of this iteration's buckets
    (recorded only while ``record_spans``: off in the overhead runs without timers)."""

    workers: int
    link: LinkSpec | None = None
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
        link_delay = state.link.delay_s(tensor.numel() * tensor.element_size(), state.workers)
    delay = state.extra_delay_s + link_delay
    future = dist.all_reduce(tensor, async_op=True).get_future()

    def finish(fut: Any) -> Any:
        if delay > 0:
            time.sleep(max(0.0, state.occupy_link(delay, link_delay) - time.perf_counter()))
        if state.record_spans:
            state.spans.append((started, time.perf_counter()))
        return fut.value()[0].div_(state.workers)

    return future.then(finish)
