"""The simulator's speed model backed by ``workload.perf`` over a ``net.topology``.

Each trace model name resolves to a :class:`JobPerfSpec` (zoo facts, or a measured JobProfile);
communication plans are cached per (model, placement shape) so that the engine's hot path is a
dictionary lookup and a few float operations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from unstall.errors import ConfigError
from unstall.net.topology import INTRA, TopologyConfig
from unstall.sched.base import CONGESTION_GRID, Placement, Sensitivity
from unstall.sim.speed import Flow, LinkId, RateTiming
from unstall.workload import perf
from unstall.workload.perf import CommPlan, JobPerfSpec

# Pollux's workloads name applications, not models: the zoo model (and options) standing in for
# each, after the Pollux paper's Table 1 (ResNet-50 on ImageNet, ResNet-18 on CIFAR-10, ...).
APPLICATION_MODELS: dict[str, tuple[str, dict[str, object]]] = {
    "imagenet": ("resnet50", {}),
    "cifar10": ("resnet18", {"image_size": 32, "num_classes": 10}),
    "yolov3": ("resnet50", {"image_size": 416}),
    "bert": (
        "transformer",
        {"d_model": 768, "layers": 12, "heads": 12, "ff": 3072, "vocab": 30522, "seq_len": 128},
    ),
    "deepspeech2": (
        "lstm_lm",
        {"embed_dim": 800, "hidden": 800, "num_layers": 5, "vocab": 29, "tie_weights": False},
    ),
    "ncf": ("ncf", {}),
}


# Per-iteration time that does not shrink with FLOPs (kernel launches, optimizer step, Python):
# the smallest fixed compute time `unstall sim calibrate` fits on Pollux's data (NCF on a T4).
# Without it a FLOP-based estimate puts tiny models at microseconds per iteration, which would
# make their network sensitivity absurdly large.
FRAMEWORK_OVERHEAD_S = 0.007


def spec_for(model: str, device: str) -> JobPerfSpec:
    """The perf spec of a trace's model name: a zoo model, or a Pollux application."""
    from unstall.workload import zoo

    if model in APPLICATION_MODELS:
        name, options = APPLICATION_MODELS[model]
        facts = zoo.facts(name, **options)
    elif model in zoo.MODEL_REGISTRY:
        facts = zoo.facts(model)
    else:
        known = sorted([*zoo.names(), *APPLICATION_MODELS])
        raise ConfigError(
            "trace",
            "model",
            f"unknown model {model!r}; known: {known}, or a measured one given as a JobProfile "
            "(`sim run --job-profile`)",
        )
    spec = JobPerfSpec.from_facts(facts, device_name=device, name=model)
    return dataclasses.replace(
        spec,
        compute_s=spec.compute_s + FRAMEWORK_OVERHEAD_S,
        fixed_compute_s=FRAMEWORK_OVERHEAD_S,
    )


def _shape(placement: Placement, topology: TopologyConfig) -> perf.Placement:
    nodes = tuple(node for node, _ in placement)
    return perf.Placement(
        tuple(k for _, k in placement),
        nodes=nodes,
        racks=tuple(topology.rack_of(n) for n in nodes),
    )


class PerfSpeedModel:
    """Iteration times from the perf model; shared links are NICs and rack uplinks."""

    def __init__(
        self, topology: TopologyConfig, specs: Mapping[str, JobPerfSpec] | None = None
    ) -> None:
        self.topology = topology
        self._specs: dict[str, JobPerfSpec] = dict(specs or {})
        self._plans: dict[tuple[str, Placement], CommPlan] = {}
        self._flows: dict[tuple[str, Placement], Flow | None] = {}
        self._timings: dict[tuple[str, Placement], RateTiming] = {}

    def spec(self, model: str) -> JobPerfSpec:
        found = self._specs.get(model)
        if found is None:
            found = spec_for(model, self.topology.device)
            self._specs[model] = found
        return found

    def plan(self, model: str, placement: Placement) -> CommPlan:
        key = (model, placement)
        found = self._plans.get(key)
        if found is None:
            found = perf.comm_plan(
                self.spec(model), _shape(placement, self.topology), self.topology
            )
            self._plans[key] = found
        return found

    def consolidated(self, num_gpus: int) -> Placement:
        shape = perf.consolidated_placement(num_gpus, self.topology)
        return tuple(zip(shape.nodes, shape.gpus_per_node, strict=True))

    def consolidated_iter_s(self, model: str, num_gpus: int) -> float:
        return perf.plan_time(self.plan(model, self.consolidated(num_gpus))).total_s

    def spread(self, num_gpus: int, *, across_racks: bool) -> Placement:
        """A typical spread placement: twice the minimum number of nodes (at least two, at most
        the cluster's), within one rack when it fits, or dealt round-robin over the racks."""
        topo = self.topology
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
        if num_gpus <= 1 or self.topology.n_nodes < 2:
            return Sensitivity.flat(1.0, 1.0)
        best = self.plan(model, self.consolidated(num_gpus))
        node = self.plan(model, self.spread(num_gpus, across_racks=False))
        rack = self.plan(model, self.spread(num_gpus, across_racks=True))

        idle = perf.plan_time(best).total_s
        consolidated = tuple(perf.plan_time(best, None, c).total_s / idle for c in CONGESTION_GRID)

        def ratios(spread: CommPlan) -> tuple[float, ...]:
            return tuple(
                max(
                    1.0,
                    perf.plan_time(spread, None, c).total_s / perf.plan_time(best, None, c).total_s,
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
            return perf.plan_time(plan).total_s
        return perf.plan_time(plan, plan.bandwidth_at_rate(rate)).total_s

    def rate_timing(self, model: str, num_gpus: int, placement: Placement) -> RateTiming:
        """``iter_s(model, num_gpus, placement, rate)`` as a function of the rate alone (the
        engine's hot path: evaluated for every job whose share changes)."""
        key = (model, placement)
        found = self._timings.get(key)
        if found is None:
            found = self._timings[key] = rate_timing(self.plan(model, placement))
        return found


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
