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

from collections import deque
from collections.abc import Callable, Iterable

from unstall.net.sharing import max_min_fair_dense
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
        "_demand",
        "_flow_cap",
        "_flows_on",
        "_ids",
        "_irregular",
        "_link_capacity",
        "_pairs",
        "_rates",
        "_rescale",
        "_scaling",
        "congestion",
        "dirty",
    )

    def __init__(self, capacity: Callable[[LinkId], float]) -> None:
        self._capacity = capacity
        self._ids: dict[LinkId, int] = {}
        self._link_capacity: list[float] = []  # by link id
        self._flows_on: list[set[int]] = []  # by link id: the jobs crossing it
        # Per link: what its flows ask at their caps; None once the link's flow set changes.
        self._demand: list[float | None] = []
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
            self._flows_on.append(set())
            self._demand.append(None)
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
        for link, _ in pairs:
            self._flows_on[link].add(job)
            self._demand[link] = None
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
        for link, _ in self._pairs.pop(job, ()):
            self._flows_on[link].discard(job)
            self._demand[link] = None
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
        coupling = _Coupling(self, keep)
        component_links, component_flows = self._component(sorted(self.dirty), coupling)
        self.dirty = set()
        if not component_flows:
            return {}
        # Dense link indices in order of first use, as max_min_fair numbers them.
        index: dict[int, int] = {}
        capacity: list[float] = []
        flows: list[list[tuple[int, float]]] = []
        caps: list[float] = []
        link_capacity, all_pairs, flow_cap = self._link_capacity, self._pairs, self._flow_cap
        jobs = list(component_flows)
        for job in jobs:
            cap = flow_cap[job]
            pairs: list[tuple[int, float]] = []
            for link, weight in all_pairs[job]:
                if link in component_links:
                    i = index.get(link)
                    if i is None:
                        i = index[link] = len(capacity)
                        capacity.append(link_capacity[link] * keep)
                    pairs.append((i, weight))
                else:
                    alone = link_capacity[link] * keep / weight
                    if alone < cap:
                        cap = alone
            flows.append(pairs)
            caps.append(cap)
        return dict(zip(jobs, max_min_fair_dense(capacity, flows, caps), strict=True))

    def _is_coupling(self, link: int, keep: float) -> bool:
        flows = self._flows_on[link]
        if len(flows) < 2:
            return False
        demand = self._demand[link]
        if demand is None:
            demand = 0.0
            for job in flows:
                for own, w in self._pairs[job]:
                    if own == link:
                        demand += w * self._flow_cap[job]
                        break
            self._demand[link] = demand
        return demand > self._link_capacity[link] * keep

    def _component(self, start: Iterable[int], coupling: _Coupling) -> tuple[set[int], set[int]]:
        """Every flow on a ``start`` link, and everything connected to those flows through
        coupling links (the only links through which one flow's rate can move another's)."""
        links: set[int] = set()
        flows: set[int] = set()
        todo: deque[int] = deque()
        flows_on = self._flows_on
        for link in start:
            if not flows_on[link]:
                continue
            if coupling(link):
                links.add(link)
                todo.append(link)
            else:  # a non-coupling link still re-plans its own flows (their caps may change)
                for job in flows_on[link]:
                    if job not in flows:
                        flows.add(job)
                        todo.extend(self._new_coupling(job, links, coupling))
        while todo:
            link = todo.popleft()
            for job in flows_on[link]:
                if job not in flows:
                    flows.add(job)
                    todo.extend(self._new_coupling(job, links, coupling))
        return links, flows

    def _new_coupling(self, job: int, links: set[int], coupling: _Coupling) -> list[int]:
        """The job's coupling links not seen yet (added to ``links``)."""
        found = []
        for link, _ in self._pairs[job]:
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
        self._memo: dict[int, bool] = {}

    def __call__(self, link: int) -> bool:
        found = self._memo.get(link)
        if found is None:
            found = self._net._is_coupling(link, self._keep)
            self._memo[link] = found
        return found
