"""One live run, end to end: trace, cluster, policy and config -> the simulator's results, from
real processes on a Ray cluster.

Without an address a local Ray emulates the cluster's nodes on this machine (one Ray node per
cluster node, on loopback); with one (or ``RAY_ADDRESS``) the run joins that cluster and maps
its nodes onto the topology (see :mod:`unstall.live.cluster`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from unstall.config import check, check_number
from unstall.errors import ConfigError, UnstallError
from unstall.live.backend import LiveBackend, LiveInterrupted, LiveOutcome
from unstall.live.cluster import LiveCluster, LocalRayCluster, discover
from unstall.live.config import LiveConfig
from unstall.live.executor import job_file_name
from unstall.live.prediction import predict_run
from unstall.live.segments import JobRecord
from unstall.live.status import LiveStatus
from unstall.live.train_loop import TrainFn, absolute_reference
from unstall.live.training import JobWork, UserWork
from unstall.loop import Job, JobEvent, JobState, placement_text
from unstall.net import resolve_cluster
from unstall.net.hardware import DEVICE_PRESETS
from unstall.net.topology import TopologyConfig
from unstall.results import JsonResult
from unstall.sched import resolve_policy
from unstall.sched.base import Policy
from unstall.sim import (
    PerfSpeedModel,
    RunJobs,
    SimResult,
    SimRun,
    check_trace_models,
    gpu_type_of,
    job_table,
    run_end,
    run_jobs,
    speed_model,
    summarise,
    timeline_table,
)
from unstall.traces import resolve_trace
from unstall.traces.schema import Trace
from unstall.usercode import is_reference

OWNER = "run_live"
# The cluster a live run emulates when none is given: 4 nodes of 4 GPUs in 2 racks.
DEFAULT_CLUSTER = "tiny"
# The columns of a live run's measured set-ups (LiveRun.setups).
SETUP_COLUMNS = (
    "job_id",
    "model",
    "kind",
    "began_s",
    "placement",
    "gpus",
    "nodes",
    "racks",
    "setup_wall_s",
)


@dataclass(frozen=True, kw_only=True)
class LiveFacts(JsonResult):
    """What only a live run measures (times in trace seconds unless ``_wall_s``)."""

    compute: str
    speedup: float
    address: str | None  # the cluster joined; None: a local Ray started for the run
    nodes: list[str]  # topology node -> Ray node, one line each
    executor_start_wall_s: float  # starting every executor, once
    startup_s_median: float  # a job's first segment: joining its group, building its model
    restore_s_median: float  # a later segment: joining, restoring the checkpoint
    checkpoint_s_median: float  # a stopped segment's final checkpoint
    decide_wall_s_median: float
    decide_wall_s_max: float
    apply_wall_s_median: float  # carrying a round's decision out (stops wait for checkpoints)
    process_failures: int  # segments whose processes died or failed (jobs resumed)
    # Emulated compute: the share of the jobs' run time their processes fell behind the perf
    # model's pace (the emulating machine's cores could not keep up; 0 when they did).
    emulation_behind_frac: float
    nodes_lost: list[int]
    run_wall_s: float
    interrupted: bool

    @property
    def measured_restore_s(self) -> float | None:
        """What resuming a stopped job cost here (its new segment's set-up and the stopped
        one's final checkpoint), for the simulator's ``restore_s``: else a start-up's, which is
        the same work less the checkpoint; None when nothing was measured."""
        for value in (self.restore_s_median, self.startup_s_median):
            if not np.isnan(value):
                return float(value)
        return None


@dataclass(frozen=True)
class LiveRun:
    """A live run's summary (the simulator's :class:`SimResult`, times in trace seconds), one
    row per job with the simulator's columns plus the live ones (``placements``, ``startup_s``,
    ``restore_s``, ``failures``), the timeline, the policy's telemetry, one row per round
    (decision and apply times), what only a live run measures, one row per measured set-up
    (``setups``), and, when asked, the simulator's prediction of the same run."""

    result: SimResult
    facts: LiveFacts
    jobs: pd.DataFrame
    timeline: pd.DataFrame
    telemetry: pd.DataFrame
    rounds: pd.DataFrame
    prediction: SimRun | None = None
    final_checkpoints: dict[str, bytes] = field(default_factory=dict)
    # One row per measured set-up (a job's start-up, then each restore): what it spanned and
    # how long it took, in wall seconds (:data:`SETUP_COLUMNS`); ``unstall live calibrate``
    # fits a start-up model on them.
    setups: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SETUP_COLUMNS))

    def to_json(self, indent: int | None = 2) -> str:
        """The summary, the live facts, the measured set-ups and the prediction's summary, as
        one JSON document."""
        import json

        body: dict[str, Any] = {"result": self.result.to_dict(), "live": self.facts.to_dict()}
        body["setups"] = self.setups.to_dict("records")
        if self.prediction is not None:
            body["simulated"] = self.prediction.result.to_dict()
        return json.dumps(body, indent=indent, default=_plain)


