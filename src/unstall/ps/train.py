"""One parameter-server training run: config in, :class:`PSRunResult` out.

:func:`prepare` resolves a :class:`PSConfig` (scenario, model, data, optimizer) without touching
Ray; :func:`run_training` starts the servers, assigns the chunks with the chosen strategy, runs
the synchronous iterations (applying the scenario's changes and an optional controller hook at
every iteration boundary) and, with ``check_reference``, compares the final parameters with
single-process SGD over the same global batches.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

import numpy as np

from unstall.config import check
from unstall.errors import ConfigError
from unstall.ps.assign import STRATEGIES, CostPhase, assign
from unstall.ps.chunks import Assignment
from unstall.ps.coordinator import (
    DEFAULT_PIECE_BYTES,
    ActorPool,
    IterationTelemetry,
    PSCluster,
    ensure_ray,
)
from unstall.ps.data import DATA_SOURCES, Dataset, DataSpec
from unstall.ps.elastic import ElasticEvent, ElasticPSLD
from unstall.ps.links import server_cost
from unstall.ps.optim import SGDConfig
from unstall.ps.reference import compare, reference_params
from unstall.ps.replica import ModelJob, initial_params
from unstall.ps.scenarios import Scenario, resolve_scenario
from unstall.results import JsonResult
from unstall.workload import zoo

DEFAULT_MODEL = "mlp"


@dataclass(frozen=True, kw_only=True)
class PSConfig:
    """Everything one run needs. ``model=None`` takes the scenario's model (and its options);
    ``servers=None`` the scenario's server count; ``batch_size`` is per worker."""

    model: str | None = None
    model_options: Mapping[str, object] = field(default_factory=dict)
    data: str = "synthetic"
    batch_size: int = 32
    workers: int = 2
    servers: int | None = None
    spares: int | None = None  # servers a controller (psld) may add; None: the scenario's
    strategy: str = "tf-greedy"
    scenario: str = "none"
    iterations: int = 20
    sgd: SGDConfig = field(default_factory=SGDConfig)
    seed: int = 0
    check_reference: bool = False
    timeout_s: float = 300.0
    address: str | None = None
    piece_mb: float = DEFAULT_PIECE_BYTES / 1e6  # pipelined push-pull pieces (plan_pieces)
    step_threads: int = (
        1  # threads a server steps a >= 1 M-element segment with (2: no gain on 2 cores)
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "model_options", MappingProxyType(dict(self.model_options)))
        check(self.workers >= 1, self, "workers", f"must be >= 1, got {self.workers}")
        ok = self.servers is None or self.servers >= 1
        check(ok, self, "servers", f"must be >= 1, got {self.servers}")
        ok = self.spares is None or self.spares >= 0
        check(ok, self, "spares", f"must be >= 0, got {self.spares}")
        check(self.iterations >= 1, self, "iterations", f"must be >= 1, got {self.iterations}")
        check(self.batch_size >= 1, self, "batch_size", f"must be >= 1, got {self.batch_size}")
        check(self.timeout_s > 0, self, "timeout_s", f"must be > 0, got {self.timeout_s}")
        check(self.piece_mb > 0, self, "piece_mb", f"must be > 0, got {self.piece_mb}")
        ok = self.step_threads >= 1
        check(ok, self, "step_threads", f"must be >= 1, got {self.step_threads}")
        known = ", ".join(STRATEGIES)
        check(self.strategy in STRATEGIES, self, "strategy", f"must be one of {known}")
        check(self.data in DATA_SOURCES, self, "data", f"must be one of {', '.join(DATA_SOURCES)}")


@dataclass(frozen=True, kw_only=True)
class PreparedRun:
    """A config resolved: the scenario (on the run's server count), the job and the costs."""

    config: PSConfig
    scenario: Scenario
    job: ModelJob

    def costs(self) -> list[CostPhase]:
        """Each stretch of constant specs with its share of the run and every server's cost."""
        n = self.config.iterations
        return [
            CostPhase(
                weight=(stop - start) / n,
                servers=tuple(
                    server_cost(s, self.job.workers) for s in self.scenario.specs(start, n)
                ),
            )
            for start, stop in self.scenario.spans(n)
        ]


