"""A user's own model, data and loss submitted to `unstall serve` with `unstall jobs submit
--model/--data/--loss FILE.py:FUNC`: the file is loaded in the executors only (never in the
service's process), the job is migrated and preempted on the way, and it ends with the
parameters of an uninterrupted run of the same functions, bit for bit."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch

from live_runs import MOVING_POLICY, TWO_NODES, free_port
from service_helpers import START_S, jobs_cli, real_serve_process
from unstall.live.executor import checkpoint_path, read_checkpoint_file
from unstall.live.training import (
    JobWork,
    SegmentControl,
    SegmentPlan,
    UserWork,
    final_parameters,
    run_segment,
)
from unstall.service import Client

ITERATIONS = 1000
# The user's job, which also says which process imported it. Its data function waits 3 ms a
# batch: the job's 3 s of training at least outlast its first two segments (cut short by the
# policy 1.5 and 3 s after it starts, less their start-ups), and the waits change no number.
USER_JOB = """\
import os
import time

import torch
import torch.nn.functional as F
from torch import nn

with open(os.environ.get("UNSTALL_TEST_MARKER", "/dev/null"), "a") as marker:
    marker.write(f"{os.getpid()}\\n")


def make_model():
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def make_data(rank, world_size):
    g = torch.Generator().manual_seed(100 + rank)
    batches = [(torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g))
               for _ in range(50)]
    for batch in batches:
        time.sleep(0.003)
        yield batch


def smoothed(outputs, targets):
    return F.cross_entropy(outputs, targets, label_smoothing=0.1)
"""


# A real-compute service with migrations and a preemption: 35-115 s on two cores. The no-Ray
# tests (tests/service/test_api.py, tests/live/test_user_work.py) cover the loading path.
@pytest.mark.slow
def test_a_users_model_data_and_loss_run_in_the_executors_and_resume_exactly(
    tmp_path: Path,
) -> None:
    cluster = tmp_path / "two.toml"
    cluster.write_text(TWO_NODES)
    policy = tmp_path / "moving.py"
    policy.write_text(MOVING_POLICY)
    code = tmp_path / "code"
    code.mkdir()
    (code / "job.py").write_text(USER_JOB)
    service, url, marker = real_serve_process(
        tmp_path,
        cluster,
        # Start on node 0, migrate to node 1, preempt, start on node 0 again: 1.5 s between
        # each.
        "--policy",
        f"{policy}:MoveAround",
        "--policy-option",
        "hold_s=1.5",
        # The moves' own checkpoints carry the job; few periodic ones besides.
        "--checkpoint-every-s",
        "5",
    )
    try:
        job = code / "job.py"
        submitted = jobs_cli(
            "submit", "--gpus", "1", "--model", f"{job}:make_model", "--data",
            f"{job}:make_data", "--loss", f"{job}:smoothed", "--iterations", str(ITERATIONS),
            "--server", url, "--user", "ann",
        )  # fmt: skip
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.strip()
        client = Client(url, user="ann")
        done = client.wait(job_id, timeout_s=START_S)
        assert done.state == "succeeded", done
        assert done.iterations_done == ITERATIONS
        kinds = [e.kind for e in client.get(job_id).events]
        assert kinds.count("started") == 2 and "migrated" in kinds and "preempted" in kinds
        assert done.restarts == 2, kinds
        spec = client.get(job_id).spec
        assert (spec.model_fn, spec.data_fn, spec.loss) == (
            "job.py:make_model",
            "job.py:make_data",
            "job.py:smoothed",
        )
        log, _ = client.logs(job_id)
        # Three segments, the later two from the checkpoints of the ones before.
        starts = [
            float(line.split("segment from iteration ")[1].split()[0])
            for line in log.splitlines()
            if "segment from iteration" in line
        ]
        assert len(starts) == 3 and starts[0] == 0 and 0 < starts[1] <= starts[2], log
        importers = {int(pid) for pid in marker.read_text().split()}
        assert importers and service.pid not in importers
    finally:
        service.send_signal(signal.SIGINT)
        service.wait(120)
    held_job, iteration, blob = read_checkpoint_file(
        checkpoint_path(tmp_path / "store" / "checkpoints", job_id)
    )
    assert (held_job, iteration) == (job_id, float(ITERATIONS))
    # The same functions, uninterrupted, in this process, as the executors run them (one
    # thread: the same order of float sums); the service's defaults: seed 0, batch 8, lr 0.05.
    torch.set_num_threads(1)
    user = UserWork(
        model_fn=f"{job}:make_model", data_fn=f"{job}:make_data", loss=f"{job}:smoothed"
    )
    work = JobWork(
        job_id=job_id, model="resnet18", iterations=float(ITERATIONS), emulated=False, user=user
    )
    reference = run_segment(
        SegmentPlan(
            work=work, rank=0, world_size=1, master_addr="127.0.0.1", master_port=free_port()
        ),
        SegmentControl(),
    )
    assert reference.checkpoint is not None
    served, uninterrupted = final_parameters(blob), final_parameters(reference.checkpoint)
    for name, tensor in uninterrupted.items():
        assert torch.equal(served[name], tensor), name
