"""What the live tests on the suite's test cluster share: its topology file, a fresh
interpreter that runs a script against it, and waiting on events instead of sleeping."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import unstall

SRC = str(Path(unstall.__file__).resolve().parents[1])
# The test cluster (tests/ray_cluster.py) as a topology: two nodes of two GPUs, a rack each.
TWO_NODES = """\
name = "two"
racks = 2
nodes_per_rack = 1
gpus_per_node = 2
nic = "25g"
oversubscription = 2
"""

# FIFO that writes the file ``marker`` (the trace time in it) at its first round where at
# least ``finished`` jobs have finished and ``running`` jobs run; until then it asks to be
# called every ``every_s`` trace seconds. A test waits for the file, not for a guessed time.
MARKING_FIFO = """\
import dataclasses
from pathlib import Path

from unstall.sched.base import SetTimer
from unstall.sched.fifo import Fifo


@dataclasses.dataclass
class MarkingFifo(Fifo):
    marker: str = "marker"
    finished: int = 0
    running: int = 0
    every_s: float = 1.0

    def reset(self):
        self.seen_finished = 0
        self.written = False

    def decide(self, snapshot, rng):
        decision = super().decide(snapshot, rng)
        self.seen_finished += len(snapshot.finished)
        if self.written:
            return decision
        if self.seen_finished >= self.finished and len(snapshot.running) >= self.running:
            Path(self.marker).write_text(str(snapshot.now))
            self.written = True
            return decision
        look = SetTimer(snapshot.now + self.every_s, "look")
        return dataclasses.replace(decision, timers=(*decision.timers, look))
"""


# A policy that moves its one job around: a preemption and a migration at known times.
MOVING_POLICY = """\
from unstall.sched.base import Decision, Migrate, Preempt, SetTimer, Start


class MoveAround:
    '''Starts the one job on node 0, migrates it to node 1, preempts it, restarts it on node 0,
    each step hold_s trace seconds after the last; on gpus GPUs of each node. free_seen: the
    free GPUs by node each step found.'''

    name = "move-around"
    needs_oracle = False

    def __init__(self, hold_s: float = 1.0, gpus: int = 1) -> None:
        self.hold_s = hold_s
        self.gpus = gpus
        self.stage = 0
        self.free_seen = []

    def reset(self) -> None:
        self.stage = 0
        self.free_seen = []

    def decide(self, snapshot, rng):
        stage = self.stage
        decision = self._decide(snapshot)
        if self.stage != stage:
            self.free_seen.append(list(snapshot.free_by_node))
        return decision

    def _decide(self, snapshot):
        now, fired = snapshot.now, snapshot.fired_timers
        later = lambda key: (SetTimer(now + self.hold_s, key),)
        if self.stage == 0 and snapshot.queued:
            self.stage = 1
            job = snapshot.queued[0].job_id
            return Decision(starts=(Start(job, ((0, self.gpus),)),), timers=later("move"))
        if self.stage == 1 and "move" in fired and snapshot.running:
            self.stage = 2
            job = snapshot.running[0].job_id
            return Decision(migrations=(Migrate(job, ((1, self.gpus),)),), timers=later("stop"))
        if self.stage == 2 and "stop" in fired and snapshot.running:
            self.stage = 3
            job = snapshot.running[0].job_id
            return Decision(preemptions=(Preempt(job),), timers=later("again"))
        if self.stage == 3 and "again" in fired and snapshot.queued:
            self.stage = 4
            return Decision(starts=(Start(snapshot.queued[0].job_id, ((0, self.gpus),)),))
        return Decision()
"""


def live_env() -> dict[str, str]:
    """The environment of a process that joins the test cluster: this tree's unstall, and a
    driver that cannot reach the cluster gives up in seconds, not Ray's minute."""
    return {**os.environ, "PYTHONPATH": SRC, "RAY_gcs_rpc_server_reconnect_timeout_s": "10"}


def run_script(script: str, cwd: Path, timeout: float = 400) -> dict[str, object]:
    """Run ``script`` in a fresh interpreter; it writes its findings to ``out.json``."""
    path = cwd / "script.py"
    path.write_text(textwrap.dedent(script))
    done = subprocess.run(
        [sys.executable, str(path)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=live_env(),
        cwd=cwd,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    found: dict[str, object] = json.loads((cwd / "out.json").read_text())
    return found


def wait_for_file(path: Path, child: subprocess.Popen[str], timeout: float = 240) -> None:
    """Return once ``path`` exists; fail if ``child`` ends first or the time runs out."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if child.poll() is not None:
            out = child.stdout.read() if child.stdout is not None else ""
            raise AssertionError(f"the run ended ({child.returncode}) before {path}:\n{out}")
        if time.monotonic() > deadline:
            child.kill()
            raise AssertionError(f"no {path} after {timeout} s")
        time.sleep(0.02)


def executors_left(address: str, where: Path) -> list[str]:
    """The live executors still alive on the cluster at ``address``."""
    found = run_script(
        f"""
        import json, ray
        from unstall.live.pool import EXECUTOR_PREFIX
        ray.init(address={address!r}, log_to_driver=False)
        names = [n for n in ray.util.list_named_actors(all_namespaces=True)
                 if str(n.get("name", n) if isinstance(n, dict) else n).startswith(EXECUTOR_PREFIX)]
        json.dump({{"left": [str(n) for n in names]}}, open("out.json", "w"))
        """,
        where,
    )
    return list(found["left"])  # type: ignore[call-overload]


def ray_node_of(address: str, label: str, where: Path) -> str:
    """The Ray node id of the cluster's node labelled ``unstall.node=label``."""
    found = run_script(
        f"""
        import json, ray
        ray.init(address={address!r}, log_to_driver=False)
        ids = [n["NodeID"] for n in ray.nodes()
               if n["Alive"] and (n.get("Labels") or {{}}).get("unstall.node") == {label!r}]
        json.dump({{"id": ids[0]}}, open("out.json", "w"))
        """,
        where,
    )
    return str(found["id"])


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (a one-process group's rendezvous)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
