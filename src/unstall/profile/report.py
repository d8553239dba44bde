"""``StallReport``: the profile of one job, assembled (purely) from the runs' raw timings.

:func:`build_report` turns the workers' timings (:mod:`unstall.profile.runner`) into a report,
whose ``job_profile`` is what ``sim`` and ``recommend`` read; it is pure, and tested on timings
with known injected delays. :func:`unstall.profile.measure_stalls` runs the workers and calls it.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from unstall.net.link import Link
from unstall.profile.comm_hook import link_json
from unstall.profile.config import DATA_RUNS, ProfileConfig, profile_label
from unstall.profile.job import ModelShape
from unstall.profile.runner import RawTimings
from unstall.profile.stalls import STALL_FIELDS, RunSummary, stall_breakdown, summarize
from unstall.profile.steps import PHASES
from unstall.profile.trace import PhaseSpan, chrome_trace
from unstall.results import JsonResult
from unstall.workload.profiles import JobProfile


@dataclass(frozen=True, kw_only=True)
class StallReport(JsonResult):
    """Per-iteration compute and stalls (seconds, medians over the repeats), their fractions,
    every run's median and spread, the phase timers, and the resulting :class:`JobProfile`.

    ``device`` is what it ran on as its :class:`JobProfile` names it (``cpu``, or a GPU preset:
    see :func:`~unstall.profile.config.profile_label`), ``device_name`` as its maker names it
    (the CPU's model, the GPU's CUDA name). ``data`` says what fed the data runs and how the
    profiler built their variants. ``model`` and ``model_options``
    name what was profiled, as the caller labelled it; ``batch`` is the local batch (samples
    per worker and iteration). ``network`` is the emulated link (in JSON in the units of the
    command line: ``gbps``, ``latency_ms``). ``emulated_delay_s`` is the delay
    the emulated link added per iteration (the network stall cannot be smaller unless it hides
    behind backward compute). ``profiler_overhead`` is, for the compute run and the local DDP
    run, the median over the rounds of timed / untimed - 1 (the phase timers' cost), when
    measured; ``profiler_overhead_samples`` holds each round's ratio.
    """

    model: str
    model_options: dict[str, object]
    workers: int
    backend: str
    device: str
    device_name: str
    data: str
    batch: int
    iterations: int
    warmup: int
    repeats: int
    network: Link | None
    compute_s: float
    fetch_stall_s: float
    prep_stall_s: float
    interconnect_stall_s: float
    network_stall_s: float
    total_s: float
    fractions: dict[str, float]
    raw_differences: dict[str, float]
    runs: dict[str, RunSummary]
    phases: dict[str, dict[str, float]]
    emulated_delay_s: float | None
    profiler_overhead: dict[str, float] | None
    profiler_overhead_samples: dict[str, list[float]] | None
    trace: tuple[PhaseSpan, ...]
    job_profile: JobProfile

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["network"] = link_json(self.network)
        return out

    def chrome_trace(self) -> dict[str, Any]:
        """Every rank's timed iterations of every run, and the median iteration's stalls as
        their own slices, as a Chrome trace (see :mod:`unstall.profile.trace`)."""
        stalls = {name: getattr(self, name) for name in STALL_FIELDS}
        label = f"{self.model} ({self.device_name})"
        return chrome_trace(self.trace, label=label, stalls=stalls)


def _placements(config: ProfileConfig, medians: dict[str, float]) -> dict[str, float]:
    """Measured iteration times per placement (workers per host): "1" alone, "N" on one host;
    over the network "11.." (the emulated link: one worker a host) or "LL.." (L per host)."""
    measured = {"1": medians["compute"]}
    if config.workers_per_node > 1:
        measured[str(config.workers_per_node)] = medians["local"]
    if "network" in medians:
        per_host = config.workers_per_node if config.nodes > 1 else 1
        measured[str(per_host) * (config.workers // per_host)] = medians["network"]
    return measured


def _overhead(raw: RawTimings) -> dict[str, list[float]]:
    """Per timed run with an untimed twin: each round's timed / untimed - 1 (paired)."""
    return {
        name: [
            t / u - 1.0 for t, u in zip(raw.runs[name], raw.runs[f"{name}_untimed"], strict=True)
        ]
        for name in raw.runs
        if f"{name}_untimed" in raw.runs
    }


def build_report(
    config: ProfileConfig,
    raw: RawTimings,
    *,
    model: str,
    model_options: Mapping[str, object],
    shape: ModelShape,
    data: str = "",
) -> StallReport:
    """The report of ``config``'s runs of ``model`` (of ``shape``) from their raw timings
    (pure); ``data`` describes the data source."""
    runs = {name: summarize(name, samples) for name, samples in raw.runs.items()}
    medians = {name: run.median_s for name, run in runs.items() if not name.endswith("_untimed")}
    breakdown = stall_breakdown(medians)
    phases = {
        name: {p: statistics.median(per[p]) for p in PHASES if p in per}
        for name, per in raw.phases.items()
    }
    overhead = _overhead(raw)
    measured_data = any(run in raw.runs for run in DATA_RUNS)
    data_s = breakdown.fetch_stall_s + breakdown.prep_stall_s if measured_data else None
    label = profile_label(config.device, config.profile_device, raw.device_name)
    return StallReport(
        model=model,
        model_options=dict(model_options),
        workers=config.workers,
        backend=config.backend,
        device=label,
        device_name=raw.device_name,
        data=data,
        batch=raw.batch,
        iterations=config.iterations,
        warmup=config.warmup,
        repeats=config.repeats,
        network=config.network,
        **{name: getattr(breakdown, name) for name in STALL_FIELDS},
        total_s=breakdown.total_s,
        fractions=breakdown.fractions,
        raw_differences=breakdown.raw,
        runs=runs,
        phases=phases,
        emulated_delay_s=statistics.median(raw.emulated_delay_s) if raw.emulated_delay_s else None,
        profiler_overhead={k: statistics.median(v) for k, v in overhead.items()} or None,
        profiler_overhead_samples=overhead or None,
        trace=tuple(
            PhaseSpan(
                name=s["name"],
                thread=int(s["name"] == "allreduce"),
                start_s=s["start_s"],
                end_s=s["end_s"],
                rank=s.get("rank", 0),
                run=s.get("run", ""),
                round=s.get("round", 0),
                iteration=s.get("iteration", 0),
            )
            for s in raw.trace
        ),
        job_profile=JobProfile(
            model=model,
            device=label,
            device_name=raw.device_name,
            device_tflops=raw.device_tflops,
            parameter_bytes=shape.parameter_bytes,
            compute_s=medians["compute"],
            local_batch=raw.batch,
            gradient_bytes=shape.gradient_bytes,
            gradient_tensors=shape.gradient_tensors,
            layers=shape.layers,
            data_s=data_s,
            measured=_placements(config, medians),
        ),
    )
