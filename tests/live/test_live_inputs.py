"""The live backend's pure parts and its refusals: the run's config, the cluster read from Ray's
node list, the command line's bad input (no Ray cluster needed for any of these)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import unstall
from unstall.errors import ConfigError
from unstall.live import LiveClusterError, LiveConfig
from unstall.live.cluster import discover
from unstall.net import TopologyConfig

SRC = str(Path(unstall.__file__).resolve().parents[1])
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_loop.py"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("speedup", 0),
        ("speedup", float("inf")),
        ("compute", "fake"),
        ("batch_size", 0),
        ("restore_s", -1.0),
        ("slot_resource", ""),
        ("seed", 1.5),
    ],
)
def test_a_config_that_cannot_work_names_its_field(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=field):
        LiveConfig(**{field: value})  # type: ignore[arg-type]


def _node(
    node_id: str,
    *,
    gpus: int = 0,
    slots: int = 0,
    labels: dict[str, str] | None = None,
    accelerator: str | None = None,
    alive: bool = True,
) -> dict[str, object]:
    resources: dict[str, float] = {"CPU": 4.0}
    if gpus:
        resources["GPU"] = float(gpus)
    if slots:
        resources["unstall_gpu"] = float(slots)
    if accelerator:
        resources[f"accelerator_type:{accelerator}"] = 1.0
    return {
        "NodeID": node_id,
        "NodeManagerAddress": "127.0.0.1",
        "Alive": alive,
        "Resources": resources,
        "Labels": labels or {},
    }


def test_nodes_come_from_ray_with_their_gpus_types_racks_and_order() -> None:
    nodes = [
        _node("head"),  # no GPUs: hosts the driver only
        _node("b", gpus=8, accelerator="A100", labels={"unstall.node": "1", "unstall.rack": "7"}),
        _node("a", slots=4, labels={"unstall.node": "0", "unstall.rack": "3"}),
        _node("gone", gpus=8, alive=False),
    ]
    live = discover(nodes, topology=None, slot_resource="unstall_gpu", loopback=True)
    assert [n.ray_node_id for n in live.nodes] == ["a", "b"]
    assert [(n.gpus, n.gpu_type, n.rack, n.uses_gpus) for n in live.nodes] == [
        (4, "v100", 0, False),  # no accelerator label: the default type; racks renumbered
        (8, "a100", 1, True),
    ]
    assert live.topology.node_gpus == (4, 8)
    assert live.topology.node_device == ("v100", "a100")
    assert live.topology.node_rack == (0, 1)
    assert "node 1 (rack 1, 8 x a100) -> Ray node b" in live.mapping()[1]


def test_a_topology_file_is_mapped_onto_the_ray_nodes_in_order() -> None:
    nodes = [_node(f"n{i}", slots=4, labels={"unstall.node": str(i)}) for i in range(3)]
    topology = TopologyConfig(name="two", racks=2, nodes_per_rack=1, gpus_per_node=2)
    live = discover(nodes, topology=topology, slot_resource="unstall_gpu", loopback=True)
    assert [(n.index, n.ray_node_id, n.gpus, n.rack) for n in live.nodes] == [
        (0, "n0", 2, 0),
        (1, "n1", 2, 1),
    ]


def test_a_cluster_that_cannot_hold_the_topology_is_refused_naming_both() -> None:
    topology = TopologyConfig(name="big", racks=1, nodes_per_rack=2, gpus_per_node=8)
    with pytest.raises(LiveClusterError, match="'big' has 2 nodes, the Ray cluster 1"):
        discover([_node("a", gpus=8)], topology=topology, slot_resource="x", loopback=True)
    with pytest.raises(LiveClusterError, match=r"node 1 has 8 GPUs.* only 4"):
        discover(
            [_node("a", gpus=8, labels={"unstall.node": "0"}), _node("b", gpus=4)],
            topology=topology,
            slot_resource="x",
            loopback=True,
        )
    with pytest.raises(LiveClusterError, match=r"no node with GPUs.*ray start --resources"):
        discover([_node("head")], topology=None, slot_resource="unstall_gpu", loopback=True)


def _unstall(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SRC}
    env.pop("RAY_ADDRESS", None)
    return subprocess.run(
        [sys.executable, "-m", "unstall", "live", "run", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--policy", "nosuch"], "nosuch"),
        (["--policy", "fifo", "--compute", "fake"], "compute"),
        (["--policy", "fifo", "--speedup", "0"], "speedup"),
        (["--policy", "my_policy.py"], "my_policy.py:MyPolicy"),
        (["--policy", "fifo", "--model", "m.py:make"], "--data"),
        (["--policy", "fifo", "--train", "t.py:train", "--loss", "mse"], "without --model"),
        (["--policy", "fifo", "--train", "t.py"], "t.py:train"),
        (["--policy", "fifo", "--train", "nosuch.py:train"], "nosuch.py: no such file"),
        (["--policy", "fifo", "--train", f"{EXAMPLE}:train"], "add --compute real"),
    ],
)
def test_usage_errors_exit_2_with_one_line(args: list[str], said: str) -> None:
    done = _unstall(*args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr
    assert "Traceback" not in done.stderr


def test_an_unreachable_address_fails_in_seconds_with_one_line() -> None:
    started = time.monotonic()
    done = _unstall("--policy", "fifo", "--address", "127.0.0.1:9", "--max-jobs", "2")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "127.0.0.1:9" in done.stderr and "Traceback" not in done.stderr
    assert time.monotonic() - started < 60


def _backend(max_failures: int) -> object:
    """A live backend over one emulated node, before any executor starts (no Ray needed)."""
    import pandas as pd

    from unstall.live.backend import LiveBackend
    from unstall.live.run import JobCode, _work
    from unstall.sched import make_policy
    from unstall.sim.run import run_jobs, speed_model
    from unstall.traces import Trace

    live = discover(
        [_node("a", slots=2, labels={"unstall.node": "0"})],
        topology=None,
        slot_resource="unstall_gpu",
        loopback=True,
    )
    trace = Trace.from_frame(
        pd.DataFrame({"job_id": ["j"], "submit_s": [0.0], "num_gpus": [1], "duration_s": [60.0]}),
        source="one",
    )
    speed, per_job = speed_model(trace, live.topology, {}, None)
    prepared = run_jobs(
        trace,
        live.topology,
        speed,
        max_jobs=None,
        model_mix=None,
        seed=0,
        job_duration_gpus=per_job,
    )
    config = LiveConfig(max_failures=max_failures, compute="real")
    works = {
        j.job_id: _work(j.job_id, j.model, j.work_iters, config, JobCode()) for j in prepared.jobs
    }
    return LiveBackend(
        cluster=live,
        speed=speed,
        policy=make_policy("fifo"),
        jobs=prepared.jobs,
        works=works,
        config=config,
    )


def test_a_live_run_gives_a_job_up_after_its_max_failures() -> None:
    """The live backend hands its ``max_failures`` to the scheduling core, which gives a job up
    (tests/loop/test_core.py checks how the core counts failures)."""
    from unstall.loop import JobState

    backend: Any = _backend(max_failures=2)
    core = backend.core
    job = core.jobs[0]
    core.arrive(job, 0.0)
    core.fail(job, 1.0, "loss is nan", progressed=False, own=True)
    assert job.state == JobState.QUEUED
    core.fail(job, 2.0, "loss is nan", progressed=False, own=True)
    assert job.state == JobState.FAILED and job.failures == 2 and job.index not in core.queued


class _Clock:
    """Virtual time for the emulated trainer: ``sleep`` moves it on at once, so that the
    schedule's arithmetic is checked exactly, whatever else the machine is doing."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.now += seconds


