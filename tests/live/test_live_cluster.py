"""Live runs on the suite's local multi-node Ray cluster (``ray_test_cluster``: two nodes of
two emulated GPUs in two racks, on loopback). Each run is a separate Python process that joins the
cluster by its address (``run_live(address=...)`` or ``unstall live run --address``): this
process may hold a Ray session of its own (the suite's), and a driver joins one cluster only."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from live_runs import MOVING_POLICY, TWO_NODES, live_env, run_script


@pytest.fixture
def cluster(ray_test_cluster: Any) -> str:
    """The suite's two-node test cluster's address (tests/conftest.py: nodes 0 and 1, two
    emulated GPUs each, one rack each: TWO_NODES)."""
    address: str = ray_test_cluster.address
    return address


USER_JOB = """\
import torch
from torch import nn


def make_model():
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def make_data(rank, world_size):
    g = torch.Generator().manual_seed(100 + rank)
    return [(torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g))
            for _ in range(50)]
"""


def test_a_job_preempted_and_migrated_ends_with_the_parameters_of_an_uninterrupted_run(
    cluster: str, tmp_path: Path
) -> None:
    (tmp_path / "moving.py").write_text(MOVING_POLICY)
    (tmp_path / "two.toml").write_text(TWO_NODES)
    (tmp_path / "job.py").write_text(USER_JOB)
    found = run_script(
        f"""
        import io, json, socket
        import pandas as pd
        import torch
        from unstall.live import LiveConfig, UserWork, run_live
        from unstall.live.training import JobWork, SegmentControl, SegmentPlan, final_parameters
        from unstall.live.training import run_segment
        from unstall.net import resolve_cluster
        from unstall.sched import resolve_policy
        from unstall.sim.perf_speed import PerfSpeedModel
        from unstall.traces import Trace
        from unstall.usercode import load_callable
        from unstall.workload.losses import resolve_loss

        # The user's own model, data (50 batches a rank, again from the first in a new epoch)
        # and loss, 3,000 iterations.
        user = UserWork(model_fn=load_callable("job.py:make_model"),
                        data_fn=load_callable("job.py:make_data"),
                        loss=resolve_loss("cross_entropy", owner="test"))
        topology = resolve_cluster("two.toml")
        iteration_s = PerfSpeedModel(topology).consolidated_iter_s("mlp", 1)
        frame = pd.DataFrame({{"job_id": ["j"], "submit_s": [0.0], "num_gpus": [1],
                              "duration_s": [3000 * iteration_s], "model": ["mlp"]}})
        policy = resolve_policy("moving.py:MoveAround", [("hold_s", "0.3")])
        run = run_live(Trace.from_frame(frame, source="one-job"), policy, cluster=topology,
                       address={cluster!r}, config=LiveConfig(compute="real", seed=3),
                       user_work=user, keep_final_checkpoints=True, log_dir="logs")
        blob = run.final_checkpoints["j"]
        # Where each segment's processes began: the job's log says (the checkpoint's step).
        import glob, re
        text = open(glob.glob("logs/*.log")[0]).read()
        segment_starts = [float(x) for x in re.findall(r"segment from iteration ([0-9.]+)", text)]
        done = int(torch.load(io.BytesIO(blob), weights_only=True)["iteration"])
        work = JobWork(job_id="j", model="mlp", iterations=float(done), emulated=False, seed=3,
                       user=user)
        torch.set_num_threads(1)  # as in the executors: the same order of float sums
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
        ref = run_segment(SegmentPlan(work=work, rank=0, world_size=1, master_addr="127.0.0.1",
                                      master_port=port), SegmentControl())
        live_params, ref_params = final_parameters(blob), final_parameters(ref.checkpoint)
        worst = max(float((live_params[k] - ref_params[k]).abs().max()) for k in ref_params)
        torch.manual_seed(work.data_seed)  # the initial weights every process built
        start = user.model_fn().state_dict()["0.weight"]
        moved = float((live_params["0.weight"] - start).abs().max())
        row = run.jobs.iloc[0]
        json.dump({{"worst": worst, "iterations": done, "preemptions": int(row.preemptions),
                   "migrations": int(row.migrations), "placements": row.placements,
                   "outcome": row.outcome, "restore_s": row.restore_s, "moved": moved,
                   "executors_s": run.facts.executor_start_wall_s,
                   "free_seen": policy.free_seen, "segment_starts": segment_starts,
                   "run_wall_s": run.facts.run_wall_s}}, open("out.json", "w"))
        """,
        tmp_path,
    )
    assert found["outcome"] == "finished"
    assert found["preemptions"] == 1 and found["migrations"] == 1, found
    assert found["placements"] == "0:1 1:1 0:1", found
    # Each move gave its GPUs back: free by node before the start, the migration, the
    # preemption and the restart.
    assert found["free_seen"] == [[2, 2], [1, 2], [2, 1], [2, 2]], found
    assert found["iterations"] == 3000
    # Each later segment resumed from the checkpoint, not from the start.
    starts = found["segment_starts"]
    assert len(starts) == 3 and starts[0] == 0 and starts[1] > 0 and starts[2] >= starts[1], found
    assert float(found["moved"]) > 0  # it trained
    assert found["worst"] == 0.0, found  # the same arithmetic in the same order: bit for bit


def test_a_killed_process_sends_its_job_back_from_its_last_checkpoint(
    cluster: str, tmp_path: Path
) -> None:
    (tmp_path / "two.toml").write_text(TWO_NODES)
    found = run_script(
        f"""
        import json, threading, time
        import pandas as pd
        import ray
        from unstall.live import LiveConfig, pool, run_live
        from unstall.live.pool import EXECUTOR_PREFIX
        from unstall.traces import Trace

        frame = pd.DataFrame({{"job_id": ["long"], "submit_s": [0.0], "num_gpus": [2],
                              "duration_s": [60.0], "model": ["resnet50"]}})

        # The run's checkpoint store, named so that the kill can wait for the first checkpoint.
        store_class = pool.RemoteStore
        class NamedStore:
            def options(self, **kw):
                return store_class.options(name="test-store", **kw)
        pool.RemoteStore = NamedStore()
        seen = {{}}

        def kill_after_first_checkpoint():
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                try:
                    held = ray.get(ray.get_actor("test-store").iteration.remote("long"))
                except ValueError:  # not created yet
                    held = 0.0
                if held > 0:
                    break
                time.sleep(0.02)
            seen["held"] = held
            victim = next(n for n in ray.util.list_named_actors()
                          if n.startswith(EXECUTOR_PREFIX) and "-n0-g0-" in n)
            ray.kill(ray.get_actor(victim), no_restart=True)

        def log(text):
            if "executors up" in text:
                threading.Thread(target=kill_after_first_checkpoint, daemon=True).start()

        config = LiveConfig(speedup=10, checkpoint_every_s=0.5)
        statuses = []  # what `unstall live run` draws as its table on a terminal
        run = run_live(Trace.from_frame(frame, source="killed"), "fifo", cluster="two.toml",
                       address={cluster!r}, config=config, log=log, on_status=statuses.append)
        row = run.jobs.iloc[0]
        shown = [[s.time_s, s.jobs_finished, s.gpus_busy, s.gpus_total, s.queued_total,
                  [[r.placement, r.progress, r.restarts] for r in s.running]] for s in statuses]
        json.dump({{"failures": int(row.failures), "outcome": row.outcome,
                   "jct": float(row.jct_s), "process_failures": run.facts.process_failures,
                   "placements": row.placements, "start_progress": row.start_progress,
                   "held": seen["held"], "statuses": shown}},
                  open("out.json", "w"))
        """,
        tmp_path,
    )
    assert found["outcome"] == "finished", found
    assert found["failures"] == 1 and found["process_failures"] == 1, found
    # Killed once its first checkpoint was stored (one every half wall second): it ran twice,
    # the second time from that checkpoint or a later one, with part of its work done, not none.
    assert float(found["held"]) > 0, found
    assert len(str(found["placements"]).split()) == 2
    first, second = (float(p) for p in str(found["start_progress"]).split())
    assert first == 0.0 and 0.0 < second < 1.0, found
    assert float(found["jct"]) > 60.0
    # The run's status as it went (run_live(on_status=)): the job on its placement of each
    # segment, its progress growing, its restart counted, then nothing left but the finish.
    statuses = found["statuses"]
    running = [
        (placement, progress, restarts)
        for *_, rows in statuses
        for placement, progress, restarts in rows
    ]
    placements = str(found["placements"]).split()
    assert {p for p, _, r in running if r == 0} == {placements[0]}, statuses
    assert {p for p, _, r in running if r == 1} == {placements[1]}, statuses
    progress = [p for _, p, _ in running]
    assert min(progress) >= 0.0 and max(progress) <= 1.0 and progress[-1] > progress[0]
    assert all(busy == 2 and total == 4 for _, _, busy, total, _, rows in statuses if rows)
    assert statuses[-1][1:] == [1, 0, 4, 0, []], statuses  # finished; nothing runs or waits
    # A few a second at most (trace seconds at speedup 10: a quarter of a wall second is
    # 2.5), but for the last, handed over as the run ends.
    times = [time_s for time_s, *_ in statuses]
    assert all(b - a >= 2.5 for a, b in itertools.pairwise(times[:-1])), times


MINI_TRACE = """\
job_id,submit_s,num_gpus,duration_s,model
a,0,1,120,resnet50
b,5,2,160,resnet50
c,10,4,100,vgg16
d,20,1,90,mlp
e,30,2,60,transformer
f,40,8,60,resnet50
"""


# FIFO that records, run by run (a reset starts a run: the live one, then its prediction), the
# jobs it started in order with their placements, and the time each finished job was reported.
RECORDING_FIFO = """\
import dataclasses, json
from pathlib import Path

