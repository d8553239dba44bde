"""The simulator's prediction of a live run: the same trace, cluster and policy, simulated
with what the run measured (its restore time, and each job's own start-up)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from unstall.live.config import LiveConfig
from unstall.net import TopologyConfig
from unstall.sched.base import Policy
from unstall.sim import SimRun, simulate
from unstall.traces import Trace


def predict_run(
    jobs: pd.DataFrame,
    measured_restore_s: float | None,
    measured_startup_s: float,
    trace: Trace,
    topology: TopologyConfig,
    policy: Policy,
    config: LiveConfig,
    duration_gpu: str | None,
) -> SimRun:
    """The same run given the same start-ups (unless the config sets the costs): ``jobs`` is
    the live run's per-job table (its ``startup_s`` column), ``measured_restore_s`` and
    ``measured_startup_s`` its medians."""
    restore = config.restore_s if config.restore_s is not None else measured_restore_s
    startup = config.startup_s
    own: dict[str, float] | None = None
    if startup is None:
        startup = 0.0 if np.isnan(measured_startup_s) else measured_startup_s
        # Each job's own, as measured: start-ups vary from job to job (a group over two nodes
        # forms slower than one within a node), and a policy that takes whatever is free at an
        # instant places differently once a start comes later (fifo: one job consolidated live
        # and spread in a median-charged prediction, its makespan a third apart). The median
        # stays for jobs that never started live.
        own = {
            job_id: float(value)
            for job_id, value in zip(jobs["job_id"], jobs["startup_s"], strict=True)
            if not np.isnan(value)
        }
    return simulate(
        trace,
        topology,
        policy,
        seed=config.seed,
        restore_s=restore if restore is not None else 60.0,
        startup_s=startup,
        job_startup_s=own,
        duration_gpu=duration_gpu,
    )
