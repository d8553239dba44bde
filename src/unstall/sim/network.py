"""Network contention: which running jobs cross which shared links, and their fair shares.

Each running job that spans nodes is a flow over the NICs of its nodes (and the uplinks of its
racks when it spans racks). A link's capacity, less what background congestion takes, is shared
max-min fair among the flows crossing it. When flows come or go only the connected component of
links they touch is recomputed, so a change on one rack does not re-plan every job in the cluster.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from unstall.net.sharing import max_min_fair
from unstall.sim.speed import Flow, LinkId


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
        """Re-share the links touched since the last call; returns the flows whose rate changed."""
        if not self.dirty:
            return {}
        component_links, component_flows = self._component(self.dirty)
        self.dirty = set()
        if not component_flows:
            return {}
        keep = 1.0 - self.congestion
        capacity = {link: self._capacity(link) * keep for link in component_links}
        flows = {job: self._flow[job].weights for job in component_flows}
        caps = {job: self._flow[job].cap for job in component_flows}
        new_rates = max_min_fair(capacity, flows, caps=caps)
        changed: dict[int, float] = {}
        for job, rate in new_rates.items():
            if self._rates.get(job) != rate:
                changed[job] = rate
                self._rates[job] = rate
        return changed

    def _component(self, start: set[LinkId]) -> tuple[set[LinkId], set[int]]:
        """All links and flows connected to ``start`` through shared flows."""
        links: set[LinkId] = set()
        flows: set[int] = set()
        todo = deque(link for link in start if link in self._flows_on)
        links.update(todo)
        while todo:
            link = todo.popleft()
            for job in self._flows_on[link]:
                if job in flows:
                    continue
                flows.add(job)
                for other in self._links_of[job]:
                    if other not in links:
                        links.add(other)
                        todo.append(other)
        return links, flows
