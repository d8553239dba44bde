"""A job that arrived and never started has waited until the run ended (issue 50 item 6): its
``queue_s`` counts to the end of the run (its last round, or the Ctrl-C that stopped a live
run), not 0."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pandas as pd
import pytest

from unstall.loop.jobs import Job, JobState
from unstall.sched import ClusterSnapshot, Decision, Start
from unstall.sched.base import Sensitivity
from unstall.sim import simulate
from unstall.sim.metrics import job_table
from unstall.traces import Trace


@dataclass
class OnlyFirst:
    """Starts job ``a`` on node 0 and never anything else."""

    name: str = "only-first"
    needs_oracle: bool = False

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        return Decision(
            starts=tuple(Start(j.job_id, ((0, 1),)) for j in snapshot.queued if j.job_id == "a")
        )

    def reset(self) -> None:
        """Nothing to reset."""


def test_a_job_never_started_waited_until_the_run_ended() -> None:
    trace = Trace.from_frame(
        pd.DataFrame(
            {
                "job_id": ["a", "b"],
                "submit_s": [0.0, 100.0],
                "num_gpus": [1, 1],
                "duration_s": [1000.0, 50.0],
                "model": ["resnet50", "resnet50"],
            }
        )
    )
    jobs = simulate(trace, "tiny", OnlyFirst()).jobs.set_index("job_id")
    assert jobs.loc["a", "finish_s"] == pytest.approx(1000.0)
    assert jobs.loc["b", "outcome"] == "unfinished"
    assert jobs.loc["b", "queue_s"] == pytest.approx(900.0)  # from its arrival to the end


def _job(job_id: str, state: JobState, queued_total_s: float, since_s: float) -> Job:
    job = Job(
        index=0,
        job_id=job_id,
        submit_s=0.0,
        num_gpus=1,
        duration_s=60.0,
        model="mlp",
        cons_iter_s=0.1,
        sensitivity=Sensitivity.flat(1.0, 1.0),
    )
    job.state, job.queued_total_s, job.queued_since_s = state, queued_total_s, since_s
    return job


def test_the_wait_goes_on_to_the_interruption_and_no_further() -> None:
    waiting = _job("w", JobState.QUEUED, 5.0, 40.0)  # waited 5 s, ran, preempted at 40 s
    running = _job("r", JobState.RUNNING, 3.0, 0.0)
    table = job_table([waiting, running], until=100.0).set_index("job_id")
    assert table.loc["w", "queue_s"] == pytest.approx(5.0 + 60.0)
    assert table.loc["r", "queue_s"] == pytest.approx(3.0)
    assert job_table([waiting])["queue_s"].iloc[0] == pytest.approx(5.0)  # no end given
