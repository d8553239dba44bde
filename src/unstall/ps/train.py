"""One parameter-server training run: callables in, :class:`PSRunResult` out.

:func:`fit` builds the model once in the driver (the run's starting point), asks the strategy
for the first assignment and its controller, connects to (or starts) Ray once, starts the
servers, runs the synchronous iterations (applying the scenario's changes and the controller at
every iteration boundary) and gathers the trained parameters. With ``check_reference`` it replays
every worker's batches in single-process training and compares. Every ``checkpoint_every``
iterations it hands a :class:`~unstall.ps.checkpoint.PSCheckpoint` to the caller, and a run
given one as ``resume`` goes on from it with the result an unstopped run would have had.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from unstall import checks
from unstall.config import check
from unstall.errors import ConfigError
from unstall.ps import arguments as args
from unstall.ps import names
from unstall.ps.assign.base import CostPhase
from unstall.ps.checkpoint import PSCheckpoint
from unstall.ps.chunks import Assignment
from unstall.ps.config import DEFAULT_STRATEGY, FitConfig, RunParts, resolve_parts
from unstall.ps.coordinator import IterationTelemetry
from unstall.ps.data import DataFn
from unstall.ps.device import rel_tol
from unstall.ps.elastic import ElasticEvent
from unstall.ps.execute import Recovery, RunState, Segment, run_segments
from unstall.ps.links import server_cost
from unstall.ps.optim import ServerOptimizer
from unstall.ps.reference import ReferenceCheck, compare, reference_params
from unstall.ps.replica import ModelFn, TrainingJob, build_model, initial_params, trainable
from unstall.ps.runtime import ActorPool, ray_for_run
from unstall.ps.scenarios import Scenario
from unstall.ps.strategies import Strategy
from unstall.results import JsonResult, to_jsonable
from unstall.workload.losses import LossFn
from unstall.workload.named import Named, label_of, options_of


@dataclass(frozen=True, kw_only=True)
class PSRunResult(JsonResult):
    """A run's outcome. Throughput and mean iteration time leave out iteration 0 (first-call
    set-up) when there is more than one (the throughput counts a controller's warm start,
    ``warm_start_s``, in); ``server_bytes`` are the parameter bytes each server
    owns at the end, ``server_traffic_bytes`` what crossed its link over the run;
    ``predicted_iter_s`` is the cost model's transfer-and-step time of the placements the run
    had (a static strategy's first assignment; a controller's as it moved the chunks),
    averaged over its iterations.
    ``state_dict`` holds the trained model (``model.load_state_dict(result.state_dict)``; its
    buffers, e.g. BatchNorm's running statistics, are worker 0's); it is left out of the JSON.
    ``nodes``: the Ray node each worker and server ran on (actor label -> node id);
    ``start_iteration``: the iteration a resumed run started at (0 otherwise);
    ``recoveries``: the dead actors the run survived (when, what, and how long going on took)."""

    strategy: str
    optimizer: str
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
    # A controller's warm start before the first iteration (probe and placement, psld): part
    # of the run, so in ``throughput_it_s`` and ``total_s``.
    warm_start_s: float = 0.0
    nodes: Mapping[str, str] = field(default_factory=dict)
    start_iteration: int = 0
    checkpoints: int = 0
    recoveries: tuple[Recovery, ...] = ()
    device: str = "cpu"  # where the workers computed
    state_dict: Mapping[str, torch.Tensor] = field(default_factory=dict, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """Every field but ``state_dict`` (tensors belong in ``torch.save``, not JSON)."""
        return {
            f.name: to_jsonable(getattr(self, f.name))
            for f in dataclasses.fields(self)
            if f.name != "state_dict"
        }

    @property
    def node_count(self) -> int:
        """How many Ray nodes the run's actors used."""
        return len(set(self.nodes.values()))


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    """A run made ready without Ray: the job, its config (handed on whole), the strategy, the
    scenario on the run's servers and the optimizer as objects, the model built in the driver
    and its starting parameters, and the first assignment."""

    job: TrainingJob
    config: FitConfig
    strategy: Strategy
    scenario: Scenario
    optimizer: ServerOptimizer
    model: nn.Module
    initial: tuple[np.ndarray, ...]
    assignment: Assignment
    resume: PSCheckpoint | None = None

    @property
    def iterations(self) -> int:
        return self.config.iterations

    @property
    def start_iteration(self) -> int:
        return self.resume.iteration if self.resume is not None else 0


