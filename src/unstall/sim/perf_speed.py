"""The simulator's speed model backed by ``workload.perf`` over a ``net.topology``.

Each trace model name resolves to a :class:`JobPerfSpec` (zoo facts, or a measured JobProfile);
communication plans are cached per (model, placement shape) so that the engine's hot path is a
dictionary lookup and a few float operations.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping

from unstall.net.topology import INTRA, TopologyConfig
from unstall.sched.base import CONGESTION_GRID, Placement, Sensitivity
from unstall.sim.duration_gpu import DEFAULT_DURATION_GPU
from unstall.sim.reference_placements import best_candidates, rack_nodes, spread_on_groups
from unstall.sim.speed import Flow, LinkId, RateTiming
from unstall.workload.job_specs import JobPerfSpec, spec_for
from unstall.workload.perf import plan_time
from unstall.workload.placement import Placement as Shape
from unstall.workload.placement import consolidated_placement
from unstall.workload.traffic import CommPlan, comm_plan


def _shape(placement: Placement, topology: TopologyConfig) -> Shape:
    nodes = tuple(node for node, _ in placement)
    return Shape(
        tuple(k for _, k in placement),
        nodes=nodes,
        racks=tuple(topology.rack_of(n) for n in nodes),
    )


def reference_topology(topology: TopologyConfig, device: str) -> TopologyConfig:
    """``topology`` with every GPU of type ``device``: the same nodes, racks, NICs and uplinks
    (the network of the real cluster), each node's GPU links those its file names, else
    ``device``'s own. Where a job's work and network sensitivity are measured when the cluster's
    GPUs are not all of the duration GPU's type."""
    name = f"{topology.name}-as-{device}"
    if topology.regular:
        return dataclasses.replace(topology, name=name, device=device)
    groups = tuple(dataclasses.replace(group, device="") for group in topology.nodes)
    return dataclasses.replace(topology, name=name, device=device, nodes=groups)


