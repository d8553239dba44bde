"""What a live run refuses is refused before Ray starts, naming the job (issue 50 item 3): jobs
larger than the cluster are named up front and set aside, a trace of which no job fits or that
names an unknown model is refused. No Ray process starts in any of these tests."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import unstall
import unstall.live.run as live_run
from unstall.errors import ConfigError, UnstallError
from unstall.live import run_live
from unstall.traces import Trace

SRC = str(Path(unstall.__file__).resolve().parents[1])


class RayWouldStartError(Exception):
    """Raised where the run would start its local Ray cluster."""


@pytest.fixture
def no_ray(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Stops a run where it would start Ray; the log lines said until then come back."""
    said: list[str] = []

    def start(*_args: object, **_kwargs: object) -> None:
        said.append("<ray starts>")
        raise RayWouldStartError

    monkeypatch.setattr(live_run, "LocalRayCluster", start)
    # Another test of this worker process may have started Ray here: run_live would refuse to
    # start a second one (rightly), before the point these tests are about.
    ray = pytest.importorskip("ray")
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    return said


def trace_of(*jobs: tuple[str, int, str]) -> Trace:
    return Trace.from_frame(
        pd.DataFrame(
            {
                "job_id": [j for j, _, _ in jobs],
                "submit_s": [0.0] * len(jobs),
                "num_gpus": [g for _, g, _ in jobs],
                "duration_s": [60.0] * len(jobs),
                "model": [m for _, _, m in jobs],
            }
        ),
        source="mine.csv",
    )


def test_a_job_too_large_is_named_before_ray_starts(no_ray: list[str]) -> None:
    trace = trace_of(("small-one", 2, "resnet50"), ("huge-one", 64, "resnet50"))
    with pytest.raises(RayWouldStartError):
        run_live(trace, "fifo", cluster="tiny", log=no_ray.append)
    warning = next(line for line in no_ray if "huge-one" in line)
    assert "huge-one (64 GPUs)" in warning and "16 GPUs" in warning and "rejected" in warning
    assert no_ray.index(warning) < no_ray.index("<ray starts>")
    assert not any("small-one" in line for line in no_ray)


@pytest.mark.parametrize(
    ("jobs", "said"),
    [
        ([("huge-one", 64, "resnet50")], r"no job fits the cluster's 16 GPUs \(huge-one \(64"),
        ([("j1", 2, "resnet50"), ("j2", 2, "resnet5o")], "job 'j2' names an unknown model"),
    ],
)
def test_a_run_that_cannot_run_is_refused_before_ray_starts(
    no_ray: list[str], jobs: list[tuple[str, int, str]], said: str
) -> None:
    with pytest.raises(UnstallError, match=said):
        run_live(trace_of(*jobs), "fifo", cluster="tiny", log=no_ray.append)
    assert "<ray starts>" not in no_ray


def test_a_bad_duration_gpu_or_max_jobs_is_refused_before_ray_starts(no_ray: list[str]) -> None:
    trace = trace_of(("j1", 2, "resnet50"))
    with pytest.raises(ConfigError, match="duration_gpu"):
        run_live(trace, "fifo", duration_gpu="v1000", log=no_ray.append)
    with pytest.raises(UnstallError, match="max_jobs"):
        run_live(trace, "fifo", max_jobs=0, log=no_ray.append)
    assert "<ray starts>" not in no_ray


def test_the_command_refuses_in_seconds_naming_the_job(tmp_path: Path) -> None:
    path = tmp_path / "big.csv"
    trace_of(("huge-one", 64, "resnet50")).jobs.to_csv(path, index=False)
    env = {**os.environ, "PYTHONPATH": SRC}
    env.pop("RAY_ADDRESS", None)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "unstall", "live", "run", "--policy", "fifo", "--trace", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "huge-one (64 GPUs)" in done.stderr and "Traceback" not in done.stderr
    assert "starting a local Ray" not in done.stdout + done.stderr
    assert time.monotonic() - started < 60