def run_costs(scenario: Scenario, workers: int, iterations: int) -> list[CostPhase]:
    """Each stretch of constant specs with its share of the run and every server's cost."""
    return [
        CostPhase(
            weight=(stop - start) / iterations,
            servers=tuple(server_cost(s, workers) for s in scenario.specs(start, iterations)),
        )
        for start, stop in scenario.spans(iterations)
    ]


def predicted_iter_s(assignment: Assignment, costs: Sequence[CostPhase]) -> float:
    """The cost model's iteration time of ``assignment`` (its slowest server's transfers and
    step), averaged over the run's stretches."""
    load = assignment.server_bytes()
    return sum(
        phase.weight * max(c.seconds(b) for c, b in zip(phase.servers, load, strict=True) if b)
        for phase in costs
    )


def ran_iter_s(
    telemetry: Sequence[IterationTelemetry], scenario: Scenario, workers: int, iterations: int
) -> float:
    """The cost model's iteration time of the placements a run had: per iteration, its slowest
    server's transfers and step for the bytes each server owned then, at that iteration's
    specs; averaged over the iterations."""
    times = [
        max(
            (
                server_cost(scenario.spec(s.server, t.iteration, iterations), workers).seconds(
                    s.owned_bytes
                )
                for s in t.servers
                if s.owned_bytes
            ),
            default=0.0,
        )
        for t in telemetry
    ]
    return float(np.mean(times)) if times else 0.0


def make_plan(
    job: TrainingJob,
    config: FitConfig,
    parts: RunParts,
    resume: PSCheckpoint | None = None,
) -> RunPlan:
    """Make a run ready (the user's model function runs here, in the driver)."""
    model = build_model(job.model, job.seed)
    infos, initial = initial_params(model)
    if resume is not None:
        _check_resume(resume, [p.size for p in initial], job, parts.optimizer, config.iterations)
        initial = [p.copy() for p in resume.params]
    costs = run_costs(parts.scenario, job.workers, config.iterations)
    return RunPlan(
        job=job,
        config=config,
        strategy=parts.strategy,
        scenario=parts.scenario,
        optimizer=parts.optimizer,
        model=model,
        initial=tuple(initial),
        assignment=parts.strategy.assign(infos, parts.scenario.servers, costs),
        resume=resume,
    )


def _check_resume(
    resume: PSCheckpoint,
    sizes: Sequence[int],
    job: TrainingJob,
    optimizer: ServerOptimizer,
    iterations: int,
) -> None:
    resume.check_fits(sizes, workers=job.workers, seed=job.seed)
    check(
        type(optimizer) is type(resume.optimizer),
        "resume",
        "optimizer",
        f"the checkpoint's state is {resume.optimizer.name}'s, not {optimizer.name}'s",
    )
    check(
        resume.iteration < iterations,
        "fit",
        "iterations",
        f"the checkpoint is at iteration {resume.iteration} already: ask for more than "
        f"{resume.iteration} iterations in all",
    )