class PerfSpeedModel:
    """Iteration times from the perf model; shared links are NICs and rack uplinks.

    ``duration_gpu`` is the GPU type on which a trace's durations are run times (default:
    :data:`~unstall.sim.duration_gpu.DEFAULT_DURATION_GPU`, ``v100``, whatever the cluster
    has, so that a slower cluster makes the same work slower). A job's work and its network
    sensitivity are measured at its best placement on the cluster it runs on
    (:meth:`best_placement`), links idle. On a cluster whose GPUs are all of that type, the
    cluster itself; on any other (several GPU types, or another type) the best placement on its
    ``duration_gpu`` nodes when they hold the job, else on the same cluster with
    ``duration_gpu`` GPUs in every node (:func:`reference_topology`: the network of the real
    cluster), and a job's speed on a placement is the perf model's with the compute time of the
    slowest GPU type there.
    """

    def __init__(
        self,
        topology: TopologyConfig,
        specs: Mapping[str, JobPerfSpec] | None = None,
        *,
        duration_gpu: str | None = None,
        spec_source: Callable[[str], JobPerfSpec] | None = None,
        home_nodes: tuple[int, ...] | None = None,
    ) -> None:
        self.topology = topology
        # A reference model's real nodes of its type: a job's best placement is sought there
        # when they hold it, on the whole relabelled cluster only when they do not.
        self._home = home_nodes
        self.duration_gpu = (duration_gpu or DEFAULT_DURATION_GPU).lower()
        self.heterogeneous = topology.devices != (self.duration_gpu,)
        self._specs: dict[str, JobPerfSpec] = dict(specs or {})
        # A reference model asks its parent, so that one job has one spec everywhere.
        self._spec_source = spec_source
        self._plans: dict[tuple[str, Placement], CommPlan] = {}
        self._flows: dict[tuple[str, Placement], Flow | None] = {}
        self._timings: dict[tuple[str, Placement], RateTiming] = {}
        self._references: dict[str, PerfSpeedModel] = {}
        self._type_nodes: dict[str, list[int]] | None = None
        self._best: dict[tuple[str, int], Placement] = {}
        self._rack_nodes: tuple[list[int], ...] | None = None

    def spec(self, model: str) -> JobPerfSpec:
        found = self._specs.get(model)
        if found is None:
            if self._spec_source is not None:
                found = self._spec_source(model)
            else:
                regular = self.topology.regular and not self.heterogeneous
                device = self.topology.device if regular else self.duration_gpu
                found = spec_for(model, device)
            self._specs[model] = found
        return found

    def reference(self, device: str) -> PerfSpeedModel:
        """The model of this cluster with ``device`` GPUs in every node, where a job's best
        placement is sought on the nodes that have ``device`` GPUs when they hold it."""
        found = self._references.get(device)
        if found is None:
            # Its own durations are on ``device``: its consolidated time is that type's (left to
            # the default reference it would answer with the duration GPU's time instead).
            found = PerfSpeedModel(
                reference_topology(self.topology, device),
                spec_source=self.spec,
                duration_gpu=device,
                home_nodes=tuple(
                    n for n, kind in enumerate(self.topology.node_device) if kind == device
                ),
            )
            self._references[device] = found
        return found

    def base_iter_s(self, model: str, num_gpus: int, placement: Placement) -> float:
        """The consolidated iteration time on the slowest GPU type of ``placement``: what the
        job would need there without communication losses (its communication overhead is
        measured against this, not against faster GPUs elsewhere)."""
        device = self.topology.compute_device(node for node, _ in placement)
        return self.reference(device).consolidated_iter_s(model, num_gpus)

    def plan(self, model: str, placement: Placement) -> CommPlan:
        key = (model, placement)
        found = self._plans.get(key)
        if found is None:
            found = comm_plan(self.spec(model), _shape(placement, self.topology), self.topology)
            self._plans[key] = found
        return found

    def consolidated(self, num_gpus: int) -> Placement:
        shape = consolidated_placement(num_gpus, self.topology)
        return tuple(zip(shape.nodes, shape.gpus_per_node, strict=True))

    def best_placement(self, model: str, num_gpus: int) -> Placement:
        """The placement of ``num_gpus`` where ``model`` runs fastest on idle links: the
        consolidated one on a regular cluster, the fastest candidate of
        :func:`~unstall.sim.reference_placements.best_candidates` on node groups (the first
        among equals). What a trace's duration is the run time at."""
        key = (model, num_gpus)
        found = self._best.get(key)
        if found is None:
            if self.topology.regular:
                found = self.consolidated(num_gpus)
            else:
                candidates = best_candidates(self.topology, num_gpus, self._racks_for(num_gpus))
                found = min(candidates, key=lambda p: plan_time(self.plan(model, p)).total_s)
            self._best[key] = found
        return found

    def _racks(self) -> tuple[list[int], ...]:
        if self._rack_nodes is None:
            self._rack_nodes = rack_nodes(self.topology)
        return self._rack_nodes

    def _racks_for(self, num_gpus: int) -> tuple[list[int], ...]:
        """Each rack's nodes (largest first) a job's best placement is sought among: the home
        nodes of a reference model when they hold the job, else all."""
        racks = self._racks()
        if self._home is None or len(self._home) == self.topology.n_nodes:
            return racks
        home = set(self._home)
        if sum(self.topology.node_gpus[n] for n in home) < num_gpus:
            return racks
        return tuple([n for n in nodes if n in home] for nodes in racks)

    def consolidated_iter_s(self, model: str, num_gpus: int) -> float:
        """The iteration time at the best placement on the duration GPU, links idle."""
        if self.heterogeneous:
            return self.reference(self.duration_gpu).consolidated_iter_s(model, num_gpus)
        return plan_time(self.plan(model, self.best_placement(model, num_gpus))).total_s

    def reference_iter_s(self, model: str, num_gpus: int, device: str) -> float:
        """The consolidated iteration time on a regular cluster of ``device`` GPUs with this
        cluster's network: where the work of a job whose duration was measured on ``device``
        is counted (``consolidated_iter_s`` for ``device = duration_gpu``)."""
        if device.lower() == self.duration_gpu:
            return self.consolidated_iter_s(model, num_gpus)
        return self.reference(device.lower()).consolidated_iter_s(model, num_gpus)

    def type_iter_s(self, model: str, num_gpus: int) -> dict[str, float]:
        """The iteration time on idle links of the most consolidated placement on each GPU
        type's own nodes (the fewest of them, largest first; ``inf`` where the type has too few
        GPUs): what a policy weighs types by. A job of 8 GPUs on nodes of 4 K80s pays for
        crossing the network there, as it would run."""
        if not self.heterogeneous:
            return {self.duration_gpu: self.consolidated_iter_s(model, num_gpus)}
        if self._type_nodes is None:
            self._type_nodes = _nodes_by_type(self.topology)
        gpus = self.topology.node_gpus
        out: dict[str, float] = {}
        for device, nodes in self._type_nodes.items():
            taken: list[tuple[int, int]] = []
            need = num_gpus
            for node in nodes:
                if need <= 0:
                    break
                taken.append((node, min(need, gpus[node])))
                need -= gpus[node]
            placement = tuple(sorted(taken))
            out[device] = math.inf if need > 0 else self.iter_s(model, num_gpus, placement, None)
        return out

    def spread(self, num_gpus: int, *, across_racks: bool, model: str | None = None) -> Placement:
        """A typical spread placement: twice the minimum number of nodes (at least two, at most
        the cluster's), within one rack when it fits, or dealt round-robin over the racks. On
        node groups, from ``model``'s best placement (the consolidated one when no model is
        given; :func:`~unstall.sim.reference_placements.spread_on_groups`)."""
        topo = self.topology
        if not topo.regular:
            if model is None:
                best = self.consolidated(num_gpus)
            else:
                best = self.best_placement(model, num_gpus)
            return spread_on_groups(topo, num_gpus, best, self._racks(), across_racks=across_racks)
        gpn = topo.gpus_per_node
        nodes = min(num_gpus, max(2, 2 * -(-num_gpus // gpn)), topo.n_nodes)
        base, extra = divmod(num_gpus, nodes)
        counts = [base + (1 if i < extra else 0) for i in range(nodes)]
        racks, per_rack = topo.racks, topo.nodes_per_rack
        if across_racks and racks > 1:
            ids = [(i % racks) * per_rack + i // racks for i in range(nodes)]
        else:
            ids = list(range(nodes))
        return tuple(sorted(zip(ids, counts, strict=True)))

    def sensitivity(self, model: str, num_gpus: int) -> Sensitivity:
        if self.heterogeneous:
            return self.reference(self.duration_gpu).sensitivity(model, num_gpus)
        if num_gpus <= 1 or self.topology.n_nodes < 2:
            return Sensitivity.flat(1.0, 1.0)
        best = self.plan(model, self.best_placement(model, num_gpus))
        node = self.plan(model, self.spread(num_gpus, across_racks=False, model=model))
        rack = self.plan(model, self.spread(num_gpus, across_racks=True, model=model))

        idle = plan_time(best).total_s
        consolidated = tuple(plan_time(best, None, c).total_s / idle for c in CONGESTION_GRID)

        def ratios(spread: CommPlan) -> tuple[float, ...]:
            return tuple(
                max(
                    1.0,
                    plan_time(spread, None, c).total_s / plan_time(best, None, c).total_s,
                )
                for c in CONGESTION_GRID
            )

        return Sensitivity(node=ratios(node), rack=ratios(rack), consolidated=consolidated)

    def flow(self, model: str, num_gpus: int, placement: Placement) -> Flow | None:
        key = (model, placement)
        if key in self._flows:
            return self._flows[key]
        plan = self.plan(model, placement)
        network = [ld for ld in plan.loads if ld.network]
        found = None
        if network:
            found = Flow(
                weights={ld.link: ld.weight for ld in network},
                cap=min(ld.max_bandwidth / ld.weight for ld in network),
            )
        self._flows[key] = found
        return found

    def capacity(self, link: LinkId) -> float:
        assert isinstance(link, tuple) and link[0] != INTRA
        return self.topology.capacity(link)

    def iter_s(self, model: str, num_gpus: int, placement: Placement, rate: float | None) -> float:
        plan = self.plan(model, placement)
        if rate is None:
            return plan_time(plan).total_s
        return plan_time(plan, plan.bandwidth_at_rate(rate)).total_s

    def rate_timing(self, model: str, num_gpus: int, placement: Placement) -> RateTiming:
        """``iter_s(model, num_gpus, placement, rate)`` as a function of the rate alone (the
        engine's hot path: evaluated for every job whose share changes)."""
        key = (model, placement)
        found = self._timings.get(key)
        if found is None:
            found = self._timings[key] = rate_timing(self.plan(model, placement))
        return found


def _nodes_by_type(topology: TopologyConfig) -> dict[str, list[int]]:
    """Each GPU type's nodes, largest first (then by index), types in node order."""
    found: dict[str, list[int]] = {}
    for node, device in enumerate(topology.node_device):
        found.setdefault(device, []).append(node)
    gpus = topology.node_gpus
    return {device: sorted(nodes, key=lambda n: (-gpus[n], n)) for device, nodes in found.items()}


def _dominated(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    """Term ``b`` takes at least as long as ``a`` at every rate (less bandwidth, more bytes and
    latency), so ``a`` never sets the maximum alone. Float division and addition are monotone, so
    this holds for the rounded values too."""
    return a != b and b[0] <= a[0] and b[1] <= a[1] and b[2] >= a[2] and b[3] >= a[3]


def rate_timing(plan: CommPlan) -> RateTiming:
    """The plan's iteration time as a function of the rate the sharing step gives it."""
    given_weight = {ld.link: ld.weight for ld in plan.loads}  # as bandwidth_at_rate builds it
    floor = 0.0  # links without bytes pay their latency whatever the rate
    terms: list[tuple[float, float, float, float]] = []
    for ld in plan.loads:
        if ld.bytes == 0.0:
            floor = max(floor, ld.latency_s)
        else:
            terms.append((ld.max_bandwidth, given_weight[ld.link], ld.latency_s, ld.bytes))
    distinct = list(dict.fromkeys(terms))
    kept = tuple(t for t in distinct if not any(_dominated(t, other) for other in distinct))
    return RateTiming(
        terms=kept,
        floor=floor,
        compute_s=plan.compute_s,
        overlap_s=plan.overlap_s,
        data_s=plan.data_s,
    )
