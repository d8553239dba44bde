"""A user's own training loop, ``train(ctx)``, scheduled live on the suite's two-node test
cluster (tests/conftest.py): preempted and migrated like the built-in jobs, exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from live_runs import MOVING_POLICY, TWO_NODES, run_script

pytestmark = pytest.mark.xdist_group("ray_test_cluster")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_loop.py"


@pytest.fixture
def cluster(ray_test_cluster: Any) -> str:
    address: str = ray_test_cluster.address
    return address


def test_a_train_ctx_loop_preempted_and_migrated_ends_with_the_parameters_of_an_uninterrupted_run(
    cluster: str, tmp_path: Path
) -> None:
    """The example's loop on two GPUs (DDP over gloo): started on node 0, migrated to node 1,
    preempted, restarted on node 0. Its two processes agree on every stop, save, and the job
    ends with the parameters of the same loop run through without a stop, bit for bit."""
    (tmp_path / "moving.py").write_text(MOVING_POLICY)
    (tmp_path / "two.toml").write_text(TWO_NODES)
    found = run_script(
        f"""
        import io, json, os, socket
        import pandas as pd
        import torch
        import torch.multiprocessing as mp
        from unstall.live import LiveConfig, run_live
        from unstall.live.training import JobWork, SegmentControl, SegmentPlan, run_segment
        from unstall.net import resolve_cluster
        from unstall.sched import resolve_policy
        from unstall.sim.perf_speed import PerfSpeedModel
        from unstall.traces import Trace

        TRAIN = "{EXAMPLE}:train"


        def reference(rank, port, iterations):
            '''One process of the same job run through without a stop.'''
            torch.set_num_threads(1)  # as in the executors: the same order of float sums
            work = JobWork(job_id="j", model="mlp", iterations=float(iterations),
                           emulated=False, seed=3, train=TRAIN)
            plan = SegmentPlan(work=work, rank=rank, world_size=2, master_addr="127.0.0.1",
                               master_port=port)
            outcome = run_segment(plan, SegmentControl())
            if rank == 0:
                open("reference.bin", "wb").write(outcome.checkpoint)


        if __name__ == "__main__":
            os.environ["GLOO_SOCKET_IFNAME"] = "lo"
            topology = resolve_cluster("two.toml")
            iteration_s = PerfSpeedModel(topology).consolidated_iter_s("mlp", 2)
            frame = pd.DataFrame({{"job_id": ["j"], "submit_s": [0.0], "num_gpus": [2],
                                  "duration_s": [600 * iteration_s], "model": ["mlp"]}})
            policy = resolve_policy("moving.py:MoveAround", [("hold_s", "2"), ("gpus", "2")])
            run = run_live(Trace.from_frame(frame, source="one-job"), policy,
                           cluster=topology, address={cluster!r},
                           config=LiveConfig(compute="real", seed=3), train=TRAIN,
                           log_dir="logs", keep_final_checkpoints=True)
            final = torch.load(io.BytesIO(run.final_checkpoints["j"]), weights_only=True)
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
            mp.spawn(reference, args=(port, int(final["iteration"])), nprocs=2)
            ref = torch.load("reference.bin", weights_only=True)["state"]
            live = final["state"]
            worst = max(float((live["model"][k] - ref["model"][k]).abs().max())
                        for k in ref["model"])
            row = run.jobs.iloc[0]
            json.dump({{"worst": worst, "iterations": int(final["iteration"]),
                       "steps": [live["step"], ref["step"]],
                       "preemptions": int(row.preemptions), "migrations": int(row.migrations),
                       "placements": row.placements, "outcome": row.outcome,
                       "start_progress": row.start_progress,
                       "log": open("logs/j.log").read().splitlines()}}, open("out.json", "w"))
        """,
        tmp_path,
    )
    assert found["outcome"] == "finished", found
    assert found["preemptions"] == 1 and found["migrations"] == 1, found
    assert found["placements"] == "0:2 1:2 0:2", found
    assert found["iterations"] == 600 and found["steps"] == [600, 600], found
    assert found["worst"] == 0.0, found  # the same arithmetic in the same order: bit for bit
    # Each segment went on from where the last one saved (a stop that came before a segment's
    # first step is answered after it: each did one at least).
    first, second, third = (float(p) for p in str(found["start_progress"]).split())
    assert first == 0.0 < second <= third < 1.0, found
    log = list(found["log"])  # type: ignore[call-overload]
    for rank in (0, 1):
        # Three segments; each process of each printed where it started.
        assert sum(f"[rank {rank}] segment from iteration" in x for x in log) == 3, log
        assert sum(f"[rank {rank}] rank {rank} of 2 starts at step" in x for x in log) == 3, log
        assert sum(f"[rank {rank}] stopped at iteration" in x for x in log) == 2, log
        assert f"[rank {rank}] finished at iteration 600" in log, log
    assert '[rank 0] report {"step": 600' in "\n".join(log), log
