"""Max-min fair sharing of link capacities among flows (progressive filling, exact).

A flow crosses a set of links, each with a weight: the flow puts ``weight x rate`` bytes/s on the
link. A ring all-reduce job is one flow whose rate is its per-hop rate; its weight on a link is
how many of its hops cross that link (several intra-node hops share a node's GPU links, one hop
crosses each NIC). Every flow's rate rises at the same pace until a link saturates or the flow
reaches its own cap; the flows on a saturated link freeze and the others go on rising. The result
is the unique max-min fair allocation: no link carries more than its capacity, and every flow is
either at its cap or crosses a saturated link on which no other flow has a higher rate.

Background congestion takes a fraction (0..1) of a link's capacity away before sharing.

Pure functions of plain mappings: the reference. The simulator's network state
(``unstall.sim.network``) solves the same problem on its own link ids, one connected component
at a time, and its tests check it against this one.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable, Iterable, Mapping
from typing import Generic, TypeVar

from unstall.errors import ConfigError

L = TypeVar("L", bound=Hashable)
F = TypeVar("F", bound=Hashable)


def _weights(links: Mapping[L, float] | Iterable[L]) -> dict[L, float]:
    if isinstance(links, Mapping):
        return {link: float(w) for link, w in links.items()}
    return dict.fromkeys(links, 1.0)


def _check_inputs(
    capacities: Mapping[L, float],
    flow_links: Mapping[F, dict[L, float]],
    caps: Mapping[F, float],
    background: Mapping[L, float],
) -> None:
    for link, cap in capacities.items():
        if not cap >= 0:
            raise ConfigError("max_min_fair", "capacities", f"{link!r}: must be >= 0, got {cap!r}")
    for link, frac in background.items():
        if not 0.0 <= frac <= 1.0:
            raise ConfigError(
                "max_min_fair", "background", f"{link!r}: must be in [0, 1], got {frac!r}"
            )
    for flow, links in flow_links.items():
        for link, weight in links.items():
            if link not in capacities:
                raise ConfigError(
                    "max_min_fair", "flows", f"{flow!r} crosses unknown link {link!r}"
                )
            if not weight > 0:
                raise ConfigError(
                    "max_min_fair", "flows", f"{flow!r}: weight on {link!r} must be > 0"
                )
    for flow, cap in caps.items():
        if not cap >= 0:
            raise ConfigError("max_min_fair", "caps", f"{flow!r}: must be >= 0, got {cap!r}")


class _Filling(Generic[L, F]):
    """The links' side of progressive filling.

    A link with unfrozen flows saturates when the common rate of those flows reaches
    ``(usable - load of its frozen flows) / weight of its unfrozen flows``; that level changes only
    when one of its flows freezes, so the next saturation comes off a heap (stale entries are
    skipped by version).
    """

    def __init__(
        self,
        capacities: Mapping[L, float],
        background: Mapping[L, float],
        flow_links: Mapping[F, dict[L, float]],
    ) -> None:
        self.flow_links = flow_links
        self.links: list[L] = list(dict.fromkeys(link for ls in flow_links.values() for link in ls))
        self.index = {link: i for i, link in enumerate(self.links)}
        self.usable = {
            link: capacities[link] * (1.0 - background.get(link, 0.0)) for link in self.links
        }
        self.frozen_load = dict.fromkeys(self.links, 0.0)
        self.weight = dict.fromkeys(self.links, 0.0)
        self.unfrozen = dict.fromkeys(self.links, 0)
        self.on_link: dict[L, list[F]] = {link: [] for link in self.links}
        self.version = dict.fromkeys(self.links, 0)
        self.heap: list[tuple[float, int, int]] = []
        for flow, links in flow_links.items():
            for link, w in links.items():
                self.weight[link] += w
                self.unfrozen[link] += 1
                self.on_link[link].append(flow)
        for link in self.links:
            self._push(link)

    def _push(self, link: L) -> None:
        self.version[link] += 1
        if self.unfrozen[link] > 0:
            spare = max(self.usable[link] - self.frozen_load[link], 0.0)
            entry = (spare / self.weight[link], self.version[link], self.index[link])
            heapq.heappush(self.heap, entry)

    def next_saturation(self) -> tuple[L | None, float]:
        """The link that saturates next and the level at which it does (``inf`` if none)."""
        while self.heap:
            level, version, i = self.heap[0]
            link = self.links[i]
            if version == self.version[link]:
                return link, level
            heapq.heappop(self.heap)
        return None, math.inf

    def freeze(self, frozen: Mapping[F, float]) -> None:
        """Freeze flows at their rates; each link they cross is re-levelled once."""
        touched: dict[L, None] = {}
        for flow, rate in frozen.items():
            for link, w in self.flow_links[flow].items():
                self.frozen_load[link] += w * rate
                self.unfrozen[link] -= 1
                # Recount at zero, so that no rounding residue keeps a link "in use".
                self.weight[link] = 0.0 if self.unfrozen[link] == 0 else self.weight[link] - w
                touched[link] = None
        for link in touched:
            self._push(link)


def max_min_fair(
    capacities: Mapping[L, float],
    flows: Mapping[F, Mapping[L, float] | Iterable[L]],
    *,
    caps: Mapping[F, float] | None = None,
    background: Mapping[L, float] | None = None,
) -> dict[F, float]:
    """The max-min fair rate of every flow.

    ``capacities``: bytes/s of each link. ``flows``: for each flow, the links it crosses, either
    ``{link: weight}`` or an iterable of links (weight 1). ``caps``: optional per-flow maximum
    rate. ``background``: optional fraction of each link's capacity taken by traffic outside the
    model. A flow that crosses no link and has no cap gets ``math.inf``.

    Every unfrozen flow has the same rate, the water level; events (a link saturates, a flow
    reaches its cap) freeze flows at the level where they happen, in order.
    """
    caps = caps or {}
    background = background or {}
    flow_links = {flow: _weights(links) for flow, links in flows.items()}
    _check_inputs(capacities, flow_links, caps, background)
    links_side: _Filling[L, F] = _Filling(capacities, background, flow_links)
    order = list(flow_links)
    rates = {f: math.inf for f in order if not flow_links[f] and f not in caps}
    active = {f for f in order if f not in rates}
    cap_heap = [(float(caps[f]), i) for i, f in enumerate(order) if f in caps]
    heapq.heapify(cap_heap)
    level = 0.0
    while active:
        while cap_heap and order[cap_heap[0][1]] not in active:
            heapq.heappop(cap_heap)
        next_cap = cap_heap[0][0] if cap_heap else math.inf
        link, next_link = links_side.next_saturation()
        if next_cap <= next_link:  # flows reach their caps (all those with this cap at once)
            level = max(level, next_cap)
            frozen: dict[F, float] = {}
            while cap_heap and cap_heap[0][0] <= next_cap:
                flow = order[heapq.heappop(cap_heap)[1]]
                if flow in active:
                    frozen[flow] = float(caps[flow])
        elif link is not None:  # a link saturates: its unfrozen flows stop at this level
            level = max(level, next_link)
            frozen = {f: level for f in links_side.on_link[link] if f in active}
        else:  # unreachable: every active flow crosses a link or has a cap
            break
        rates.update(frozen)
        active.difference_update(frozen)
        links_side.freeze(frozen)
    return rates


def link_usage(
    rates: Mapping[F, float], flows: Mapping[F, Mapping[L, float] | Iterable[L]]
) -> dict[L, float]:
    """Bytes/s each link carries under ``rates``: the sum of ``weight x rate`` of its flows."""
    used: dict[L, float] = {}
    for flow, links in flows.items():
        for link, weight in _weights(links).items():
            used[link] = used.get(link, 0.0) + weight * rates[flow]
    return used