from unstall.sched.fifo import Fifo

LOG = Path("decisions.json")


@dataclasses.dataclass
class RecordingFifo(Fifo):
    name: str = "fifo"

    def reset(self):
        runs = json.loads(LOG.read_text()) if LOG.exists() else []
        LOG.write_text(json.dumps([*runs, {"starts": [], "finished": {}}]))

    def decide(self, snapshot, rng):
        decision = super().decide(snapshot, rng)
        runs = json.loads(LOG.read_text())
        run = runs[-1]
        run["starts"] += [[s.job_id, [list(p) for p in s.placement]] for s in decision.starts]
        run["finished"].update({v.job_id: snapshot.now for v in snapshot.finished})
        LOG.write_text(json.dumps(runs))
        return decision
"""


def test_unstall_live_run_on_a_cluster_matches_the_simulator_job_for_job(
    cluster: str, tmp_path: Path
) -> None:
    (tmp_path / "two.toml").write_text(TWO_NODES)
    (tmp_path / "mini.csv").write_text(MINI_TRACE)
    (tmp_path / "recording.py").write_text(RECORDING_FIFO)
    args = ["live", "run", "--policy", "recording.py:RecordingFifo", "--trace", "mini.csv"]
    # Speedup 10: a wall second is 10 trace seconds, so the 3% below (5 trace seconds of the
    # shortest JCT) leaves half a wall second for what a loaded machine adds at a job's end (a
    # last step late by less than the catch-up, which behind_s does not count; the report).
    args += ["--cluster", "two.toml", "--address", cluster, "--speedup", "10"]
    args += ["--json", "out/live.json", "--jobs-out", "out/jobs.csv", "-q", "--events"]
    done = subprocess.run(
        [sys.executable, "-m", "unstall", *args],
        capture_output=True,
        text=True,
        timeout=400,
        env=live_env(),
        cwd=tmp_path,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "simulated" in output and "average JCT" in output, output
    body = json.loads((tmp_path / "out" / "live.json").read_text())
    live, simulated = body["result"], body["simulated"]
    assert live["jobs_finished"] == simulated["jobs_finished"] == 5
    assert live["jobs_rejected"] == simulated["jobs_rejected"] == 1  # 8 GPUs of 4
    # Named before the run (before Ray would start, locally) and again with the results.
    said = " ".join(output.split())
    assert "warning: 1 job needs more than the cluster's 4 GPUs and is rejected" in said
    assert "(outcome 'rejected' in the per-job output): f (8 GPUs)" in said
    assert said.index("f (8 GPUs)") < said.index("executors up")
    assert "rejected before the run (more GPUs than the cluster's 4): f" in said
    jobs = pd.read_csv(tmp_path / "out" / "jobs.csv").set_index("job_id")
    # --events: a line per transition as it happened, placements included.
    for job in "abcde":
        assert f"job {job} arrived" in said and f"job {job} finished" in said
        placement = jobs.loc[job, "placements"].split()[0]
        assert f"job {job} started on {placement}" in said
    # The live run, then the prediction the run printed beside it (the same policy object).
    live_run, predicted = json.loads((tmp_path / "decisions.json").read_text())
    # On this trace FIFO's choices are far from any tie (each start waits on a finish or an
    # arrival seconds away): the same jobs start in the same order on the same GPUs.
    assert live_run["starts"] == predicted["starts"], (live_run, predicted)
    assert [job for job, _ in live_run["starts"]] == ["a", "b", "c", "d", "e"]
    for job, placement in live_run["starts"]:
        assert jobs.loc[job, "placements"] == "+".join(f"{n}:{k}" for n, k in placement)
    # Each job's JCT as predicted (its finish as the policy heard of it), within 3% plus the
    # trace seconds its processes fell behind the perf model's pace (a busy machine).
    for job, finish_s in predicted["finished"].items():
        row = jobs.loc[job]
        expected = finish_s - row["submit_s"]
        margin = 0.03 * expected + row["behind_s"]
        assert abs(row["jct_s"] - expected) <= margin, (job, row["jct_s"], expected, margin)
    assert sorted(predicted["finished"]) == ["a", "b", "c", "d", "e"]
    # The summary's JCT and makespan agree as the jobs do.
    assert live["avg_jct_s"] == pytest.approx(simulated["avg_jct_s"], rel=0.03 + _behind(jobs))
    assert live["makespan_s"] == pytest.approx(simulated["makespan_s"], rel=0.03 + _behind(jobs))
    # Each job's start-up, as measured (the prediction charges each job its own).
    assert (jobs.loc[["a", "b", "c", "d", "e"], "startup_s"] > 0).all()
    # Each start-up is in the JSON with what it spanned, in wall seconds (trace / speedup),
    # and `unstall live calibrate` fits a start-up model on them.
    setups = pd.DataFrame(body["setups"]).set_index("job_id")
    assert list(setups["kind"]) == ["startup"] * 5
    for job in "abcde":
        assert setups.loc[job, "placement"] == jobs.loc[job, "placements"]
        assert 10 * setups.loc[job, "setup_wall_s"] == pytest.approx(jobs.loc[job, "startup_s"])
    fitted = subprocess.run(
        [sys.executable, "-m", "unstall", "live", "calibrate", "out/live.json", "--out", "m.json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=live_env(),
        cwd=tmp_path,
    )
    assert fitted.returncode == 0, fitted.stdout + fitted.stderr
    assert json.loads((tmp_path / "m.json").read_text())["startup"]["samples"] == 5
    from unstall.net import resolve_cluster
    from unstall.sched import make_policy
    from unstall.sim import simulate
    from unstall.traces import read_trace

    trace = read_trace(tmp_path / "mini.csv")
    sim_columns = simulate(trace, resolve_cluster("tiny"), make_policy("fifo")).jobs.columns
    assert set(sim_columns) <= {*jobs.columns, "job_id"}
    assert {"placements", "startup_s", "restore_s", "failures", "error"} <= set(jobs.columns)
    assert list(jobs["outcome"]) == ["finished"] * 5 + ["rejected"]
    # The GPU type each job ended on, as the simulator names it (the tiny cluster's V100s).
    assert list(jobs["gpu_type"].fillna("")) == ["v100"] * 5 + [""]


def _behind(jobs: pd.DataFrame) -> float:
    """The largest share of its JCT a job's processes fell behind by."""
    done = jobs[jobs["outcome"] == "finished"]
    return float((done["behind_s"] / done["jct_s"]).max())