def run_live(
    trace: Trace | str | Path | None,
    policy: Policy | str,
    *,
    cluster: TopologyConfig | str | Path | None = None,
    address: str | None = None,
    config: LiveConfig | None = None,
    max_jobs: int | None = None,
    model_mix: Mapping[str, float] | None = None,
    duration_gpu: str | None = None,
    user_work: UserWork | None = None,
    train: TrainFn | str | None = None,
    log_dir: str | Path | None = None,
    predict: bool = False,
    keep_final_checkpoints: bool = False,
    log: Callable[[str], None] | None = None,
    on_finish: Callable[[int], None] | None = None,
    on_event: Callable[[JobEvent], None] | None = None,
    on_status: Callable[[LiveStatus], None] | None = None,
) -> LiveRun:
    """Run ``trace`` under ``policy`` on a Ray cluster, for real.

    ``cluster``: the topology (an object, a preset name or a TOML/JSON file) that policies and
    the perf model see; without ``address`` a local Ray emulates its nodes (default: the
    ``tiny`` preset, 4 nodes x 4 GPUs in 2 racks); with ``address`` (or ``RAY_ADDRESS``) its
    nodes are mapped onto the cluster's Ray nodes in order (None: the topology is read from
    Ray). ``config``: how the run is carried out (:class:`LiveConfig`: speedup, compute mode,
    ...). ``max_jobs``, ``model_mix``, ``duration_gpu``: as in :func:`unstall.sim.simulate`.
    ``user_work``: the user's model, data and loss for every job (real compute), instead of each
    job's zoo model: the functions, or their references ``FILE.py:FUNC`` loaded in the
    executors. ``train``: the user's own training loop for every job, ``train(ctx)`` (a
    function, or its reference ``FILE.py:FUNC`` loaded in the executors; real compute; see
    :mod:`unstall.live.train_loop`). ``log_dir``: each job's processes append their course and
    the user's code's output and reports to ``log_dir/<job_id>.log``. ``predict``: also
    simulate the same run (``restore_s``: the config's, else what this run measured) and return
    it as ``prediction``. ``keep_final_checkpoints``: return
    each finished job's final checkpoint (real compute; to compare parameters).
    ``on_event(event)`` hears each job's transitions as they happen (a
    :class:`~unstall.loop.JobEvent`: arrived, started with its placement, preempted, migrated,
    finished, failed; its time in trace seconds).
    ``on_status(status)`` is handed the run as it stands a few times a second (a
    :class:`~unstall.live.status.LiveStatus`: the running jobs with their placements and
    progress, the queue, jobs finished, GPUs busy; what ``unstall live run`` draws as a table).
    ``log(text)`` hears what happens (nodes mapped, failures); ``on_finish(n)`` is called as jobs
    finish (progress bars). A Ctrl-C stops every job's
    processes and raises :class:`~unstall.live.backend.LiveInterrupted` with what finished.
    """
    from unstall.ray_connect import cluster_address, connect_ray

    config = config if config is not None else LiveConfig()
    check(isinstance(config, LiveConfig), OWNER, "config", f"must be a LiveConfig, got {config!r}")
    policy = resolve_policy(policy, owner=OWNER)
    trace = resolve_trace(trace, owner=OWNER)
    topology = None if cluster is None else resolve_cluster(cluster, owner=OWNER)
    joined = cluster_address(address)
    say = log or (lambda _text: None)
    jobs_code = _jobs_code(user_work, train, log_dir, config)
    local: LocalRayCluster | None = None
    started = time.monotonic()
    if joined is None:
        topology = topology if topology is not None else resolve_cluster(DEFAULT_CLUSTER)
    check_number(OWNER, "max_jobs", max_jobs, whole=True, optional=True, wanted="a whole number")
    check(max_jobs is None or max_jobs > 0, OWNER, "max_jobs", "must be > 0")
    plan = partial(
        plan_jobs,
        trace,
        config=config,
        max_jobs=max_jobs,
        model_mix=model_mix,
        duration_gpu=duration_gpu,
        code=jobs_code,
        log=say,
    )
    # Whatever the run would refuse is refused now, before a Ray process starts; joined to a
    # cluster without a topology, as soon as Ray has said what the cluster is.
    planned = plan(topology) if topology is not None else None
    if joined is None:
        import ray

        if ray.is_initialized():
            raise ConfigError(
                OWNER,
                "address",
                "Ray already runs in this process: give its address, or let run_live start "
                "the local cluster",
            )
        assert topology is not None
        say(f"starting a local Ray cluster of {topology.n_nodes} nodes on 127.0.0.1")
        local = LocalRayCluster(topology, config.slot_resource)
    try:
        connected = connect_ray(local.address if local is not None else joined)
        try:
            import ray

            live = discover(
                ray.nodes(),
                topology=topology,
                slot_resource=config.slot_resource,
                loopback=local is not None or _is_loopback(joined),
            )
            for line in live.mapping():
                say(line)
            return _run_on(
                live,
                planned if planned is not None else plan(live.topology),
                policy,
                config=config,
                address=joined,
                duration_gpu=duration_gpu,
                predict=predict,
                keep_final=keep_final_checkpoints,
                log=say,
                on_finish=on_finish,
                on_event=on_event,
                on_status=on_status,
                started=started,
            )
        finally:
            if connected:
                import ray

                ray.shutdown()
    finally:
        if local is not None:
            local.shutdown()