def _stalled_emulated_job(
    monkeypatch: pytest.MonkeyPatch, stall_s: float, iterations: int
) -> tuple[float, float, float]:
    """An emulated job of one process (10 ms iterations, 50 ms steps) that stalls ``stall_s``
    after its first step, then runs to ``iterations``, on virtual time: the seconds it took in
    all, the seconds it reports it fell behind for good, and those its steps were scheduled
    to take."""
    import socket

    import torch.distributed as dist

    from unstall.live import training
    from unstall.live.training import JobWork, SegmentControl, SegmentPlan, _EmulatedTrainer

    clock = _Clock()
    monkeypatch.setattr(training, "time", clock)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        work = JobWork(job_id="j", model="mlp", iterations=1000.0, emulated=True)
        plan = SegmentPlan(
            work=work,
            rank=0,
            world_size=1,
            master_addr="127.0.0.1",
            master_port=port,
            iteration_wall_s=0.01,
            step_wall_s=0.05,
        )
        control = SegmentControl()
        trainer = _EmulatedTrainer(plan, control)
        began = clock.monotonic()
        done = trainer.step(0.0, control)
        clock.sleep(stall_s)  # the machine's cores were busy elsewhere
        while done < iterations:
            done += trainer.step(done, control)
        return clock.monotonic() - began, trainer.behind_s, trainer.scheduled_s
    finally:
        dist.destroy_process_group()


def test_an_emulated_job_that_fell_behind_catches_up_with_its_schedule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The emulating machine's cores may be busy elsewhere for a moment (a test suite, other
    # emulated GPUs): the job's processes catch up instead of losing that time for good.
    took, behind, scheduled = _stalled_emulated_job(monkeypatch, 0.4, 80)  # 8 steps' stall
    # (To float32 precision: the iteration time crosses the all-reduce as a float32.)
    assert took == pytest.approx(0.8, rel=1e-6), took  # not 0.8 + 0.4
    assert behind == 0.0
    # What the perf model prescribed, to the iteration: the live run's communication overhead
    # is measured on it, not on the wall time with the emulation's own latencies.
    assert scheduled == pytest.approx(80 * 0.01, rel=1e-6)


def test_an_emulated_job_further_behind_than_it_may_catch_up_says_by_how_much(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from unstall.live import training

    monkeypatch.setattr(training, "CATCH_UP_S", 0.1)
    # The first step (5 iterations) ends at 0.05 s; the stall brings the second to 0.55 s,
    # 0.5 s behind its schedule: 0.1 s is caught up, 0.4 s lost; the rest runs to schedule.
    took, behind, scheduled = _stalled_emulated_job(monkeypatch, 0.5, 40)
    assert behind == pytest.approx(0.4, rel=1e-6), behind
    assert scheduled == pytest.approx(40 * 0.01, rel=1e-6)
    assert took == pytest.approx(scheduled + behind, rel=1e-6)