TUNED_TRACE = """\
job_id,submit_s,num_gpus,duration_s,model
j0,0,1,30,transformer
j1,5,2,120,mlp
j2,25,2,60,resnet50
j3,35,1,120,mlp
j4,55,1,120,transformer
j5,75,1,30,transformer
j6,80,1,30,resnet50
j7,90,1,120,resnet50
j8,110,1,120,mlp
j9,130,1,90,vgg16
"""


def test_dally_tunes_live_and_the_run_reports_its_course(cluster: str, tmp_path: Path) -> None:
    """``dally`` as it is, its look-ahead tuner included, on the cluster: the tuner runs every
    60 trace seconds of the live run (simulating ahead from the live state), the backend
    records the policy's telemetry, and the run prints the course live and as predicted."""
    (tmp_path / "two.toml").write_text(TWO_NODES)
    (tmp_path / "tuned.csv").write_text(TUNED_TRACE)
    args = ["live", "run", "--policy", "dally", "--trace", "tuned.csv", "--cluster", "two.toml"]
    args += ["--policy-option", "period_s=60", "--policy-option", "horizon_s=300"]
    args += ["--address", cluster, "--speedup", "25", "--json", "live.json", "-q"]
    done = subprocess.run(
        [sys.executable, "-m", "unstall", *args],
        capture_output=True,
        text=True,
        timeout=400,
        env=live_env(),
        cwd=tmp_path,
    )
    output = " ".join((done.stdout + done.stderr).split())  # the console wraps long lines
    assert done.returncode == 0, output
    body = json.loads((tmp_path / "live.json").read_text())
    assert body["result"]["policy"] == "dally" and body["result"]["jobs_finished"] == 10
    live = re.search(r"tuner live: (\d+) tunings", output)
    predicted = re.search(r"tuner simulated: (\d+) tunings", output)
    assert live is not None and predicted is not None, output
    # The simulator tunes this trace two or three times (at 60 s, 120 s, ... while jobs wait:
    # how many depends on the start-ups charged); live, the tuner has run too.
    assert 2 <= int(predicted.group(1)) <= 4, output
    assert int(live.group(1)) >= 1, output