def _is_loopback(address: str | None) -> bool:
    from unstall.ray_connect import is_loopback

    return address is not None and is_loopback(address)


@dataclass(frozen=True)
class PlannedJobs:
    """A live run's jobs before anything starts: the perf model they run at, the jobs as the
    simulator keeps them (those larger than the cluster set aside) and what each trains."""

    speed: PerfSpeedModel
    prepared: RunJobs
    works: dict[str, JobWork]


REJECTED_NAMED = 20  # rejected jobs named in the log; the per-job output lists them all


def plan_jobs(
    trace: Trace,
    topology: TopologyConfig,
    *,
    config: LiveConfig,
    max_jobs: int | None,
    model_mix: Mapping[str, float] | None,
    duration_gpu: str | None,
    code: JobCode,
    log: Callable[[str], None],
) -> PlannedJobs:
    """The jobs of a live run of ``trace`` on ``topology``, exactly as the simulator would run
    them; what the run refuses is refused here, naming the job (an unknown model or GPU type,
    a trace without jobs, no job that fits), and jobs larger than the cluster are named in
    ``log`` and set aside (outcome ``rejected``, as in :func:`unstall.sim.simulate`)."""
    check(
        duration_gpu is None
        or (isinstance(duration_gpu, str) and duration_gpu.lower() in DEVICE_PRESETS),
        OWNER,
        "duration_gpu",
        f"unknown GPU type {duration_gpu!r}; known: {sorted(DEVICE_PRESETS)}",
    )
    check_trace_models(trace, max_jobs, {})  # a typo in a trace, named with its job
    speed, per_job = speed_model(trace, topology, {}, duration_gpu)
    prepared = run_jobs(
        trace,
        topology,
        speed,
        max_jobs=max_jobs,
        model_mix=model_mix,
        seed=config.seed,
        job_duration_gpus=per_job,
    )
    check(len(prepared.fits) > 0, OWNER, "trace", f"{prepared.trace.source} holds no jobs")
    arrays = prepared.trace.arrays()
    big = [
        f"{job_id} ({gpus} GPUs)"
        for job_id, gpus in zip(
            arrays.job_id[~prepared.fits], arrays.num_gpus[~prepared.fits], strict=True
        )
    ]
    named = ", ".join(big[:REJECTED_NAMED]) + (
        f" and {len(big) - REJECTED_NAMED} more" if len(big) > REJECTED_NAMED else ""
    )
    check(
        bool(prepared.jobs),
        OWNER,
        "trace",
        f"no job fits the cluster's {topology.n_gpus} GPUs ({named}): nothing to run",
    )
    if big:
        log(
            f"warning: {len(big)} {'job needs' if len(big) == 1 else 'jobs need'} more than "
            f"the cluster's {topology.n_gpus} GPUs and {'is' if len(big) == 1 else 'are'} "
            f"rejected (outcome 'rejected' in the per-job output): {named}"
        )
    works = {
        job.job_id: _work(job.job_id, job.model, job.work_iters, config, code)
        for job in prepared.jobs
    }
    return PlannedJobs(speed=speed, prepared=prepared, works=works)