def _model(config: PSConfig, scenario: Scenario) -> tuple[str, dict[str, object]]:
    """The model and options: the scenario's unless ``config.model`` names another; then the
    data source's requirements (``digits``: 64 features, 10 classes)."""
    name = config.model or scenario.model or DEFAULT_MODEL
    options = dict(scenario.model_options) if name == scenario.model else {}
    options.update(config.model_options)
    _, needs = DATA_SOURCES[config.data]
    if needs:
        if zoo.spec(name).input_kind != "features":
            raise ConfigError("PSConfig", "data", f"{config.data!r} needs a features model (mlp)")
        options.update(needs)
    return name, options


def prepare(config: PSConfig) -> PreparedRun:
    scenario = resolve_scenario(config.scenario)
    if config.servers is not None:
        scenario = scenario.with_servers(config.servers)
    if config.spares is not None:
        scenario = dataclasses.replace(scenario, spares=config.spares)
    model, options = _model(config, scenario)
    data = DataSpec(source=config.data, batch_size=config.batch_size, seed=config.seed)
    job = ModelJob(model=model, model_options=options, data=data, workers=config.workers)
    return PreparedRun(config=config, scenario=scenario, job=job)


@dataclass(frozen=True, kw_only=True)
class PSRunResult(JsonResult):
    """A run's outcome. Throughput and mean iteration time leave out iteration 0 (first-call
    set-up) when there is more than one; ``server_bytes`` are the parameter bytes each server
    owns at the end, ``server_traffic_bytes`` what crossed its link over the run;
    ``predicted_iter_s`` is the cost model's transfer-and-step time of the assignment."""

    strategy: str
    scenario: str
    model: str
    model_options: Mapping[str, object]
    data: str
    workers: int
    servers: int
    chunks: int
    iterations: int
    warmup_iterations: int
    throughput_it_s: float
    mean_iter_s: float
    predicted_iter_s: float
    total_s: float
    server_bytes: Mapping[str, int]
    server_traffic_bytes: Mapping[str, int]
    server_busy_s: Mapping[str, float]
    loss_first: float
    loss_last: float
    params_match_reference: bool | None
    reference_max_rel_err: float | None
    telemetry: tuple[IterationTelemetry, ...] = ()
    # Elastic load distribution (psld): servers live after each iteration, decisions applied,
    # and the pauses they caused (0 and constant for the static strategies).
    servers_over_time: tuple[int, ...] = ()
    migrations: int = 0
    scale_outs: int = 0
    scale_ins: int = 0
    max_pause_s: float = 0.0
    total_pause_s: float = 0.0
    elastic_events: tuple[ElasticEvent, ...] = ()


class IterationHook(Protocol):
    """Called at every iteration boundary after the step (a controller such as PSLD)."""

    def __call__(self, cluster: PSCluster, telemetry: IterationTelemetry) -> None: ...


def predicted_iter_s(run: PreparedRun, assignment: Assignment) -> float:
    """The cost model's iteration time of ``assignment`` (its slowest server's transfers and
    step), averaged over the run's stretches."""
    load = assignment.server_bytes()
    return sum(
        phase.weight * max(c.seconds(b) for c, b in zip(phase.servers, load, strict=True) if b)
        for phase in run.costs()
    )


# Strategies that keep a controller running during training: strategy -> the hook to run.
CONTROLLED: dict[str, Callable[[PreparedRun], IterationHook]] = {
    "psld": lambda run: ElasticPSLD(run.scenario, run.config.iterations),
}


def _load_dataset(source: str) -> Dataset | None:
    loader, _ = DATA_SOURCES[source]
    return loader() if loader is not None else None


