"""One simulated run, end to end: trace, cluster, policy and settings -> results.

:func:`simulate` takes objects (a :class:`~unstall.traces.Trace`, a
:class:`~unstall.net.TopologyConfig`, a :class:`~unstall.sched.Policy`, a congestion, measured
:class:`~unstall.workload.JobProfile` objects) or their names, each resolved by its own part
(:mod:`unstall.sim.arguments`); :mod:`unstall.sim.request` runs a request that holds only names
and files, as a command line gives them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path

import numpy as np
import pandas as pd

from unstall.config import check, check_non_negative, check_number
from unstall.errors import did_you_mean
from unstall.loop.jobs import Job
from unstall.loop.timeline import Timeline
from unstall.net.hardware import DEVICE_PRESETS
from unstall.net.topology import TopologyConfig
from unstall.sched.base import ClusterLayout, Placement, Policy, policy_capabilities
from unstall.sim.arguments import resolve_arguments
from unstall.sim.congestion import NO_CONGESTION, Congestion
from unstall.sim.duration_gpu import duration_gpus
from unstall.sim.engine import Engine, EngineSettings
from unstall.sim.jobs import build_jobs
from unstall.sim.metrics import SimResult, job_table, summarise, timeline_table, with_rejected
from unstall.sim.perf_speed import PerfSpeedModel
from unstall.sim.speed import SpeedModel
from unstall.sim.startup import SetupCharges, StartupModel, resolve_startup_model
from unstall.traces.models import assign_models, normalised_mix
from unstall.traces.schema import Trace, TraceError
from unstall.workload.job_specs import JobPerfSpec, known_models
from unstall.workload.profiles import JobProfile

OWNER = "simulate"  # what argument errors are reported against
# Checkpoint + restore charged per preemption and migration without a start-up model.
DEFAULT_RESTORE_S = 60.0


@dataclass(frozen=True)
class SimRun:
    """A run's summary, its per-job table (a row per job of the trace, rejected ones too, each
    with its ``outcome``: finished, unfinished or rejected), its timeline (step functions over
    time) and what the policy reported over time (``time_s, name, value``; e.g. Dally's tuned
    timer factor)."""

    result: SimResult
    jobs: pd.DataFrame
    timeline: pd.DataFrame
    telemetry: pd.DataFrame


def layout_of(topology: TopologyConfig) -> ClusterLayout:
    """The cluster's shape as policies see it: each node's rack, GPU count and GPU type."""
    return ClusterLayout.from_nodes(
        node_rack=topology.node_rack,
        node_gpus=topology.node_gpus,
        node_type=topology.node_device,
    )


def gpu_type_of(topology: TopologyConfig) -> Callable[[Placement], str]:
    """Names the GPU type(s) of a placement: ``v100``, or ``k80+v100`` over two types."""
    devices = topology.node_device

    def label(placement: Placement) -> str:
        return "+".join(sorted({devices[node] for node, _ in placement}))

    return label


def profiled_specs(profiles: Sequence[JobProfile]) -> dict[str, JobPerfSpec]:
    """The perf specs of measured job profiles by model name (one profile a model)."""
    specs: dict[str, JobPerfSpec] = {}
    check(
        isinstance(profiles, Sequence) and not isinstance(profiles, str),
        OWNER,
        "job_profiles",
        f"must be a sequence of JobProfile (e.g. [JobProfile.load(path)]), got {profiles!r}",
    )
    for profile in profiles:
        check(
            isinstance(profile, JobProfile),
            OWNER,
            "job_profiles",
            f"must hold JobProfile objects, got {type(profile).__name__} {profile!r}: "
            "JobProfile.load(path) reads a saved one",
        )
        check(
            profile.model not in specs,
            OWNER,
            "job_profiles",
            f"a second profile of model {profile.model!r}",
        )
        # The measured compute time stands; the device only names where it was measured.
        specs[profile.model] = profile.to_perf_spec()
    return specs


def prepare_trace(
    trace: Trace, *, max_jobs: int | None, model_mix: Mapping[str, float] | None, seed: int
) -> Trace:
    """The jobs to simulate: the first ``max_jobs``, every job with a model."""
    if max_jobs is not None and max_jobs < len(trace):
        trace = trace.with_jobs(trace.jobs.iloc[:max_jobs].reset_index(drop=True))
    if trace.jobs["model"].isna().any():
        trace = assign_models(trace, dict(model_mix) if model_mix else None, seed=seed)
    return trace


def _check_settings(
    *,
    seed: int,
    restore_s: float | None,
    startup_s: float | None,
    tick_s: float | None,
    model_mix: Mapping[str, float] | None,
    max_jobs: int | None,
) -> None:
    # Types first: a string there failed as a bare TypeError ("'>' not supported"), and a
    # fractional seed or max_jobs ran (or failed deep in pandas) instead of being named.
    check_number(OWNER, "seed", seed, whole=True)
    check_number(OWNER, "max_jobs", max_jobs, whole=True, optional=True, wanted="a whole number")
    check_number(OWNER, "restore_s", restore_s, optional=True, wanted="a number of seconds")
    check_number(OWNER, "tick_s", tick_s, optional=True, wanted="a number of seconds")
    check_number(OWNER, "startup_s", startup_s, optional=True, wanted="a number of seconds")
    check_non_negative(
        OWNER,
        restore_s=0.0 if restore_s is None else restore_s,
        startup_s=0.0 if startup_s is None else startup_s,
        seed=seed,
    )
    check(tick_s is None or tick_s > 0, OWNER, "tick_s", "must be > 0")
    check(max_jobs is None or max_jobs > 0, OWNER, "max_jobs", "must be > 0")
    if model_mix is not None:
        check(
            isinstance(model_mix, Mapping),
            OWNER,
            "model_mix",
            f"must map model names to shares (e.g. {{'resnet50': 1.0}}), got {model_mix!r}",
        )
        normalised_mix(OWNER, "model_mix", model_mix)


def _check_mix_names(model_mix: Mapping[str, float] | None, profiled: Mapping[str, object]) -> None:
    """Every name in the mix must be a model the run knows, also when the trace names its own
    models and the mix goes unused: a typo there would otherwise pass without a word."""
    known = {*known_models(), *profiled}
    for name in model_mix or {}:
        check(
            name in known,
            OWNER,
            "model_mix",
            f"unknown model {name!r}{did_you_mean(name, known)}; known: {sorted(known)}, or a "
            "measured one given as a "
            "job profile (a JobProfile in job_profiles)",
        )


def check_trace_models(trace: Trace, max_jobs: int | None, profiled: Mapping[str, object]) -> None:
    """Every model the simulated jobs name must be one the run knows: a typo in a trace is
    named with the trace's file and its first job that has it."""
    jobs = trace.jobs.iloc[:max_jobs]
    known = {*known_models(), *profiled}
    bad = (jobs["model"].notna() & ~jobs["model"].isin(known)).to_numpy(dtype=bool)
    if not bad.any():
        return
    first = int(np.flatnonzero(bad)[0])
    model = jobs["model"].iloc[first]
    named = int((jobs["model"] == model).sum())
    others = f" (as do {named - 1} more jobs)" if named > 1 else ""
    raise TraceError(
        trace.source,
        f"job {jobs['job_id'].iloc[first]!r} names an unknown model {model!r}"
        f"{did_you_mean(model, known)}{others}; known: "
        f"{sorted(known)}, or a measured one given as a job profile (a JobProfile in "
        "job_profiles)",
        field="model",
    )