def _run_on(
    live: LiveCluster,
    planned: PlannedJobs,
    policy: Policy,
    *,
    config: LiveConfig,
    address: str | None,
    duration_gpu: str | None,
    predict: bool,
    keep_final: bool,
    log: Callable[[str], None],
    started: float,
    on_finish: Callable[[int], None] | None = None,
    on_event: Callable[[JobEvent], None] | None = None,
    on_status: Callable[[LiveStatus], None] | None = None,
) -> LiveRun:
    topology = live.topology
    speed, prepared, works = planned.speed, planned.prepared, planned.works
    trace, jobs = prepared.trace, prepared.jobs
    backend = LiveBackend(
        cluster=live,
        speed=speed,
        policy=policy,
        jobs=jobs,
        works=works,
        config=config,
        log=log,
        on_finish=on_finish,
        on_event=on_event,
        on_status=on_status,
    )
    try:
        backend.start_executors()
        log(f"{len(backend.executors)} executors up in {backend.executor_start_wall_s:.1f} s")
        try:
            outcome = backend.run()
        except LiveInterrupted as stop:
            # Jobs still waiting have waited until the Ctrl-C (trace seconds since the start).
            until = backend.now()
            stop.run = _results(
                stop.outcome, live, prepared, policy, config, address, started, until
            )
            raise
        finals: dict[str, bytes] = {}
        if keep_final and not config.emulated:
            for job in jobs:
                blob = backend.final_checkpoint(job.job_id)
                if blob is not None:
                    finals[job.job_id] = blob
    finally:
        backend.shutdown()
    run = _results(
        outcome, live, prepared, policy, config, address, started, run_end(outcome.engine.timeline)
    )
    prediction = None
    if predict:
        prediction = predict_run(
            run.jobs,
            run.facts.measured_restore_s,
            run.facts.startup_s_median,
            trace,
            topology,
            policy,
            config,
            duration_gpu,
        )
    return LiveRun(
        result=run.result,
        facts=run.facts,
        jobs=run.jobs,
        timeline=run.timeline,
        telemetry=run.telemetry,
        rounds=run.rounds,
        prediction=prediction,
        final_checkpoints=finals,
        setups=run.setups,
    )


@dataclass(frozen=True, kw_only=True)
class JobCode:
    """The user's code for every job (None: the zoo models) and where jobs' logs go."""

    user: UserWork | None = None
    train: TrainFn | str | None = None
    log_dir: Path | None = None


def _jobs_code(
    user_work: UserWork | None,
    train: TrainFn | str | None,
    log_dir: str | Path | None,
    config: LiveConfig,
) -> JobCode:
    """The run's user code, checked: real compute, one kind of it at most. Paths are made
    absolute here: the executors do not run in this process's folder."""
    if user_work is not None and train is not None:
        raise ConfigError(OWNER, "train", "give train or user_work, not both")
    for name, given in (("user_work", user_work), ("train", train)):
        if given is not None and config.emulated:
            raise ConfigError(OWNER, name, "needs real compute (config.compute='real')")
    if isinstance(train, str):
        train = absolute_reference(train)
    elif train is not None and not callable(train):
        raise ConfigError(OWNER, "train", f"want a function or FILE.py:FUNC, got {train!r}")
    if user_work is not None:
        user_work = _absolute_user_work(user_work)
    folder = None if log_dir is None else Path(log_dir).resolve()
    return JobCode(user=user_work, train=train, log_dir=folder)


def _absolute_user_work(user: UserWork) -> UserWork:
    """The user's model, data and loss with each reference's file made absolute (the
    executors load them, in folders of their own); functions and loss names as they are."""

    def absolute(given: Any, what: str) -> Any:
        if isinstance(given, str):
            if what == "loss function" and not is_reference(given):
                return given  # a built-in loss's name, resolved in the executors
            return absolute_reference(given, what)
        if not callable(given):
            raise ConfigError(
                OWNER, "user_work", f"{what}: want a function or FILE.py:FUNC, got {given!r}"
            )
        return given

    return UserWork(
        model_fn=absolute(user.model_fn, "model function"),
        data_fn=absolute(user.data_fn, "data function"),
        loss=absolute(user.loss, "loss function"),
    )


def _work(job_id: str, model: str, work_iters: float, config: LiveConfig, code: JobCode) -> JobWork:
    """What a job's processes train: emulated, the perf model's iterations; real, the job's
    work divided by the speedup, in whole iterations."""
    iterations = (
        work_iters if config.emulated else float(max(1, round(work_iters / config.speedup)))
    )
    return JobWork(
        job_id=job_id,
        model=model,
        iterations=iterations,
        emulated=config.emulated,
        batch_size=config.batch_size,
        image_size=config.image_size,
        lr=config.lr,
        seed=config.seed,
        user=code.user,
        train=code.train,
        log_path=(
            None if code.log_dir is None else str(code.log_dir / job_file_name(job_id, ".log"))
        ),
    )


