"""How the Pollux reader turns a GPU-time category into a job's GPU time (Pollux workloads have no
run time; see :mod:`unstall.traces.pollux`). Here, below both the reader and
:class:`~unstall.traces.reading.ReadOptions`, so that the options can name the rules without
importing the reader."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

# (category lower bounds, upper bounds, seed) -> GPU time per job, seconds.
GpuTimeRule = Callable[[np.ndarray, np.ndarray, int], np.ndarray]


def _log_uniform(low: np.ndarray, high: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.exp(rng.uniform(np.log(low), np.log(high)))


def _midpoint(low: np.ndarray, high: np.ndarray, seed: int) -> np.ndarray:
    return np.sqrt(low * high)


DURATION_RULES: dict[str, GpuTimeRule] = {"category": _log_uniform, "midpoint": _midpoint}
