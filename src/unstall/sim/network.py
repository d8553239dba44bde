"""Network contention: which running jobs cross which shared links, and their fair shares.

Each running job that spans nodes is a flow over the NICs of its nodes (and the uplinks of its
racks when it spans racks). A link's capacity, less what background congestion takes, is shared
max-min fair among the flows crossing it. When flows come or go only the connected component of
links they touch is recomputed, so a change on one rack does not re-plan every job in the cluster.

Background congestion scales every shared link's capacity by the same factor ``keep``. While no
flow's own cap can bind below what its links allow it alone (*regular* flows: true of every flow
the perf model makes, whose cap is its slowest link), the max-min fair allocation is homogeneous
in the capacities: the rates at ``keep`` are ``keep`` times the rates on idle links. The state
then keeps those idle-link *base* rates and a congestion change re-scales them without a sharing
step. With an irregular flow present it re-shares the touched components at the current ``keep``.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

from unstall.sim.speed import Flow, LinkId

# Re-scale the idle-link rates at a congestion change while every flow is regular (module
# docstring); off, every change re-shares at the new level (tests compare the two).
SCALE_WITH_CONGESTION = True


class NetworkState:
    """Flows on shared links and their max-min fair rates, re-shared only where links changed.

    Links get dense integer ids in order of first use (``_ids``): the hot loops then index lists
    instead of hashing link tuples, and every set of links iterates in an order that does not
    depend on string hashing (which changes from process to process and would change the order
    of the sharing step's float sums).
    """

    __slots__ = (
        "_base",
        "_capacity",
        "_coupled",
        "_demand",
        "_flow_cap",
        "_flows_on",
        "_ids",
        "_irregular",
        "_link_capacity",
        "_link_weight",
        "_pairs",
        "_rates",
        "_rescale",
        "_scaling",
        "_split",
        "_stale",
        "congestion",
        "dirty",
    )

    def __init__(self, capacity: Callable[[LinkId], float]) -> None:
        self._capacity = capacity
        self._ids: dict[LinkId, int] = {}
        self._link_capacity: list[float] = []  # by link id
        self._flows_on: list[dict[int, float]] = []  # by link id: job -> its weight there
        # Per link, refreshed when its flows change (``_stale`` until then): the sum of its
        # flows' weights, what they ask at their caps, and whether that is more than the link
        # has at ``keep`` = 1 (it then *couples* its flows: see ``_share_dirty``).
        self._link_weight: list[float] = []
        self._demand: list[float] = []
        self._coupled: list[bool] = []
        self._stale: set[int] = set()
        # Per job, while its links' coupling at ``keep`` = 1 is unchanged: its coupling
        # (link, weight) pairs and its cap with the other links folded in.
        self._split: dict[int, tuple[tuple[tuple[int, float], ...], float]] = {}
        self._flow_cap: dict[int, float] = {}
        self._pairs: dict[int, tuple[tuple[int, float], ...]] = {}  # job -> (link id, weight)
        self._rates: dict[int, float] = {}
        # Rates on idle links (``keep`` = 1), kept while every flow is regular.
        self._base: dict[int, float] = {}
        self._irregular: set[int] = set()
        self._rescale = False  # congestion changed since the last recompute (regular mode)
        self._scaling = SCALE_WITH_CONGESTION
        self.congestion = 0.0
        self.dirty: set[int] = set()  # link ids

    def _link_id(self, link: LinkId) -> int:
        found = self._ids.get(link)
        if found is None:
            found = self._ids[link] = len(self._link_capacity)
            self._link_capacity.append(self._capacity(link))
            self._flows_on.append({})
            self._link_weight.append(0.0)
            self._demand.append(0.0)
            self._coupled.append(False)
        return found

    def _regular(self, pairs: tuple[tuple[int, float], ...], cap: float) -> bool:
        """The flow's cap never binds: its links alone hold it at or below the cap."""
        capacity = self._link_capacity
        alone = min((capacity[link] / w for link, w in pairs), default=None)
        return alone is not None and cap >= alone

    def add(self, job: int, flow: Flow) -> None:
        pairs = tuple((self._link_id(link), w) for link, w in flow.weights.items())
        self._pairs[job] = pairs
        self._flow_cap[job] = flow.cap
        for link, w in pairs:
            self._flows_on[link][job] = w
            self._stale.add(link)
            self.dirty.add(link)
        if not (self._scaling and self._regular(pairs, flow.cap)):
            if not self._irregular:  # leaving regular mode: base rates no longer apply
                self._base.clear()
                if self._rescale:
                    self._rescale = False
                    self.dirty.update(self._used_links())
            self._irregular.add(job)

    def remove(self, job: int) -> None:
        self._flow_cap.pop(job, None)
        self._split.pop(job, None)
        for link, _ in self._pairs.pop(job, ()):
            del self._flows_on[link][job]
            self._stale.add(link)
            self.dirty.add(link)
        self._rates.pop(job, None)
        self._base.pop(job, None)
        if job in self._irregular:
            self._irregular.discard(job)
            if not self._irregular:  # back to regular mode: every flow needs its base rate
                self.dirty.update(self._used_links())

    def _used_links(self) -> list[int]:
        return [link for link, flows in enumerate(self._flows_on) if flows]

    def set_congestion(self, fraction: float) -> None:
        self.congestion = fraction
        if self._irregular:
            self.dirty.update(self._used_links())
        else:
            self._rescale = True

    def rate(self, job: int) -> float | None:
        """The job's rate from the last sharing step; None if it crosses no shared link."""
        return self._rates.get(job)

    def recompute(self) -> dict[int, float]:
        """Re-share the links touched since the last call; returns the flows whose rate changed."""
        keep = 1.0 - self.congestion
        changed: dict[int, float] = {}
        if self._irregular:
            if self.dirty:
                self._update(self._share_dirty(keep), 1.0, changed)
            return changed
        if self.dirty:
            base = self._share_dirty(1.0)
            self._base.update(base)
            if not self._rescale:
                self._update(base, keep, changed)
        if self._rescale:
            self._rescale = False
            self._update(self._base, keep, changed)
        return changed

    def _update(self, rates: dict[int, float], scale: float, changed: dict[int, float]) -> None:
        old = self._rates
        for job, rate in rates.items():
            rate *= scale
            if old.get(job) != rate:
                changed[job] = rate
                old[job] = rate

    def _share_dirty(self, keep: float) -> dict[int, float]:
        """Max-min fair rates at ``keep`` of every flow whose rate the dirty links can move.

        Only *coupling* links enter the sharing step: links whose flows, each at its cap, would
        ask for more than the link has. Any other link can never bind more than the flow's own
        cap does, so it is folded into the caps (``rate <= usable / weight``); this is exact and
        keeps components small, because most NICs carry a single spread job.
        """
        for link in sorted(self._stale):
            self._refresh(link)
        self._stale = set()
        start = sorted(self.dirty)
        self.dirty = set()
        component = _Component(self, keep)
        component.grow(start)
        if not component.jobs:
            return {}
        return dict(zip(component.jobs, component.fill(), strict=True))

    def _refresh(self, link: int) -> None:
        """Re-derive a link's sums after its flows changed; a link that starts or stops
        coupling at ``keep`` = 1 drops its flows' cached splits."""
        flows, flow_cap = self._flows_on[link], self._flow_cap
        weight = demand = 0.0
        for job, w in flows.items():
            weight += w
            demand += w * flow_cap[job]
        self._link_weight[link] = weight
        self._demand[link] = demand
        couples = self._couples_at(link, 1.0)
        if couples != self._coupled[link]:
            self._coupled[link] = couples
            for job in flows:
                self._split.pop(job, None)

    def _couples_at(self, link: int, keep: float) -> bool:
        """Whether the link's flows, each at its cap, ask for more than it has at ``keep``
        (from its refreshed demand)."""
        return len(self._flows_on[link]) >= 2 and self._demand[link] > (
            self._link_capacity[link] * keep
        )

    def _split_of(self, job: int, keep: float) -> tuple[tuple[tuple[int, float], ...], float]:
        """The job's coupling (link, weight) pairs at ``keep``, and its cap with its other links
        folded in (cached at ``keep`` = 1, the only level regular mode shares at)."""
        if keep == 1.0:
            found = self._split.get(job)
            if found is not None:
                return found
        link_capacity = self._link_capacity
        cap = self._flow_cap[job]
        mine: list[tuple[int, float]] = []
        for pair in self._pairs[job]:
            link, w = pair
            if self._couples_at(link, keep):
                mine.append(pair)
            else:
                alone = link_capacity[link] * keep / w
                if alone < cap:
                    cap = alone
        found = (tuple(mine), cap)
        if keep == 1.0:
            self._split[job] = found
        return found


class _Component:
    """One sharing step: the flows the dirty links can move, and their max-min fair rates.

    The component is every flow on a dirty link and everything connected to those flows through
    coupling links (the only links through which one flow's rate can move another's). It is
    gathered and solved on the network's own link ids, so nothing is re-indexed per step, and
    since a coupling link brings all its flows in, its weight is the network's own sum.
    """

    __slots__ = ("caps", "jobs", "keep", "links", "net", "pairs", "position")

    def __init__(self, net: NetworkState, keep: float) -> None:
        self.net = net
        self.keep = keep
        self.links: list[int] = []  # the component's coupling links, in order of discovery
        self.jobs: list[int] = []  # its flows, in order of discovery
        self.position: dict[int, int] = {}  # job -> index in ``jobs``
        self.caps: list[float] = []  # own cap, with the non-coupling links folded in
        self.pairs: list[tuple[tuple[int, float], ...]] = []  # coupling (link, weight) pairs

    def grow(self, start: list[int]) -> None:
        net, keep = self.net, self.keep
        flows_on, position = net._flows_on, self.position
        seen = bytearray(len(flows_on))
        todo: list[int] = []
        for link in start:
            if not flows_on[link]:
                continue
            if net._couples_at(link, keep):
                if not seen[link]:
                    seen[link] = 1
                    todo.append(link)
            else:  # a non-coupling link still re-plans its own flows (their caps may change)
                for job in flows_on[link]:
                    if job not in position:
                        self._visit(job, seen, todo)
        while todo:
            link = todo.pop()
            self.links.append(link)
            for job in flows_on[link]:
                if job not in position:
                    self._visit(job, seen, todo)

    def _visit(self, job: int, seen: bytearray, todo: list[int]) -> None:
        """Add the job; its coupling links not seen yet join the search."""
        mine, cap = self.net._split_of(job, self.keep)
        for link, _ in mine:
            if not seen[link]:
                seen[link] = 1
                todo.append(link)
        self.position[job] = len(self.jobs)
        self.jobs.append(job)
        self.caps.append(cap)
        self.pairs.append(mine)

    def fill(self) -> list[float]:
        """Progressive filling: every unfrozen flow's rate rises at one pace (the level); a flow
        freezes when it reaches its cap or when one of its links saturates.

        A link's saturation level, ``(usable - load of its frozen flows) / weight of its
        unfrozen flows``, never falls as flows freeze (each freezes at a rate no higher than the
        level of any of its unsaturated links). So the heap keeps possibly stale entries that
        are lower bounds, and an entry is re-computed only when it reaches the top, instead of
        being pushed again every time one of the link's flows freezes.
        """
        net, keep = self.net, self.keep
        link_capacity, flows_on = net._link_capacity, net._flows_on
        pairs, position, caps = self.pairs, self.position, self.caps
        weight = list(net._link_weight)  # of the unfrozen flows, as they freeze
        unfrozen = [0] * len(weight)
        for link in self.links:
            unfrozen[link] = len(flows_on[link])
        frozen_load = [0.0] * len(weight)
        heap = [(link_capacity[link] * keep / weight[link], link) for link in self.links]
        heapq.heapify(heap)
        capped = sorted((cap, i) for i, cap in enumerate(caps) if cap != math.inf)
        next_capped = 0
        rates = [0.0] * len(caps)
        active = [True] * len(caps)
        left = len(caps)
        for i, own in enumerate(pairs):
            if not own and caps[i] == math.inf:  # crosses nothing, capped by nothing
                rates[i] = math.inf
                active[i] = False
                left -= 1
        level = 0.0
        while left:
            while next_capped < len(capped) and not active[capped[next_capped][1]]:
                next_capped += 1
            next_cap = capped[next_capped][0] if next_capped < len(capped) else math.inf
            next_link = math.inf
            while heap:
                stored, link = heap[0]
                if not unfrozen[link]:
                    heapq.heappop(heap)
                    continue
                spare = link_capacity[link] * keep - frozen_load[link]
                current = (spare if spare > 0.0 else 0.0) / weight[link]
                if current > stored:
                    heapq.heapreplace(heap, (current, link))
                    continue
                next_link = current
                break
            frozen: list[int] = []
            if next_cap <= next_link:
                if next_cap == math.inf:
                    break  # unreachable: every active flow crosses a link or has a cap
                level = max(level, next_cap)
                while next_capped < len(capped) and capped[next_capped][0] <= next_cap:
                    cap, i = capped[next_capped]
                    next_capped += 1
                    if active[i]:
                        rates[i] = cap
                        frozen.append(i)
            else:
                level = max(level, next_link)
                for job in flows_on[heapq.heappop(heap)[1]]:
                    i = position[job]
                    if active[i]:
                        rates[i] = level
                        frozen.append(i)
            left -= len(frozen)
            for i in frozen:
                active[i] = False
                rate = rates[i]
                for link, w in pairs[i]:
                    frozen_load[link] += w * rate
                    unfrozen[link] -= 1
                    # Recount at zero, so that no rounding residue keeps a link "in use".
                    weight[link] = 0.0 if unfrozen[link] == 0 else weight[link] - w
        return rates