def fit(
    model: ModelFn | str,
    data: DataFn | str,
    config: FitConfig | None = None,
    *,
    loss: LossFn | str = F.cross_entropy,
    resume: PSCheckpoint | None = None,
    on_checkpoint: Callable[[PSCheckpoint], None] | None = None,
    pool: ActorPool | None = None,
    progress: Callable[[int], None] | None = None,
    check_progress: Callable[[int], None] | None = None,
    batch_size: int | None = None,
    **settings: Any,
) -> PSRunResult:
    """Train ``model()`` with synchronous data-parallel training on parameter servers,
    ``config.workers`` Ray actors each taking its batches from ``data(rank, workers)`` and its
    loss from ``loss(outputs, targets)``.

    ``model``, ``data`` and ``loss`` may be names instead (:mod:`unstall.ps.names`): a zoo
    model (``"mlp"``; None-like defaults are the scenario's), ``"synthetic"`` (its random
    batches of ``batch_size``, default 32) or ``"digits"``, ``"cross_entropy"`` or ``"mse"``,
    or user code ``FILE.py:FUNC``.

    ``config`` (a :class:`~unstall.ps.config.FitConfig`, built once and handed whole) is how the
    run goes: workers, iterations, seed, servers and spares, the ``strategy`` (an entry of
    :data:`~unstall.ps.strategies.STRATEGIES`, a user's object, or a name: ``"psld"``), the
    ``scenario`` (the servers' links and compute and how they change: a
    :class:`~unstall.ps.scenarios.Scenario`, a preset's name ``"bandwidth"`` or a
    ``.toml``/``.json`` file; default the ``none`` preset, four equal servers), the
    ``optimizer`` the servers step with (:class:`~unstall.ps.optim.SGDConfig`, the default, or
    :class:`~unstall.ps.optim.AdamConfig`, or a name: ``"adam"``; its state moves with the
    parameters), ``check_reference`` (the final parameters compared with single-process training
    over the same batches, 1e-6 relative; 1e-4 on ``"cuda"``), its ``recovery`` section
    (every ``checkpoint_every`` iterations, and after the last, ``on_checkpoint`` gets a
    :class:`~unstall.ps.checkpoint.PSCheckpoint`, e.g. ``lambda c: c.save(path)``;
    ``max_recoveries`` dead worker or server processes survived, going on from the last
    snapshot of the servers' state taken every ``snapshot_every`` iterations) and its
    ``runtime`` section (Ray's ``address`` or ``RAY_ADDRESS`` with ``runtime_env``, else a local
    Ray started on loopback and stopped at the end unless this process is connected to one
    already; ``timeout_s``, ``piece_mb``, ``step_threads``; ``device``, ``"cpu"`` or
    ``"cuda"``: each worker's forward and backward on a GPU of its own, the servers and the
    optimizer's step on the CPU; a cluster with fewer GPUs than workers is refused before any
    actor starts). Without a config, the keyword
    ``settings`` are its fields and its sections' (``workers=2, strategy="psld",
    checkpoint_every=5``), built into one here.

    ``resume`` goes on from a checkpoint (same model, workers, seed and optimizer kind; the
    optimizer defaults to the checkpoint's) with the result an unstopped run would have had;
    ``iterations`` counts the whole run. ``pool`` reuses actors across runs; ``progress(n)`` is
    called after every iteration, ``check_progress(n)`` after every iteration the reference
    check replays. Errors in the user's functions raise a one-line
    :class:`~unstall.usercode.UserCodeError` naming the function, file and line; an argument of
    the wrong kind (an unknown name, a scenario's factory instead of the scenario, ``"2"``
    workers, a model already built instead of the function that builds it) a
    :class:`~unstall.errors.ConfigError` naming the parameter, before the model is built or Ray
    is used.
    """
    # Every argument's kind first: a wrong one would otherwise fail in the planner as an
    # AttributeError, or in a server or worker after Ray has started actors.
    owner = "fit"
    config = fit_config(owner, config, settings)
    resume = args.checkpoint(owner, resume)
    parts = resolve_parts(config, resume.optimizer if resume is not None else None)
    model_fn, data_fn = _named_job(owner, model, data, parts.scenario, batch_size, config.seed)
    loss_fn = args.loss_function(owner, loss)
    on_checkpoint = args.optional_callable(
        owner, "on_checkpoint", on_checkpoint, "on_checkpoint(checkpoint)"
    )
    pool = args.actor_pool(owner, pool)
    progress = args.optional_callable(owner, "progress", progress, "progress(iterations_done)")
    check_progress = args.optional_callable(
        owner, "check_progress", check_progress, "check_progress(iterations_replayed)"
    )
    job = TrainingJob(
        model=model_fn,
        data=data_fn,
        loss=loss_fn,
        seed=config.seed,
        workers=config.workers,
        record_batches=config.check_reference,
        device=config.runtime.device,
    )
    plan = make_plan(job, config, parts, resume)
    runtime = config.runtime
    with ray_for_run(
        runtime.address,
        max(config.workers + 1, 2),
        pool,
        runtime_env=runtime.runtime_env,
        device=runtime.device,
        workers=config.workers,
        owner=owner,
    ) as actors:
        return run_plan(plan, actors, progress, on_checkpoint, check_progress)


