"""A job's first start can cost set-up time (``simulate(startup_s=...)``): what a live run measures
and hands back to the simulator. Restarts pay ``restore_s`` instead."""

from __future__ import annotations

import pandas as pd
import pytest

from unstall.net import TopologyConfig
from unstall.sim import simulate
from unstall.traces import Trace


def _jobs(*ids: str) -> Trace:
    """One-GPU jobs of 100 s, all submitted at 0."""
    n = len(ids)
    frame = pd.DataFrame(
        {"job_id": list(ids), "submit_s": [0.0] * n, "num_gpus": [1] * n, "duration_s": [100.0] * n}
    )
    return Trace.from_frame(frame.assign(model="resnet50"), source="jobs")


def test_the_first_start_pays_the_start_up_time() -> None:
    cluster = TopologyConfig(name="one", racks=1, nodes_per_rack=1, gpus_per_node=1)
    plain = simulate(_jobs("a"), cluster, "fifo").result
    slow = simulate(_jobs("a"), cluster, "fifo", startup_s=7.5).result
    assert plain.avg_jct_s == pytest.approx(100.0)
    assert slow.avg_jct_s == pytest.approx(107.5)


def test_a_negative_start_up_time_is_refused_by_name() -> None:
    cluster = TopologyConfig(name="one", racks=1, nodes_per_rack=1, gpus_per_node=1)
    with pytest.raises(ValueError, match="startup_s"):
        simulate(_jobs("a"), cluster, "fifo", startup_s=-1.0)


def test_a_job_named_pays_its_own_start_up_the_others_the_runs() -> None:
    """``job_startup_s`` (a live run's prediction: each job's start-up as measured) replaces
    ``startup_s`` for the jobs it names."""
    cluster = TopologyConfig(name="two", racks=1, nodes_per_rack=1, gpus_per_node=2)
    run = simulate(_jobs("a", "b"), cluster, "fifo", startup_s=5.0, job_startup_s={"b": 30.0})
    jct = run.jobs.set_index("job_id")["jct_s"]
    assert jct["a"] == pytest.approx(105.0) and jct["b"] == pytest.approx(130.0)
    for bad, named in (({"b": -1.0}, r"job_startup_s\['b'\]: must be >= 0"), ([1.0], "mapping")):
        with pytest.raises(ValueError, match=named):
            simulate(_jobs("a", "b"), cluster, "fifo", job_startup_s=bad)  # type: ignore[arg-type]
