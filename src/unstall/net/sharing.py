"""Max-min fair sharing of link capacities among flows (progressive filling, exact).

A flow crosses a set of links, each with a weight: the flow puts ``weight x rate`` bytes/s on the
link. A ring all-reduce job is one flow whose rate is its per-hop rate; its weight on a link is
how many of its hops cross that link (several intra-node hops share a node's GPU links, one hop
crosses each NIC). Every flow's rate rises at the same pace until a link saturates or the flow
reaches its own cap; the flows on a saturated link freeze and the others go on rising. The result
is the unique max-min fair allocation: no link carries more than its capacity, and every flow is
either at its cap or crosses a saturated link on which no other flow has a higher rate.

Background congestion takes a fraction (0..1) of a link's capacity away before sharing.

Pure functions of plain mappings; the simulator calls them once per change of the set of
running jobs, not per iteration.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping
from typing import TypeVar

from unstall.errors import ConfigError

L = TypeVar("L", bound=Hashable)
F = TypeVar("F", bound=Hashable)

# Relative tolerance under which a link counts as saturated or a flow as at its cap: the
# remaining capacity is a difference of sums of floats, exact only up to rounding.
_REL_TOL = 1e-9


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
                "max_min_rates", "background", f"{link!r}: must be in [0, 1], got {frac!r}"
            )
    for flow, links in flow_links.items():
        for link, weight in links.items():
            if link not in capacities:
                raise ConfigError(
                    "max_min_rates", "flows", f"{flow!r} crosses unknown link {link!r}"
                )
            if not weight > 0:
                raise ConfigError(
                    "max_min_rates", "flows", f"{flow!r}: weight on {link!r} must be > 0"
                )
    for flow, cap in caps.items():
        if not cap >= 0:
            raise ConfigError("max_min_fair", "caps", f"{flow!r}: must be >= 0, got {cap!r}")


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
    """
    caps = caps or {}
    background = background or {}
    flow_links = {flow: _weights(links) for flow, links in flows.items()}
    _check_inputs(capacities, flow_links, caps, background)

    remaining = {
        link: capacities[link] * (1.0 - background.get(link, 0.0))
        for links in flow_links.values()
        for link in links
    }
    scale = {link: max(capacities[link], 1e-300) for link in remaining}
    usage = dict.fromkeys(remaining, 0.0)
    n_active = dict.fromkeys(remaining, 0)
    on_link: dict[L, list[F]] = {link: [] for link in remaining}
    rates: dict[F, float] = {}
    active: set[F] = set()
    for flow, links in flow_links.items():
        if not links and flow not in caps:
            rates[flow] = math.inf
            continue
        rates[flow] = 0.0
        active.add(flow)
        for link, weight in links.items():
            usage[link] += weight
            n_active[link] += 1
            on_link[link].append(flow)

    while active:
        delta = math.inf
        for link, use in usage.items():
            if use > 0.0:
                delta = min(delta, max(remaining[link], 0.0) / use)
        for flow in active:
            if flow in caps:
                delta = min(delta, caps[flow] - rates[flow])
        delta = max(delta, 0.0)
        for flow in active:
            rates[flow] += delta
        frozen: set[F] = set()
        for link, use in usage.items():
            if use > 0.0:
                remaining[link] -= delta * use
                if remaining[link] <= _REL_TOL * scale[link]:
                    remaining[link] = 0.0
                    frozen.update(f for f in on_link[link] if f in active)
        for flow in active:
            cap = caps.get(flow)
            if cap is not None and cap - rates[flow] <= _REL_TOL * max(cap, 1e-300):
                rates[flow] = float(cap)
                frozen.add(flow)
        for flow in frozen:
            active.discard(flow)
            for link, weight in flow_links[flow].items():
                n_active[link] -= 1
                # Recount rather than subtract, so that no rounding residue keeps a link "in use".
                usage[link] = 0.0 if n_active[link] == 0 else usage[link] - weight
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


# The name the perf model's docs use for the same function.
max_min_rates = max_min_fair
