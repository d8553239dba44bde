"""One simulated run, end to end: config -> cluster, speed model, policy, jobs -> results."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from unstall.config import check, check_non_negative
from unstall.net.topology import TOPOLOGY_PRESETS, TopologyConfig, load_topology, topology_preset
from unstall.sched.base import ClusterLayout, Policy
from unstall.sched.registry import POLICIES, make_policy
from unstall.sim.congestion import LEVELS, CongestionSchedule, load_schedule, preset
from unstall.sim.engine import Engine, EngineSettings, build_jobs
from unstall.sim.metrics import SimResult, job_table, summarise, timeline_table
from unstall.sim.perf_speed import PerfSpeedModel
from unstall.traces import Trace, assign_models
from unstall.traces.models import normalised_mix
from unstall.workload.perf import JobPerfSpec
from unstall.workload.profiles import JobProfile


@dataclass(frozen=True, kw_only=True)
class SimConfig:
    """Everything that decides a run besides the trace itself."""

    policy: str = "fifo"
    # The policy's own knobs as (field, text) pairs, e.g. (("order", "las"),) for dally.
    policy_options: tuple[tuple[str, str], ...] = ()
    cluster: str = "small"  # a preset name or a TOML/JSON topology file
    congestion: str = "none"  # a level or a CSV schedule file (time_s,fraction)
    seed: int = 0
    restore_s: float = 60.0  # checkpoint + restore paid by each preemption and migration
    tick_s: float | None = None  # None: the policy's own re-scheduling period, if it has one
    # Share of each zoo model among jobs whose trace names none (Philly has no model column).
    model_mix: tuple[tuple[str, float], ...] | None = None
    max_jobs: int | None = None  # simulate only the first N jobs of the trace
    # JobProfile JSON files (from `unstall profile run`): jobs of a profiled model's name run at
    # its measured figures instead of the zoo's estimates (a zoo name is overridden).
    job_profiles: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check(self.policy in POLICIES, self, "policy", f"unknown; known: {sorted(POLICIES)}")
        if self.policy_options:
            make_policy(self.policy, self.policy_options)  # rejects unknown or mistyped options
        check(
            self.cluster in TOPOLOGY_PRESETS or Path(self.cluster).suffix in (".toml", ".json"),
            self,
            "cluster",
            f"{self.cluster!r} is neither a preset {sorted(TOPOLOGY_PRESETS)} nor a .toml/.json",
        )
        check(
            self.congestion in LEVELS or self.congestion.endswith(".csv"),
            self,
            "congestion",
            f"{self.congestion!r} is neither a level {sorted(LEVELS)} nor a .csv schedule",
        )
        check_non_negative(self, restore_s=self.restore_s, seed=self.seed)
        check(self.tick_s is None or self.tick_s > 0, self, "tick_s", "must be > 0")
        check(self.max_jobs is None or self.max_jobs > 0, self, "max_jobs", "must be > 0")
        for path in self.job_profiles:
            check(Path(path).is_file(), self, "job_profiles", f"no such file: {path}")
        if self.model_mix is not None:
            normalised_mix(self, "model_mix", dict(self.model_mix))

    def profiled_specs(self) -> dict[str, JobPerfSpec]:
        """The perf specs of ``job_profiles`` by model name (each file's errors name it)."""
        specs: dict[str, JobPerfSpec] = {}
        for path in self.job_profiles:
            profile = JobProfile.from_json(Path(path))
            check(
                profile.model not in specs,
                self,
                "job_profiles",
                f"{path}: a second profile of model {profile.model!r}",
            )
            # The measured compute time stands; the device only names where it was measured.
            specs[profile.model] = profile.to_perf_spec()
        return specs

    def topology(self) -> TopologyConfig:
        if self.cluster in TOPOLOGY_PRESETS:
            return topology_preset(self.cluster)
        return load_topology(self.cluster)

    def congestion_schedule(self, horizon_s: float) -> CongestionSchedule:
        if self.congestion in LEVELS:
            return preset(self.congestion, horizon_s, self.seed)
        return load_schedule(Path(self.congestion))


@dataclass(frozen=True)
class SimRun:
    """A run's summary, its per-job table, its timeline (step functions over time) and what the
    policy reported over time (``time_s, name, value``; e.g. Dally's tuned timer factor)."""

    result: SimResult
    jobs: pd.DataFrame
    timeline: pd.DataFrame
    telemetry: pd.DataFrame


def layout_of(topology: TopologyConfig) -> ClusterLayout:
    return ClusterLayout.regular(
        racks=topology.racks,
        nodes_per_rack=topology.nodes_per_rack,
        gpus_per_node=topology.gpus_per_node,
    )


def prepare_trace(trace: Trace, config: SimConfig) -> Trace:
    """The jobs to simulate: the first ``max_jobs``, every job with a model."""
    if config.max_jobs is not None and config.max_jobs < len(trace):
        trace = trace.with_jobs(trace.jobs.iloc[: config.max_jobs].reset_index(drop=True))
    if trace.jobs["model"].isna().any():
        mix = dict(config.model_mix) if config.model_mix else None
        trace = assign_models(trace, mix, seed=config.seed)
    return trace


def run_simulation(
    trace: Trace,
    config: SimConfig,
    *,
    policy: Policy | None = None,
    speed: PerfSpeedModel | None = None,
    on_finish: Callable[[int], None] | None = None,
) -> SimRun:
    """Simulate ``trace`` under ``config``; ``policy`` overrides ``config.policy`` (ablations)."""
    topology = config.topology()
    speed = speed or PerfSpeedModel(topology, config.profiled_specs())
    policy = policy or make_policy(config.policy, config.policy_options)
    trace = prepare_trace(trace, config)
    arrays = trace.arrays()
    fits = arrays.num_gpus <= topology.n_gpus
    models = arrays.model if arrays.model is not None else None
    assert models is not None
    # Python lists: the engine reads these values one at a time, where numpy scalars are slow.
    jobs = build_jobs(
        job_ids=arrays.job_id[fits].tolist(),
        submit_s=arrays.submit_s[fits].tolist(),
        num_gpus=arrays.num_gpus[fits].tolist(),
        duration_s=arrays.duration_s[fits].tolist(),
        models=models[fits].tolist(),
        speed=speed,
    )
    horizon = float(arrays.submit_s.max() + arrays.duration_s.max()) if len(arrays) else 0.0
    tick = config.tick_s if config.tick_s is not None else getattr(policy, "tick_s", None)
    engine = Engine(
        layout=layout_of(topology),
        speed=speed,
        policy=policy,
        jobs=jobs,
        congestion=config.congestion_schedule(horizon),
        settings=EngineSettings(restore_s=config.restore_s, tick_s=tick, seed=config.seed),
    )
    started = time.perf_counter()
    outcome = engine.run(on_finish)
    wall = time.perf_counter() - started
    result = summarise(
        outcome,
        policy=policy.name,
        cluster=topology.name,
        trace=Path(trace.source).name,
        congestion=config.congestion,
        seed=config.seed,
        total_gpus=topology.n_gpus,
        jobs_rejected=int((~fits).sum()),
        wall_s=wall,
    )
    telemetry = pd.DataFrame(outcome.timeline.telemetry, columns=["time_s", "name", "value"])
    return SimRun(
        result=result,
        jobs=job_table(outcome.jobs),
        timeline=timeline_table(outcome.timeline),
        telemetry=telemetry,
    )