def run_training(
    config: PSConfig,
    *,
    pool: ActorPool | None = None,
    hook: IterationHook | None = None,
    advance: Callable[[int], None] | None = None,
) -> PSRunResult:
    """Train as ``config`` says on Ray (started on loopback unless running or ``address``)."""
    run = prepare(config)
    ensure_ray(config.address, num_cpus=max(config.workers + 1, 2))
    own_pool = pool is None
    actors = pool if pool is not None else ActorPool()
    dataset = _load_dataset(config.data)
    infos, initial = initial_params(run.job)
    assignment = assign(config.strategy, infos, run.scenario.servers, run.costs())
    if hook is None and config.strategy in CONTROLLED:
        hook = CONTROLLED[config.strategy](run)
    cluster: PSCluster | None = None
    try:
        cluster = PSCluster(
            run.job,
            config.sgd,
            actors,
            dataset=dataset,
            timeout_s=config.timeout_s,
            piece_bytes=max(1, int(config.piece_mb * 1e6)),
            step_threads=config.step_threads,
        )
        cluster.start(
            assignment.chunks,
            [assignment.owner[c.id] for c in assignment.chunks],
            run.scenario.specs(0, config.iterations),
            initial,
        )
        telemetry = _iterate(run, cluster, hook, advance)
        final = cluster.params()
        owned = cluster.owned_bytes()
    except BaseException:
        if cluster is not None:
            cluster.close(failed=True)
        raise
    else:
        cluster.close()
    finally:
        if own_pool:
            actors.close()
    check_result = None
    if config.check_reference:
        expected = reference_params(run.job, config.sgd, config.iterations, dataset)
        check_result = compare(final, expected)
    elastic = hook.summary() if isinstance(hook, ElasticPSLD) else None
    result = _result(run, assignment, telemetry, owned, check_result)
    if elastic is None:
        return dataclasses.replace(
            result, servers_over_time=(run.scenario.servers,) * len(telemetry)
        )
    return dataclasses.replace(
        result,
        servers_over_time=elastic.servers_over_time,
        migrations=elastic.migrations,
        scale_outs=elastic.scale_outs,
        scale_ins=elastic.scale_ins,
        max_pause_s=elastic.max_pause_s,
        total_pause_s=elastic.total_pause_s,
        elastic_events=elastic.events,
    )


def _iterate(
    run: PreparedRun,
    cluster: PSCluster,
    hook: IterationHook | None,
    advance: Callable[[int], None] | None,
) -> list[IterationTelemetry]:
    n = run.config.iterations
    out: list[IterationTelemetry] = []
    boundary_s = 0.0
    for iteration in range(n):
        started = time.perf_counter()
        for sid in list(cluster.servers):
            cluster.set_spec(sid, run.scenario.spec(sid, iteration, n))
        boundary_s += time.perf_counter() - started
        step = cluster.step(iteration)
        out.append(dataclasses.replace(step, boundary_s=boundary_s))
        started = time.perf_counter()
        if hook is not None:
            hook(cluster, step)
        boundary_s = time.perf_counter() - started
        if advance is not None:
            advance(1)
    return out


def _result(
    run: PreparedRun,
    assignment: Assignment,
    telemetry: list[IterationTelemetry],
    owned: Mapping[int, int],
    check_result: Any,
) -> PSRunResult:
    config = run.config
    warmup = 1 if len(telemetry) > 1 else 0
    measured = telemetry[warmup:]
    spent = sum(t.iter_s + t.boundary_s for t in measured)
    traffic: dict[str, int] = {}
    busy: dict[str, float] = {}
    for t in telemetry:
        for s in t.servers:
            key = str(s.server)
            traffic[key] = traffic.get(key, 0) + s.bytes_in + s.bytes_out
            busy[key] = busy.get(key, 0.0) + s.busy_s / len(telemetry)
    return PSRunResult(
        strategy=config.strategy,
        scenario=run.scenario.name,
        model=run.job.model,
        model_options=dict(run.job.model_options),
        data=config.data,
        workers=config.workers,
        servers=run.scenario.servers,
        chunks=len(assignment.chunks),
        iterations=len(telemetry),
        warmup_iterations=warmup,
        throughput_it_s=len(measured) / spent,
        mean_iter_s=float(np.mean([t.iter_s for t in measured])),
        predicted_iter_s=predicted_iter_s(run, assignment),
        total_s=sum(t.iter_s + t.boundary_s for t in telemetry),
        server_bytes={str(k): v for k, v in sorted(owned.items())},
        server_traffic_bytes=traffic,
        server_busy_s=busy,
        loss_first=telemetry[0].loss,
        loss_last=telemetry[-1].loss,
        params_match_reference=None if check_result is None else check_result.matches,
        reference_max_rel_err=None if check_result is None else check_result.max_rel_err,
        telemetry=tuple(telemetry),
    )
