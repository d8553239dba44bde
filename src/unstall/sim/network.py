"""Network contention: which running jobs cross which shared links, and their fair shares.

Each running job that spans nodes is a flow over the NICs of its nodes (and the uplinks of its
racks when it spans racks). A link's capacity, less what background congestion takes, is shared
max-min fair among the flows crossing it. When flows come or go only the connected component of
links they touch is recomputed, so a change on one rack does not re-plan every job in the cluster.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np

from unstall.net.sharing import max_min_fair, max_min_fair_arrays
from unstall.sim.speed import Flow, LinkId

# From this many flows in one component on, the numpy version of the sharing step is faster.
ARRAY_SHARING_FROM = 24


def _share_with_arrays(
    capacity: dict[LinkId, float],
    flows: dict[int, dict[LinkId, float]],
    caps: dict[int, float],
) -> dict[int, float]:
    links = list(capacity)
    index = {link: i for i, link in enumerate(links)}
    jobs = list(flows)
    pair_flow, pair_link, pair_weight = [], [], []
    for f, job in enumerate(jobs):
        for link, weight in flows[job].items():
            pair_flow.append(f)
            pair_link.append(index[link])
            pair_weight.append(weight)
    rates = max_min_fair_arrays(
        np.array([capacity[link] for link in links]),
        np.array(pair_flow, dtype=np.int64),
        np.array(pair_link, dtype=np.int64),
        np.array(pair_weight),
        np.array([caps[job] for job in jobs]),
    )
    return dict(zip(jobs, rates.tolist(), strict=True))


class NetworkState:
    __slots__ = ("_capacity", "_flow", "_flows_on", "_links_of", "_rates", "congestion", "dirty")

    def __init__(self, capacity: Callable[[LinkId], float]) -> None:
        self._capacity = capacity
        self._flow: dict[int, Flow] = {}
        self._links_of: dict[int, tuple[LinkId, ...]] = {}
        self._flows_on: dict[LinkId, set[int]] = {}
        self._rates: dict[int, float] = {}
        self.congestion = 0.0
        self.dirty: set[LinkId] = set()

    def add(self, job: int, flow: Flow) -> None:
        links = tuple(flow.weights)
        self._flow[job] = flow
        self._links_of[job] = links
        for link in links:
            self._flows_on.setdefault(link, set()).add(job)
        self.dirty.update(links)

    def remove(self, job: int) -> None:
        links = self._links_of.pop(job, ())
        self._flow.pop(job, None)
        for link in links:
            flows = self._flows_on[link]
            flows.discard(job)
            if not flows:
                del self._flows_on[link]
        self._rates.pop(job, None)
        self.dirty.update(links)

    def set_congestion(self, fraction: float) -> None:
        self.congestion = fraction
        self.dirty.update(self._flows_on)

    def rate(self, job: int) -> float | None:
        """The job's rate from the last sharing step; None if it crosses no shared link."""
        return self._rates.get(job)

    def recompute(self) -> dict[int, float]:
        """Re-share the links touched since the last call; returns the flows whose rate changed.

        Only *coupling* links enter the sharing step: links whose flows, each at its cap, would
        ask for more than the link has. Any other link can never bind more than the flow's own
        cap does, so it is folded into the caps (``rate <= usable / weight``); this is exact and
        keeps components small, because most NICs carry a single spread job.
        """
        if not self.dirty:
            return {}
        keep = 1.0 - self.congestion
        coupling = self._coupling_links(keep)
        component_links, component_flows = self._component(self.dirty, coupling)
        self.dirty = set()
        if not component_flows:
            return {}
        capacity = {link: self._capacity(link) * keep for link in component_links}
        flows: dict[int, dict[LinkId, float]] = {}
        caps: dict[int, float] = {}
        for job in component_flows:
            flow = self._flow[job]
            cap = flow.cap
            mine: dict[LinkId, float] = {}
            for link, weight in flow.weights.items():
                if link in component_links:
                    mine[link] = weight
                else:
                    cap = min(cap, self._capacity(link) * keep / weight)
            flows[job] = mine
            caps[job] = cap
        if len(flows) >= ARRAY_SHARING_FROM:
            new_rates = _share_with_arrays(capacity, flows, caps)
        else:
            new_rates = max_min_fair(capacity, flows, caps=caps)
        changed: dict[int, float] = {}
        for job, rate in new_rates.items():
            if self._rates.get(job) != rate:
                changed[job] = rate
                self._rates[job] = rate
        return changed

    def _coupling_links(self, keep: float) -> _Coupling:
        return _Coupling(self, keep)

    def _is_coupling(self, link: LinkId, keep: float) -> bool:
        flows = self._flows_on.get(link)
        if not flows or len(flows) < 2:
            return False
        demand = 0.0
        for job in flows:
            flow = self._flow[job]
            demand += flow.weights[link] * flow.cap
        return demand > self._capacity(link) * keep

    def _component(self, start: set[LinkId], coupling: _Coupling) -> tuple[set[LinkId], set[int]]:
        """Every flow on a ``start`` link, and everything connected to those flows through
        coupling links (the only links through which one flow's rate can move another's)."""
        links: set[LinkId] = set()
        flows: set[int] = set()
        todo: deque[LinkId] = deque()
        for link in start:
            if link not in self._flows_on:
                continue
            if coupling(link):
                links.add(link)
                todo.append(link)
            else:  # a non-coupling link still re-plans its own flows (their caps may change)
                for job in self._flows_on[link]:
                    if job not in flows:
                        flows.add(job)
                        todo.extend(self._new_coupling(job, links, coupling))
        while todo:
            link = todo.popleft()
            for job in self._flows_on[link]:
                if job not in flows:
                    flows.add(job)
                    todo.extend(self._new_coupling(job, links, coupling))
        return links, flows

    def _new_coupling(self, job: int, links: set[LinkId], coupling: _Coupling) -> list[LinkId]:
        """The job's coupling links not seen yet (added to ``links``)."""
        found = []
        for link in self._links_of[job]:
            if link not in links and coupling(link):
                links.add(link)
                found.append(link)
        return found


class _Coupling:
    """Memoised 'is this link coupling?' for one recompute."""

    __slots__ = ("_keep", "_memo", "_net")

    def __init__(self, net: NetworkState, keep: float) -> None:
        self._net = net
        self._keep = keep
        self._memo: dict[LinkId, bool] = {}

    def __call__(self, link: LinkId) -> bool:
        found = self._memo.get(link)
        if found is None:
            found = self._net._is_coupling(link, self._keep)
            self._memo[link] = found
        return found