def _behind_frac(jobs: list[Job], records: list[JobRecord]) -> float:
    """Trace seconds the jobs' processes fell behind the emulated pace, over the trace
    seconds they ran (their GPU-less 'service': attained GPU-seconds over GPUs)."""
    ran = sum(job.attained_gpu_s / job.num_gpus for job in jobs)
    behind = sum(record.behind_s for record in records)
    return behind / ran if ran > 0 else 0.0


def _plain(value: object) -> object:
    """numpy scalars in the set-up rows, as JSON numbers."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON: {type(value).__name__}")


def setup_table(
    jobs: list[Job], records: list[JobRecord], node_rack: tuple[int, ...]
) -> pd.DataFrame:
    """A row per measured set-up of each job: ``kind`` (startup or restore), when its segment
    began (trace seconds), the placement it was for and what that spans (GPUs, nodes, racks),
    its wall seconds."""
    rows = []
    for job, record in zip(jobs, records, strict=True):
        for placement, wall_s, restoring, began_s in record.setups:
            nodes = {node for node, _ in placement}
            rows.append(
                (
                    job.job_id,
                    job.model,
                    "restore" if restoring else "startup",
                    float(began_s),
                    placement_text(placement),
                    sum(gpus for _, gpus in placement),
                    len(nodes),
                    len({node_rack[node] for node in nodes}),
                    float(wall_s),
                )
            )
    return pd.DataFrame(rows, columns=list(SETUP_COLUMNS))


def _median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def _results(
    outcome: LiveOutcome,
    live: LiveCluster,
    prepared: RunJobs,
    policy: Policy,
    config: LiveConfig,
    address: str | None,
    started: float,
    until: float,
) -> LiveRun:
    topology = live.topology
    wall = time.monotonic() - started
    result = summarise(
        outcome.engine,
        policy=policy.name,
        cluster=topology.name,
        trace=Path(prepared.trace.source).name,
        congestion="none",
        seed=config.seed,
        total_gpus=topology.n_gpus,
        jobs_rejected=int((~prepared.fits).sum()),
        wall_s=wall,
        node_type=topology.node_device,
    )
    table = job_table(outcome.engine.jobs, gpu_type_of(topology), until=until)
    records = [outcome.records[job.job_id] for job in outcome.engine.jobs]
    table["placements"] = [" ".join(r.placements) for r in records]
    table["start_progress"] = [" ".join(f"{p:.3f}" for p in r.start_progress) for r in records]
    table["startup_s"] = [r.startup_s for r in records]
    table["restore_s"] = [_median(r.restore_s) for r in records]
    ran = outcome.engine.jobs
    table["failures"] = np.array([job.failures for job in ran], dtype=np.int64)
    table.loc[[job.state == JobState.FAILED for job in ran], "outcome"] = "failed"
    table["error"] = [job.error for job in ran]
    table["behind_s"] = [r.behind_s for r in records]
    jobs = prepared.with_rejected(table)
    rounds = pd.DataFrame(
        [r.__dict__ for r in outcome.rounds],
        columns=["time_s", "decide_wall_s", "apply_wall_s", "starts", "preemptions", "migrations"],
    )
    decide = rounds["decide_wall_s"].to_numpy()
    facts = LiveFacts(
        compute=config.compute,
        speedup=config.speedup,
        address=address,
        nodes=live.mapping(),
        executor_start_wall_s=outcome.executor_start_wall_s,
        startup_s_median=_median([r.startup_s for r in records if not np.isnan(r.startup_s)]),
        restore_s_median=_median([s for r in records for s in r.restore_s]),
        checkpoint_s_median=_median([s for r in records for s in r.checkpoint_s]),
        decide_wall_s_median=float(np.median(decide)) if len(decide) else 0.0,
        decide_wall_s_max=float(decide.max()) if len(decide) else 0.0,
        apply_wall_s_median=float(rounds["apply_wall_s"].median()) if len(rounds) else 0.0,
        process_failures=outcome.failures,
        emulation_behind_frac=_behind_frac(outcome.engine.jobs, records),
        nodes_lost=outcome.nodes_lost,
        run_wall_s=wall,
        interrupted=outcome.interrupted,
    )
    return LiveRun(
        result=result,
        facts=facts,
        jobs=jobs,
        timeline=timeline_table(outcome.engine.timeline),
        telemetry=pd.DataFrame(
            outcome.engine.timeline.telemetry, columns=["time_s", "name", "value"]
        ),
        rounds=rounds,
        setups=setup_table(outcome.engine.jobs, records, topology.node_rack),
    )


__all__ = ["LiveFacts", "LiveRun", "UnstallError", "run_live"]
