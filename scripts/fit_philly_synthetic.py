"""Fit the synthetic generator's Philly defaults from the prepared Philly trace (run once, offline).

Reads ../shared/data/traces/philly_jobs.csv (or the path given) with unstall's own reader and prints
the constants that ``unstall.traces.synthetic`` keeps: the GPU-count mix, the mean arrival rate,
the diurnal amplitude and peak hour (first Fourier harmonic of the submissions' time of day), and
per GPU-count class the quantiles of log duration that the generator interpolates (its empirical
duration model), plus a lognormal fit (mean and standard deviation of log duration) with its
quantiles beside the data's, which shows why the lognormal is not the default: the multi-GPU
classes are bimodal and a lognormal misses both their median and their tail.

    .venv/bin/python scripts/fit_philly_synthetic.py [PATH]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from scipy import stats

from unstall.traces import read_trace

DEFAULT = (
    Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "traces" / "philly_jobs.csv"
)
CLASSES = (1, 2, 4, 8)  # a job of g GPUs falls in the largest class <= g
LEVELS = (*(i / 20 for i in range(20)), 0.99, 0.999, 1.0)


def main(path: Path) -> None:
    trace = read_trace(path, "philly-csv")
    jobs = trace.jobs
    gpus = jobs["num_gpus"].to_numpy()
    duration = jobs["duration_s"].to_numpy()
    submit = jobs["submit_s"].to_numpy()
    n = len(jobs)
    sizes, counts = np.unique(gpus, return_counts=True)
    print(f"# {n} jobs over {submit[-1] / 86400:.3f} days")
    print(
        "PHILLY_GPU_MIX =",
        {int(s): round(float(c) / n, 6) for s, c in zip(sizes, counts, strict=True)},
    )
    print(f"PHILLY_ARRIVALS_PER_HOUR = {n / submit[-1] * 3600:.4f}")
    day = ((submit + trace.submit_offset_s) % 86400) / 86400 * 2 * np.pi
    harmonic = np.exp(1j * day).mean()
    print(f"PHILLY_DIURNAL_AMPLITUDE = {2 * abs(harmonic):.4f}")
    print(f"PHILLY_DIURNAL_PEAK_HOUR = {(np.angle(harmonic) % (2 * np.pi)) / (2 * np.pi) * 24:.3f}")
    cls = np.array(CLASSES)[np.searchsorted(CLASSES, gpus, side="right") - 1]
    print("PHILLY_LOG_DURATION_QUANTILES = {")
    for c in CLASSES:
        logs = np.log(duration[cls == c])
        table = ", ".join(f"{v:.4f}" for v in np.quantile(logs, LEVELS))
        print(f"    {c}: ({table}),  # {len(logs)} jobs")
    print("}")
    print("# lognormal fits, for comparison:")
    for c in CLASSES:
        logs = np.log(duration[cls == c])
        mu, sigma = logs.mean(), logs.std()
        print(f"#   {c} GPUs: mu {mu:.4f}, sigma {sigma:.4f}")
        for q in (0.5, 0.9, 0.99):
            fit = np.exp(mu + sigma * stats.norm.ppf(q))
            print(f"#     p{q * 100:g}: data {np.exp(np.quantile(logs, q)):.0f} s, fit {fit:.0f} s")
    print(f"PHILLY_MIN_DURATION_S = {duration.min():.0f}")
    print(f"PHILLY_MAX_DURATION_S = {duration.max():.0f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT)