def simulate(
    trace: Trace | str | PathLike[str],
    cluster: TopologyConfig | str | PathLike[str],
    policy: Policy | str,
    *,
    congestion: Congestion | str = NO_CONGESTION,
    seed: int = 0,
    restore_s: float | None = None,
    startup_s: float | None = None,
    tick_s: float | None = None,
    model_mix: Mapping[str, float] | None = None,
    max_jobs: int | None = None,
    job_profiles: Sequence[JobProfile] = (),
    duration_gpu: str | None = None,
    on_finish: Callable[[int], None] | None = None,
    job_startup_s: Mapping[str, float] | None = None,
    startup_model: StartupModel | str | PathLike[str] | None = None,
) -> SimRun:
    """Simulate ``trace`` on ``cluster`` under ``policy``.

    ``congestion``: background traffic on NICs and uplinks (a level, e.g.
    ``congestion_level("medium")``, or a :class:`CongestionSchedule`); ``seed`` seeds it, the
    models given to jobs whose trace names none (drawn from ``model_mix``, default uniform over
    the zoo) and the policy's random generator. ``startup_model``: what each start costs, by
    what its placement spans and the job's model (:class:`~unstall.sim.startup.StartupModel`,
    ``"default"`` for the package's, fitted on live runs, or a model file; scale it to a live
    run's speedup with ``model.for_speedup(k)``); None (the default): the fixed times below.
    ``restore_s``: checkpoint + restore paid by each preemption and migration (None: the
    model's, else 60 s); ``startup_s``: set-up paid by each job's first start (None: the
    model's, else 0); ``job_startup_s``: ``{job_id: seconds}``, the set-up of the jobs named,
    instead of the others (a live run's prediction: each job's own, as measured).
    ``tick_s``: extra scheduling rounds while jobs wait (None: the policy's own ``tick_s``, if
    it has one). ``max_jobs``: only the first N jobs.
    ``job_profiles``: measured jobs; jobs of a profiled model's name run at its measured figures
    instead of the zoo's estimates. ``duration_gpu``: the GPU type on which the trace's durations
    are run times at the most consolidated placement, for every job (default: each job's
    ``gpu_type`` in the trace, else ``v100``: :func:`~unstall.sim.duration_gpu.duration_gpus`),
    so that a slower cluster makes the same jobs slower; a job runs at the speed of the slowest
    GPU type of its placement. ``on_finish(n)`` is called as
    jobs finish (progress bars).
    Jobs larger than the whole cluster can never start: they are not simulated, counted in
    ``result.jobs_rejected`` and listed in ``jobs`` with the outcome "rejected".
    ``trace``, ``cluster``, ``policy`` and ``congestion`` may be named as on the command line:
    a trace file's path, a preset (``"small"``) or topology file, a registered policy
    (``"fifo"``) or ``"FILE.py:Class"``, a level (``"medium"``) or ``.csv`` schedule. A value of
    another type (a DataFrame, a policy class, a number) is an
    :class:`~unstall.errors.ArgumentTypeError` (a TypeError) naming the argument.
    """
    trace, cluster, policy, congestion = resolve_arguments(trace, cluster, policy, congestion)
    model = resolve_startup_model(startup_model, owner=OWNER, field="startup_model")
    _check_settings(
        seed=seed,
        restore_s=restore_s,
        startup_s=startup_s,
        tick_s=tick_s,
        model_mix=model_mix,
        max_jobs=max_jobs,
    )
    if job_startup_s is not None:
        check(
            isinstance(job_startup_s, Mapping),
            OWNER,
            "job_startup_s",
            f"must be a mapping of job id to seconds, got {type(job_startup_s).__name__}",
        )
        for job_id, seconds in job_startup_s.items():
            field = f"job_startup_s[{job_id!r}]"
            check_number(OWNER, field, seconds, wanted="a number of seconds")
            check(seconds >= 0, OWNER, field, f"must be >= 0, got {seconds!r}")
    check(
        on_finish is None or callable(on_finish),
        OWNER,
        "on_finish",
        f"must be a function of the number of jobs finished, got {on_finish!r}",
    )
    check(
        duration_gpu is None
        or (isinstance(duration_gpu, str) and duration_gpu.lower() in DEVICE_PRESETS),
        OWNER,
        "duration_gpu",
        f"unknown GPU type {duration_gpu!r}; known: {sorted(DEVICE_PRESETS)}",
    )
    specs = profiled_specs(job_profiles)
    _check_mix_names(model_mix, specs)
    check_trace_models(trace, max_jobs, specs)
    speed, per_job = speed_model(trace, cluster, specs, duration_gpu)
    return simulate_with_speed(
        trace,
        cluster,
        policy,
        speed,
        congestion=congestion,
        seed=seed,
        restore_s=restore_s,
        startup_s=startup_s,
        tick_s=tick_s,
        model_mix=model_mix,
        max_jobs=max_jobs,
        on_finish=on_finish,
        job_duration_gpus=per_job,
        job_startup_s=job_startup_s,
        startup_model=model,
    )