def fit_config(owner: str, config: object, settings: Mapping[str, Any]) -> FitConfig:
    """``config``, or one built of the keyword ``settings`` (errors naming ``owner``'s
    parameters) when it is None."""
    if config is None:
        return FitConfig.of(owner, **settings)
    if not isinstance(config, FitConfig):
        raise ConfigError(
            owner, "config", f"must be a ps.FitConfig or None, got {checks.describe(config)}"
        )
    if settings:
        raise ConfigError(
            owner,
            "config",
            f"given with {', '.join(sorted(settings))}: put them in the config,"
            " dataclasses.replace(config, ...)",
        )
    return config


def _named_job(
    owner: str,
    model: object,
    data: object,
    scenario: Scenario,
    batch_size: int | None,
    seed: int,
) -> tuple[ModelFn, DataFn]:
    """The model and data functions: given, or named (a zoo model, its synthetic data)."""
    if isinstance(model, str):
        model = names.resolve_model(model, scenario=scenario, owner=owner)
    model_fn: ModelFn = args.model_function(owner, model)
    if isinstance(data, str):
        named = model_fn if isinstance(model_fn, Named) else Named(model_fn, label_of(model_fn))
        data = names.resolve_data(data, named, batch_size=batch_size, seed=seed, owner=owner)
    elif batch_size is not None:
        raise ConfigError(owner, "batch_size", "applies to named data (synthetic, digits)")
    data_fn: DataFn = args.data_function(owner, data)
    return model_fn, data_fn


def predict_iter_s(
    model: ModelFn | str,
    *,
    strategy: Strategy | str = DEFAULT_STRATEGY,
    scenario: Scenario | str | None = None,
    servers: int | None = None,
    workers: int = 2,
    iterations: int = 20,
    seed: int = 0,
) -> float:
    """The cost model's transfer-and-step time of an iteration under ``strategy``'s first
    assignment of ``model()``'s parameters (as :func:`fit` would make it), without running
    anything: the part of an iteration the placement decides. The model, strategy and
    scenario may be names, as :func:`fit` takes them; an argument of the wrong kind or range
    raises a :class:`~unstall.errors.ConfigError` naming it."""
    owner = "predict_iter_s"
    config = FitConfig.of(
        owner,
        strategy=strategy,
        scenario=scenario,
        servers=servers,
        workers=workers,
        iterations=iterations,
        seed=seed,
    )
    parts = resolve_parts(config)
    if isinstance(model, str):
        model = names.resolve_model(model, scenario=parts.scenario, owner=owner)
    model_fn: ModelFn = args.model_function(owner, model)
    infos, _ = initial_params(build_model(model_fn, config.seed))
    costs = run_costs(parts.scenario, config.workers, config.iterations)
    return predicted_iter_s(parts.strategy.assign(infos, parts.scenario.servers, costs), costs)


