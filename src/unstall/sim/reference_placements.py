"""Where a job's speed is measured: its best placement on a cluster, and typical spread ones.

A trace's duration is the job's run time at its best placement on the cluster it runs on (its
work is ``duration / t_iter(best)``), and its network sensitivity is its slowdown on a typical
spread placement against that best one. The speed model
(:class:`~unstall.sim.perf_speed.PerfSpeedModel`) times the candidates given here and keeps the
fastest.

On a regular cluster every rack is alike, and the consolidated placement (full nodes first, one
rack first) is the best; the model uses it as it is. On node groups racks differ: a derived
uplink grows with its rack's NICs, so a rack of one node has half the uplink of a rack of two,
and which racks a job spans decides its speed. The candidates there are the fewest nodes
anywhere (the consolidated placement; first, so that it wins ties), the fewest nodes within each
rack that holds the job, and the fewest nodes over the racks with the widest uplinks first (the
set of racks whose narrowest uplink is the widest possible). A ring all-reduce is limited by the
slowest link it crosses, so for it the fastest of these is the fastest placement there is
(``tests/sim/test_reference_placements.py`` checks it against every placement of small files).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

from unstall.net.topology import TopologyConfig, uplink_link
from unstall.sched.base import Placement


def largest_first(topology: TopologyConfig, nodes: Iterable[int]) -> list[int]:
    """``nodes`` with the most GPUs first, the lowest index among equals."""
    gpus = topology.node_gpus
    return sorted(nodes, key=lambda n: (-gpus[n], n))


def fewest_nodes(topology: TopologyConfig, ordered: Sequence[int], num_gpus: int) -> Placement:
    """The first nodes of ``ordered`` (largest first) that hold ``num_gpus``, each full but the
    last; the caller makes sure they hold enough."""
    gpus = topology.node_gpus
    taken: list[tuple[int, int]] = []
    need = num_gpus
    for node in ordered:
        take = min(need, gpus[node])
        taken.append((node, take))
        need -= take
        if need == 0:
            break
    return tuple(sorted(taken))


def rack_nodes(topology: TopologyConfig) -> tuple[list[int], ...]:
    """Each rack's nodes, largest first."""
    found: list[list[int]] = [[] for _ in range(topology.n_racks)]
    for node, rack in enumerate(topology.node_rack):
        found[rack].append(node)
    return tuple(largest_first(topology, nodes) for nodes in found)


def best_candidates(
    topology: TopologyConfig, num_gpus: int, racks: Sequence[list[int]]
) -> list[Placement]:
    """The placements of ``num_gpus`` a best one is chosen from on node groups (module
    docstring), without repeats; ``racks`` is :func:`rack_nodes` of ``topology``, or of the
    nodes the job is to be measured on (they must hold it)."""
    found = [fewest_nodes(topology, largest_first(topology, itertools.chain(*racks)), num_gpus)]
    gpus = topology.node_gpus
    rack_gpus = [sum(gpus[n] for n in nodes) for nodes in racks]
    # Racks alike in the nodes a job would take run it alike: one candidate per kind of rack.
    seen: set[tuple[tuple[int, object], ...]] = set()
    for rack, nodes in enumerate(racks):
        if rack_gpus[rack] < num_gpus:
            continue
        placement = fewest_nodes(topology, nodes, num_gpus)
        kind = tuple((k, topology.intra_spec_of(n)) for n, k in placement)
        if kind not in seen:
            seen.add(kind)
            found.append(placement)
    if len(racks) > 1:
        width = [topology.spec_of(uplink_link(r)).bytes_per_s for r in range(len(racks))]
        order = sorted(range(len(racks)), key=lambda r: (-width[r], -rack_gpus[r], r))
        chosen: list[int] = []
        held = 0
        for rack in order:
            chosen += racks[rack]
            held += rack_gpus[rack]
            if held >= num_gpus:
                break
        found.append(fewest_nodes(topology, largest_first(topology, chosen), num_gpus))
    return list(dict.fromkeys(found))


def spread_on_groups(
    topology: TopologyConfig,
    num_gpus: int,
    best: Placement,
    racks: Sequence[list[int]],
    *,
    across_racks: bool,
) -> Placement:
    """A typical spread placement on node groups, as the regular one: twice the best
    placement's nodes (at least two, at most what there is), GPUs dealt round-robin. Within one
    rack (the best placement's when it holds the job on two nodes or more, else the first that
    does), or over the racks in turn from the best placement's first; over the cluster's nodes
    in index order when no rack can hold it spread."""
    gpus = topology.node_gpus
    want = max(2, 2 * len(best))
    if across_racks and len(racks) > 1:
        first = topology.node_rack[best[0][0]]
        lists = [racks[(first + i) % len(racks)] for i in range(len(racks))]
        order = [nodes[i] for i in range(max(map(len, lists))) for nodes in lists if i < len(nodes)]
    else:
        order = _one_rack(topology, num_gpus, best, racks) or list(range(topology.n_nodes))
    chosen: list[int] = []
    held = 0
    for node in order:
        if len(chosen) >= want and held >= num_gpus:
            break
        chosen.append(node)
        held += gpus[node]
    counts = dict.fromkeys(chosen, 0)
    need = num_gpus
    while need > 0:
        for node in chosen:
            if need > 0 and counts[node] < gpus[node]:
                counts[node] += 1
                need -= 1
    return tuple(sorted((node, k) for node, k in counts.items() if k > 0))


def _one_rack(
    topology: TopologyConfig, num_gpus: int, best: Placement, racks: Sequence[list[int]]
) -> list[int] | None:
    """The nodes (largest first) of the rack a job is spread within: the best placement's rack
    when it holds the job on two nodes or more, else the first such rack; None when none does."""
    gpus = topology.node_gpus

    def fits(rack: int) -> bool:
        return len(racks[rack]) >= 2 and sum(gpus[n] for n in racks[rack]) >= num_gpus

    home = {topology.node_rack[node] for node, _ in best}
    if len(home) == 1 and fits(next(iter(home))):
        return racks[next(iter(home))]
    return next((racks[r] for r in range(len(racks)) if fits(r)), None)
