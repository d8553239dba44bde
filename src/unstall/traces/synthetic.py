"""A seeded synthetic trace generator whose defaults follow the Philly trace.

Jobs arrive as a Poisson process whose rate follows a day-night cycle, ask for GPUs from a
GPU-count mix, run for a heavy-tailed time that depends on their size, and train a model drawn
from a mix. Every default comes from the prepared Philly trace (../shared/data/traces/
philly_jobs.csv: 82,247 jobs of Microsoft's Philly cluster, Sep-Dec 2017, described by Jeon et
al., "Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN Training Workloads", ATC'19) and
was computed once, offline, by ``scripts/fit_philly_synthetic.py``, which prints these constants.

Everything is vectorised numpy: a million jobs take about a second. One seed is split into named
streams (arrivals, GPUs, durations, models), so changing, say, the model mix leaves the arrival
times and sizes of the same seed unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.special import ndtri

from unstall.config import (
    check,
    check_non_negative,
    check_number,
    check_positive,
    is_whole_number,
)
from unstall.errors import ConfigError
from unstall.traces.models import DEFAULT_MODEL_MIX, draw_models, normalised_mix
from unstall.traces.schema import Trace

# Share of jobs by GPU count in the Philly trace (76,627 of 82,247 jobs use one GPU).
PHILLY_GPU_MIX: dict[int, float] = {
    1: 0.931669,
    2: 0.022104,
    4: 0.022736,
    8: 0.019976,
    12: 0.000085,
    16: 0.002420,
    24: 0.000085,
    32: 0.000815,
    64: 0.000073,
    128: 0.000036,
}
# 82,247 submissions over 108.9 days.
PHILLY_ARRIVALS_PER_HOUR = 31.4698
# First Fourier harmonic of the submissions' time of day (in the trace's own clock): the rate
# swings +-29 % around its mean and peaks at about 05:00.
PHILLY_DIURNAL_AMPLITUDE = 0.2909
PHILLY_DIURNAL_PEAK_HOUR = 4.993
# Run time: quantiles of ln(duration in s) at DURATION_LEVELS, per GPU-count class (a job of g
# GPUs uses the largest class <= g). The generator interpolates them (an empirical inverse CDF)
# rather than fitting a lognormal: the multi-GPU classes are bimodal (many jobs die within a
# minute, the rest run for days) and a lognormal misses both their median and tail by 2-10x
# (see the comparison printed by the fitting script).
DURATION_LEVELS: tuple[float, ...] = (*(i / 20 for i in range(20)), 0.99, 0.999, 1.0)
PHILLY_LOG_DURATION_QUANTILES: dict[int, tuple[float, ...]] = {
    1: (0.0000, 3.9512, 4.1271, 4.2341, 4.3307, 4.8040, 5.3706, 5.9532, 6.3969, 6.7511, 7.0184,
        7.2766, 7.4547, 7.6275, 7.8096, 7.9069, 8.2306, 8.5834, 9.0492, 9.8594, 11.8160, 13.6713,
        14.9960),
    2: (0.6931, 2.1972, 2.3979, 2.5649, 2.7081, 2.7726, 2.8332, 2.8904, 2.9444, 2.9957, 3.0445,
        3.1355, 3.2189, 3.3322, 3.4965, 4.3307, 5.0053, 10.0103, 11.1946, 12.1913, 13.1679,
        14.2035, 14.7644),
    4: (1.0986, 4.3175, 4.9258, 5.1893, 6.0034, 6.6500, 7.4359, 8.4024, 8.9184, 9.4793, 9.7648,
        10.1755, 10.4992, 10.9481, 11.2729, 11.4008, 11.5739, 11.9280, 12.1251, 12.5208, 13.7183,
        14.7096, 14.8274),
    8: (0.0000, 4.4067, 5.2933, 6.0080, 6.4587, 7.1466, 8.1234, 8.6949, 9.3475, 9.6293, 10.0711,
        10.5774, 10.9841, 11.4722, 11.7701, 12.0211, 12.1825, 12.3679, 12.7382, 13.1441, 13.8758,
        14.7921, 15.3477),
}  # fmt: skip
DAY_S = 86400.0
STREAMS = ("arrivals", "gpus", "durations", "models")


# The number fields of SyntheticTraceConfig: (name, whole number, may be None).
_NUMBER_FIELDS = (
    ("jobs", True, False),
    ("seed", True, False),
    ("arrivals_per_hour", False, False),
    ("load", False, True),
    ("cluster_gpus", True, True),
    ("diurnal_amplitude", False, False),
    ("diurnal_period_s", False, False),
    ("diurnal_peak_s", False, False),
    ("multi_gpu_share", False, True),
    ("max_gpus", True, True),
    ("duration_scale", False, False),
    ("min_duration_s", False, False),
    ("max_duration_s", False, False),
)


@dataclass(frozen=True, kw_only=True)
class SyntheticTraceConfig:
    """What to generate. Defaults: Philly's arrival rate, day-night cycle, GPU mix and durations.

    - ``arrivals_per_hour``: mean submission rate; or give ``load`` with ``cluster_gpus`` to set
      it so that the offered GPU-time is that share of the cluster (``load=1``: on average the
      jobs ask for exactly the cluster's GPU-seconds per second).
    - ``diurnal_amplitude`` in [0, 1): the rate is ``mean * (1 + a cos(2 pi (t - peak) / period))``.
    - ``gpu_mix``: share of jobs per GPU count; ``multi_gpu_share`` rescales it so that this share
      of jobs uses more than one GPU (keeping the proportions among multi-GPU sizes);
      ``max_gpus`` drops larger sizes (and renormalises) so jobs fit a small cluster.
    - durations: Philly's empirical distribution per size class (see the module), or a lognormal
      ``duration_lognormal = (median_s, sigma)`` for every size; times ``duration_scale``, then
      clipped to ``[min_duration_s, max_duration_s]``.
    - ``model_mix``: share of jobs per zoo model (default: uniform; Philly names no models).
    """

    jobs: int = 1000
    seed: int = 0
    arrivals_per_hour: float = PHILLY_ARRIVALS_PER_HOUR
    load: float | None = None
    cluster_gpus: int | None = None
    diurnal_amplitude: float = PHILLY_DIURNAL_AMPLITUDE
    diurnal_period_s: float = DAY_S
    diurnal_peak_s: float = PHILLY_DIURNAL_PEAK_HOUR * 3600.0
    gpu_mix: Mapping[int, float] = field(default_factory=lambda: dict(PHILLY_GPU_MIX))
    multi_gpu_share: float | None = None
    max_gpus: int | None = None
    duration_lognormal: tuple[float, float] | None = None
    duration_scale: float = 1.0
    min_duration_s: float = 1.0
    max_duration_s: float = 4_628_226.0  # Philly's longest job (53.6 days)
    model_mix: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_MODEL_MIX))
    job_id_prefix: str = "job-"

    def __post_init__(self) -> None:
        # Kinds first: a string failed as a bare TypeError in a comparison, and a fractional
        # count of jobs deep inside numpy.
        for name, whole, optional in _NUMBER_FIELDS:
            check_number(self, name, getattr(self, name), whole=whole, optional=optional)
        check(self.jobs >= 1, self, "jobs", f"must be >= 1, got {self.jobs}")
        check_non_negative(self, seed=self.seed)
        check_positive(
            self,
            arrivals_per_hour=self.arrivals_per_hour,
            diurnal_period_s=self.diurnal_period_s,
            duration_scale=self.duration_scale,
            min_duration_s=self.min_duration_s,
        )
        check(
            0 <= self.diurnal_amplitude < 1,
            self,
            "diurnal_amplitude",
            f"must be in [0, 1) so the rate stays positive, got {self.diurnal_amplitude}",
        )
        check(
            self.max_duration_s >= self.min_duration_s,
            self,
            "max_duration_s",
            f"must be >= min_duration_s ({self.min_duration_s}), got {self.max_duration_s}",
        )
        check(
            (self.load is None) == (self.cluster_gpus is None),
            self,
            "load",
            "give load and cluster_gpus together (or neither)",
        )
        if self.load is not None and self.cluster_gpus is not None:
            check_positive(self, load=self.load, cluster_gpus=self.cluster_gpus)
            # The load sets the rate: a rate given as well would be dropped without a word.
            check(
                self.arrivals_per_hour == PHILLY_ARRIVALS_PER_HOUR,
                self,
                "arrivals_per_hour",
                f"{self.arrivals_per_hour:g} cannot be kept: load and cluster_gpus set the "
                "arrival rate; give one or the other",
            )
        if self.duration_lognormal is not None:
            median, sigma = self.duration_lognormal
            check(
                median > 0 and sigma >= 0,
                self,
                "duration_lognormal",
                "needs median > 0, sigma >= 0",
            )
        self.sizes()  # validates gpu_mix, multi_gpu_share and max_gpus
        normalised_mix(self, "model_mix", self.model_mix)

    def sizes(self) -> dict[int, float]:
        """The GPU-count mix actually drawn from, after ``max_gpus`` and ``multi_gpu_share``."""
        check(len(self.gpu_mix) > 0, self, "gpu_mix", "must hold at least one GPU count")
        for gpus, share in self.gpu_mix.items():
            check(int(gpus) == gpus and gpus >= 1, self, "gpu_mix", f"bad GPU count {gpus!r}")
            check(share >= 0, self, "gpu_mix", f"share of {gpus} GPUs must be >= 0, got {share}")
        mix = {int(g): float(s) for g, s in self.gpu_mix.items() if s > 0}
        if self.max_gpus is not None:
            check(self.max_gpus >= 1, self, "max_gpus", f"must be >= 1, got {self.max_gpus}")
            mix = {g: s for g, s in mix.items() if g <= self.max_gpus}
        check(sum(mix.values()) > 0, self, "gpu_mix", "no GPU count with a share > 0 is left")
        if self.multi_gpu_share is not None:
            share = self.multi_gpu_share
            check(0 <= share <= 1, self, "multi_gpu_share", f"must be in [0, 1], got {share}")
            single, multi = mix.get(1, 0.0), sum(s for g, s in mix.items() if g > 1)
            check(share == 0 or multi > 0, self, "multi_gpu_share", "the mix has no multi-GPU size")
            check(share == 1 or single > 0, self, "multi_gpu_share", "the mix has no 1-GPU jobs")
            mix = {g: (share * s / multi if g > 1 else 1 - share) for g, s in mix.items()}
            mix = {g: s for g, s in mix.items() if s > 0}
        total = sum(mix.values())
        return {g: s / total for g, s in sorted(mix.items())}


def generate(config: SyntheticTraceConfig) -> Trace:
    """A trace of ``config.jobs`` jobs; the same config (seed included) gives the same trace."""
    if not isinstance(config, SyntheticTraceConfig):
        raise ConfigError(
            "generate",
            "config",
            f"must be a SyntheticTraceConfig, got {config!r}: generate(SyntheticTraceConfig("
            f"jobs={config if is_whole_number(config) else 100}, seed=1))",
        )
    rng = dict(zip(STREAMS, (np.random.default_rng(s) for s in _seeds(config.seed)), strict=True))
    sizes = config.sizes()
    size_values = np.fromiter(sizes, dtype=np.int64)
    gpus = size_values[rng["gpus"].choice(len(sizes), size=config.jobs, p=list(sizes.values()))]
    duration = _durations(config, gpus, rng["durations"].random(config.jobs))
    arrivals = _arrivals(config, _rate_per_s(config, sizes), rng["arrivals"])
    # Times in ms relative to the first arrival, whose time on the day-night clock is the offset.
    submit = np.round(arrivals - arrivals[0], 3)
    models = draw_models(
        rng["models"], normalised_mix(config, "model_mix", config.model_mix), config.jobs
    )
    width = len(str(config.jobs - 1))
    ids = config.job_id_prefix + pd.Series(np.arange(config.jobs)).astype(str).str.zfill(width)
    jobs = pd.DataFrame(
        {
            "job_id": ids.astype("string"),
            "submit_s": submit,
            "num_gpus": gpus,
            "duration_s": duration,
            "model": pd.Series(models, dtype="string"),
        }
    )
    notes = (f"synthetic: seed {config.seed}, {config.jobs} jobs",)
    return Trace.from_frame(
        jobs,
        source=f"synthetic(seed={config.seed})",
        format="synthetic",
        submit_offset_s=float(arrivals[0]),
        notes=notes,
    )


def _seeds(seed: int) -> list[np.random.SeedSequence]:
    """One independent stream per name in :data:`STREAMS`, all from ``seed``."""
    return np.random.SeedSequence(seed).spawn(len(STREAMS))


def _durations(config: SyntheticTraceConfig, gpus: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Run times from uniforms ``u`` through each job's inverse CDF; scaled and clipped."""
    if config.duration_lognormal is not None:
        median, sigma = config.duration_lognormal
        log_d = np.log(median) + sigma * ndtri(np.clip(u, 1e-12, 1 - 1e-12))
    else:
        classes = np.array(sorted(PHILLY_LOG_DURATION_QUANTILES))
        job_class = classes[np.clip(np.searchsorted(classes, gpus, side="right") - 1, 0, None)]
        log_d = np.empty(len(u))
        for c in classes.tolist():
            mask = job_class == c
            log_d[mask] = np.interp(u[mask], DURATION_LEVELS, PHILLY_LOG_DURATION_QUANTILES[c])
    duration = np.exp(log_d) * config.duration_scale
    return np.round(np.clip(duration, config.min_duration_s, config.max_duration_s), 3)


def mean_gpu_seconds(config: SyntheticTraceConfig) -> float:
    """Expected GPUs x duration of one job under ``config`` (by quadrature of the inverse CDFs)."""
    sizes = config.sizes()
    u = (np.arange(200_000) + 0.5) / 200_000
    total = 0.0
    for gpus, share in sizes.items():
        total += share * gpus * float(_durations(config, np.full(len(u), gpus), u).mean())
    return total


def _rate_per_s(config: SyntheticTraceConfig, sizes: dict[int, float]) -> float:
    """Mean arrival rate: as given, or the one that makes the offered load ``config.load``."""
    if config.load is None or config.cluster_gpus is None:
        return config.arrivals_per_hour / 3600.0
    return config.load * config.cluster_gpus / mean_gpu_seconds(config)


def _arrivals(config: SyntheticTraceConfig, rate: float, rng: np.random.Generator) -> np.ndarray:
    """Submission times of a Poisson process with a cosine day-night rate, by time rescaling.

    Unit-rate arrivals ``s_k`` are mapped through the inverse of the cumulative rate
    ``L(t) = rate * (t + a P / 2 pi * (sin(w (t - peak)) + sin(w peak)))``, solved by
    Newton's method (``L`` is strictly increasing because ``a < 1``).
    """
    targets = np.cumsum(rng.exponential(size=config.jobs)) / rate
    a, period, peak = config.diurnal_amplitude, config.diurnal_period_s, config.diurnal_peak_s
    if a == 0:
        return targets
    w = 2 * np.pi / period
    swing = a / w

    def excess(t: np.ndarray) -> np.ndarray:  # L(t) / rate - t
        return swing * (np.sin(w * (t - peak)) + np.sin(w * peak))

    # |excess| <= 2 * swing, so the root lies within that distance of its target.
    low, high = targets - 2 * swing, targets + 2 * swing
    t = targets.copy()
    for _ in range(100):
        step = (t + excess(t) - targets) / (1 + a * np.cos(w * (t - peak)))
        t = np.clip(t - step, low, high)
        if np.abs(step).max() < 1e-7:
            break
    return t