def run_plan(
    plan: RunPlan,
    pool: ActorPool,
    progress: Callable[[int], None] | None = None,
    on_checkpoint: Callable[[PSCheckpoint], None] | None = None,
    check_progress: Callable[[int], None] | None = None,
) -> PSRunResult:
    """Run ``plan`` on a connected Ray with actors from ``pool``."""
    controller = plan.strategy.controller(plan.scenario, plan.iterations)
    resume = plan.resume
    has_buffers = any(True for _ in plan.model.buffers())
    segment = Segment(
        job=plan.job,
        optimizer=plan.optimizer,
        scenario=plan.scenario,
        first_iteration=plan.start_iteration,
        iterations=plan.iterations,
        chunks=plan.assignment.chunks,
        has_buffers=has_buffers,
        check_reference=plan.config.check_reference,
        runtime=plan.config.runtime,
        recovery=plan.config.recovery,
    )
    state = RunState(
        iteration=plan.start_iteration,
        params=plan.initial,
        slots=resume.state if resume is not None else None,
        buffers=dict(resume.buffers) if resume is not None else {},
        owner=dict(plan.assignment.owner),
        servers=tuple(range(plan.scenario.servers)),
        batches=[],
    )
    done = run_segments(segment, state, pool, controller, progress, on_checkpoint)
    checked = None
    if plan.config.check_reference:
        expected = reference_params(
            plan.job,
            plan.optimizer,
            plan.initial,
            done.batches,
            check_progress,
            initial_state=resume.state if resume is not None else None,
            start_iteration=plan.start_iteration,
        )
        checked = compare(done.params, expected, rel_tol(plan.job.device))
    state_dict = _state_dict(plan.model, done.params, done.buffers)
    summary = controller.summary() if controller is not None else None
    warm_start_s = summary.warm_start_s if summary is not None else 0.0
    result = dataclasses.replace(
        _result(plan, done.telemetry, done.owned, checked, state_dict, warm_start_s),
        nodes=done.nodes,
        checkpoints=done.checkpoints,
        recoveries=done.recoveries,
    )
    if summary is None:
        servers = (plan.scenario.servers,) * len(done.telemetry)
        return dataclasses.replace(result, servers_over_time=servers)
    return dataclasses.replace(
        result,
        servers_over_time=summary.servers_over_time,
        migrations=summary.migrations,
        scale_outs=summary.scale_outs,
        scale_ins=summary.scale_ins,
        max_pause_s=summary.max_pause_s,
        total_pause_s=summary.total_pause_s,
        elastic_events=summary.events,
    )


def _state_dict(
    model: nn.Module, final: Sequence[np.ndarray], buffers: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """``model``'s state with the trained parameters and the workers' buffers."""
    with torch.no_grad():
        for param, values in zip(trainable(model), final, strict=True):
            param.copy_(torch.from_numpy(values).view(param.shape))
        named = dict(model.named_buffers())
        for name, value in buffers.items():
            named[name].copy_(value)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _result(
    plan: RunPlan,
    telemetry: list[IterationTelemetry],
    owned: Mapping[int, int],
    checked: ReferenceCheck | None,
    state_dict: dict[str, torch.Tensor],
    warm_start_s: float = 0.0,
) -> PSRunResult:
    warmup = 1 if len(telemetry) > 1 else 0
    measured = telemetry[warmup:]
    # Iteration 0 (the first call's set-up) is left out; a warm start is not set-up but the
    # controller's own work, which only its run does: it counts.
    spent = sum(t.iter_s + t.boundary_s for t in measured) + warm_start_s
    traffic: dict[str, int] = {}
    busy: dict[str, float] = {}
    for t in telemetry:
        for s in t.servers:
            key = str(s.server)
            traffic[key] = traffic.get(key, 0) + s.bytes_in + s.bytes_out
            busy[key] = busy.get(key, 0.0) + s.busy_s / len(telemetry)
    return PSRunResult(
        strategy=plan.strategy.name,
        optimizer=plan.optimizer.name,
        scenario=plan.scenario.name,
        model=label_of(plan.job.model),
        model_options=options_of(plan.job.model),
        data=label_of(plan.job.data),
        workers=plan.job.workers,
        servers=plan.scenario.servers,
        chunks=len(plan.assignment.chunks),
        iterations=len(telemetry),
        warmup_iterations=warmup,
        throughput_it_s=len(measured) / spent,
        mean_iter_s=float(np.mean([t.iter_s for t in measured])),
        predicted_iter_s=ran_iter_s(telemetry, plan.scenario, plan.job.workers, plan.iterations),
        total_s=sum(t.iter_s + t.boundary_s for t in telemetry) + warm_start_s,
        warm_start_s=warm_start_s,
        server_bytes={str(k): v for k, v in sorted(owned.items())},
        server_traffic_bytes=traffic,
        server_busy_s=busy,
        loss_first=telemetry[0].loss,
        loss_last=telemetry[-1].loss,
        params_match_reference=None if checked is None else checked.matches,
        reference_max_rel_err=None if checked is None else checked.max_rel_err,
        telemetry=tuple(telemetry),
        start_iteration=plan.start_iteration,
        device=plan.job.device,
        state_dict=state_dict,
    )
