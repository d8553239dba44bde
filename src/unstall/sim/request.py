"""One simulated run as the user asked for it, by names and files: what ``--json`` saves beside
a result, so that the run can be repeated, and what :func:`simulate_request` resolves and runs.

Each name is resolved by its own part: the policy by :func:`unstall.sched.resolve_policy` (a
registered name or ``FILE.py:Class``, options as ``KEY=VALUE`` text typed by its options
dataclass), the cluster by :func:`unstall.net.resolve_cluster`, the congestion by
:func:`unstall.sim.congestion.resolve_congestion`; job profiles are JobProfile JSON files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from unstall.loop.failures import PolicyCrashError
from unstall.net.topology_files import resolve_cluster
from unstall.sched.resolve import resolve_policy
from unstall.sim.congestion import resolve_congestion
from unstall.sim.run import SimRun, simulate
from unstall.sim.startup import resolve_startup_model
from unstall.traces.schema import Trace
from unstall.workload.profiles import JobProfile

REQUEST = "SimRequest"  # what errors about the request's fields are reported against


@dataclass(frozen=True, kw_only=True)
class SimRequest:
    """One simulated run as the user asked for it: names, file paths and option texts, plus the
    plain settings. Saved beside each result, so that the run can be repeated."""

    policy: str = "fifo"
    # The policy's own knobs as (field, text) pairs, e.g. (("order", "las"),) for dally.
    policy_options: tuple[tuple[str, str], ...] = ()
    # The name the result carries (None: the policy's own): a comparison that runs one policy
    # twice, with other options, tells the runs apart by it.
    label: str | None = None
    cluster: str = "small"  # a preset name or a TOML/JSON topology file
    congestion: str = "none"  # a level or a CSV schedule file (time_s,fraction)
    seed: int = 0
    # Checkpoint + restore paid by each preemption and migration (None: the start-up model's,
    # else 60 s).
    restore_s: float | None = 60.0
    # What each start costs by what it spans (unstall.sim.startup): "default" (the package's
    # fitted model), a model file, or None for the fixed times (start-up 0, restore_s).
    startup_model: str | None = None
    # A live run's trace seconds per wall second, by which the model's wall seconds are scaled
    # (1: the cluster's own time).
    speedup: float = 1.0
    tick_s: float | None = None  # None: the policy's own re-scheduling period, if it has one
    # Share of each model among jobs whose trace names none (Philly has no model column).
    model_mix: tuple[tuple[str, float], ...] | None = None
    max_jobs: int | None = None  # simulate only the first N jobs of the trace
    # JobProfile JSON files (from `unstall profile run`): jobs of a profiled model's name run at
    # its measured figures instead of the zoo's estimates (a zoo name is overridden).
    job_profiles: tuple[str, ...] = ()
    # The GPU type the trace's durations were measured on (None: the trace's gpu_type column,
    # else v100; see unstall.sim.duration_gpu).
    duration_gpu: str | None = None


def read_job_profiles(paths: Sequence[str | Path]) -> tuple[JobProfile, ...]:
    """The JobProfile JSON files, read (each error names its file)."""
    return tuple(JobProfile.from_json(Path(path)) for path in paths)


def simulate_request(
    request: SimRequest, trace: Trace, *, on_finish: Callable[[int], None] | None = None
) -> SimRun:
    """Resolve every name and file of ``request``, then simulate ``trace``. A policy that
    raises is named as the user wrote it (``badpol.py:Crash``), not by the name it gives
    itself, which may be the same for two classes compared side by side."""
    cluster = resolve_cluster(request.cluster, owner=REQUEST, field="cluster")
    policy = resolve_policy(request.policy, request.policy_options, owner=REQUEST)
    congestion = resolve_congestion(request.congestion, owner=REQUEST, field="congestion")
    profiles = read_job_profiles(request.job_profiles)
    model = resolve_startup_model(request.startup_model, owner=REQUEST, field="startup_model")
    if model is not None:
        model = model.for_speedup(request.speedup)
    try:
        run = simulate(
            trace,
            cluster,
            policy,
            congestion=congestion,
            seed=request.seed,
            restore_s=request.restore_s,
            tick_s=request.tick_s,
            model_mix=None if request.model_mix is None else dict(request.model_mix),
            max_jobs=request.max_jobs,
            job_profiles=profiles,
            duration_gpu=request.duration_gpu,
            on_finish=on_finish,
            startup_model=model,
        )
    except PolicyCrashError as exc:
        raise PolicyCrashError(request.label or request.policy, exc.error) from exc.__cause__
    if request.label is None:
        return run
    return replace(run, result=replace(run.result, policy=request.label))