def run_end(timeline: Timeline) -> float:
    """When a run ended: its last round (0 for a run without one)."""
    return float(timeline.time_s[-1]) if len(timeline.time_s) else 0.0


def speed_model(
    trace: Trace,
    cluster: TopologyConfig,
    specs: Mapping[str, JobPerfSpec],
    duration_gpu: str | None,
) -> tuple[PerfSpeedModel, tuple[str, ...] | None]:
    """The perf model of a run of ``trace`` on ``cluster`` (measured ``specs`` beside the zoo's)
    and each job's duration GPU where the trace's jobs name different ones: what the simulator
    and the live backend both run jobs at."""
    reference = duration_gpus(trace, duration_gpu)
    return PerfSpeedModel(cluster, specs, duration_gpu=reference.gpu), reference.per_job


@dataclass(frozen=True)
class RunJobs:
    """The jobs of one run: the trace as run (first ``max_jobs``, models assigned), the jobs
    that fit the cluster as the engine keeps them, and which of the trace's jobs those are."""

    trace: Trace
    jobs: list[Job]
    fits: np.ndarray  # per job of ``trace``: whether it fits the cluster
    models: np.ndarray  # per job of ``trace``: its model

    def with_rejected(self, simulated: pd.DataFrame) -> pd.DataFrame:
        """``simulated`` (a row per job that fit) with a row per rejected job, in trace order."""
        arrays = self.trace.arrays()
        fits, models = self.fits, self.models
        rejected = pd.DataFrame(
            {
                "job_id": arrays.job_id[~fits].astype(str),
                "model": models[~fits],
                "num_gpus": arrays.num_gpus[~fits].astype(np.int64),
                "submit_s": arrays.submit_s[~fits].astype(np.float64),
                "duration_s": arrays.duration_s[~fits].astype(np.float64),
            }
        )
        positions = np.concatenate([np.flatnonzero(fits), np.flatnonzero(~fits)])
        return with_rejected(simulated, positions, rejected)


def run_jobs(
    trace: Trace,
    cluster: TopologyConfig,
    speed: SpeedModel,
    *,
    max_jobs: int | None,
    model_mix: Mapping[str, float] | None,
    seed: int,
    job_duration_gpus: Sequence[str] | None,
) -> RunJobs:
    """The jobs a run of ``trace`` on ``cluster`` simulates (or runs live): the first
    ``max_jobs`` with models, those larger than the cluster set aside."""
    trace = prepare_trace(trace, max_jobs=max_jobs, model_mix=model_mix, seed=seed)
    arrays = trace.arrays()
    fits = arrays.num_gpus <= cluster.n_gpus
    # Every job has a model after prepare_trace; only a trace without jobs has no model column.
    models = arrays.model if arrays.model is not None else np.empty(len(arrays), dtype=object)
    # Python lists: the engine reads these values one at a time, where numpy scalars are slow.
    jobs = build_jobs(
        job_ids=arrays.job_id[fits].tolist(),
        submit_s=arrays.submit_s[fits].tolist(),
        num_gpus=arrays.num_gpus[fits].tolist(),
        duration_s=arrays.duration_s[fits].tolist(),
        models=models[fits].tolist(),
        speed=speed,
        duration_gpus=None
        if job_duration_gpus is None
        else np.asarray(job_duration_gpus[: len(arrays)], dtype=object)[fits].tolist(),
    )
    return RunJobs(trace=trace, jobs=jobs, fits=fits, models=models)


def simulate_with_speed(
    trace: Trace,
    cluster: TopologyConfig,
    policy: Policy,
    speed: SpeedModel,
    *,
    congestion: Congestion,
    seed: int,
    restore_s: float | None,
    tick_s: float | None,
    model_mix: Mapping[str, float] | None,
    max_jobs: int | None,
    on_finish: Callable[[int], None] | None,
    job_duration_gpus: Sequence[str] | None = None,
    startup_s: float | None = None,
    job_startup_s: Mapping[str, float] | None = None,
    startup_model: StartupModel | None = None,
) -> SimRun:
    """:func:`simulate` on a given speed model: the tests compare the perf model's fast paths
    with a speed model that lacks them, on the same run. ``job_duration_gpus``: each job's
    duration GPU in trace order, where the trace's jobs name different ones."""
    prepared = run_jobs(
        trace,
        cluster,
        speed,
        max_jobs=max_jobs,
        model_mix=model_mix,
        seed=seed,
        job_duration_gpus=job_duration_gpus,
    )
    trace, jobs, fits = prepared.trace, prepared.jobs, prepared.fits
    if job_startup_s:
        for job in jobs:
            own = job_startup_s.get(job.job_id)
            if own is not None:
                job.startup_s = float(own)
    arrays = trace.arrays()
    horizon = float(arrays.submit_s.max() + arrays.duration_s.max()) if len(arrays) else 0.0
    tick = tick_s if tick_s is not None else policy_capabilities(policy).tick_s
    engine = Engine(
        layout=layout_of(cluster),
        speed=speed,
        policy=policy,
        jobs=jobs,
        congestion=congestion.schedule(horizon, seed),
        settings=EngineSettings(
            restore_s=DEFAULT_RESTORE_S if restore_s is None else restore_s,
            startup_s=0.0 if startup_s is None else startup_s,
            tick_s=tick,
            seed=seed,
            charges=None
            if startup_model is None
            else SetupCharges(
                model=startup_model,
                node_rack=cluster.node_rack,
                startup_s=startup_s,
                restore_s=restore_s,
            ),
        ),
    )
    started = time.perf_counter()
    outcome = engine.run(on_finish)
    wall = time.perf_counter() - started
    result = summarise(
        outcome,
        policy=policy.name,
        cluster=cluster.name,
        trace=Path(trace.source).name,
        congestion=congestion.name,
        seed=seed,
        total_gpus=cluster.n_gpus,
        jobs_rejected=int((~fits).sum()),
        wall_s=wall,
        node_type=cluster.node_device,
    )
    telemetry = pd.DataFrame(outcome.timeline.telemetry, columns=["time_s", "name", "value"])
    return SimRun(
        result=result,
        jobs=prepared.with_rejected(
            job_table(outcome.jobs, gpu_type_of(cluster), until=run_end(outcome.timeline))
        ),
        timeline=timeline_table(outcome.timeline),
        telemetry=telemetry,
    )
