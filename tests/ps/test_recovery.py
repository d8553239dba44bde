"""A worker or server process killed mid-run (by its PID, as the kernel's OOM killer would):
with recovery on, the run goes on from the last snapshot with fresh actors and ends exact
against the reference, with the parameters an unkilled run ends with; without it, the run
ends with one line naming the dead actor and the iteration."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import ray

from ps_helpers import tiny_run
from unstall import ps
from unstall.ps.coordinator import FAILURE_WAIT_S
from unstall.ps.runtime import ActorPool
from unstall.ps.scenarios import Scenario

pytestmark = pytest.mark.usefixtures("ray_session")

KILL_AFTER = 2  # iterations done before the kill


class RecordingPool(ActorPool):
    """A pool that remembers the servers it handed out, so a test can find their PIDs."""

    def __init__(self) -> None:
        super().__init__()
        self.handed_out: list[Any] = []

    def take_server(self) -> Any:
        server = super().take_server()
        self.handed_out.append(server)
        return server


@pytest.fixture(scope="module")
def pool() -> Iterator[RecordingPool]:
    pool = RecordingPool()
    yield pool
    pool.close()


def killer(
    pool: RecordingPool, target: str, after: int = KILL_AFTER, done: dict[str, Any] | None = None
) -> Any:
    """A progress callback that SIGKILLs ``target`` (``worker`` 1 or ``server`` 1) once, when
    ``after`` iterations are done; it counts the iterations reported in ``done``."""
    done = {} if done is None else done
    done |= {"iterations": 0, "killed": False}

    first_server = len(pool.handed_out)  # servers of earlier runs come back to the pool

    def progress(n: int) -> None:
        done["iterations"] += n
        if done["iterations"] == after and not done["killed"]:
            servers = pool.handed_out[first_server:]
            actor = pool.workers[1] if target == "worker" else servers[1]
            os.kill(ray.get(actor.pid.remote()), signal.SIGKILL)
            done["killed"] = True

    return progress


@pytest.mark.parametrize("target", ["server", "worker"])
def test_a_run_survives_a_killed_process_with_the_unkilled_result(
    pool: RecordingPool, fast_scenario: Scenario, target: str
) -> None:
    options: dict[str, Any] = {
        "iterations": 5,
        "optimizer": ps.SGDConfig(lr=0.05, momentum=0.9),
        "check_reference": True,
    }
    unkilled = tiny_run(fast_scenario, pool=pool, **options)
    survived = tiny_run(
        fast_scenario,
        pool=pool,
        max_recoveries=1,
        progress=killer(pool, target),
        **options,
    )
    assert len(survived.recoveries) == 1, survived.recoveries
    recovery = survived.recoveries[0]
    assert f"{target} 1 died" in recovery.failure
    assert recovery.iteration == KILL_AFTER and recovery.restarted_at == KILL_AFTER
    assert recovery.seconds >= 0
    assert survived.params_match_reference is True
    assert survived.iterations == 5 and len(survived.telemetry) == 5
    for name, value in unkilled.state_dict.items():
        np.testing.assert_array_equal(survived.state_dict[name], value, err_msg=name)
    assert "recoveries" in survived.to_dict()


def test_rarer_snapshots_re_run_the_iterations_since_the_last_with_the_unkilled_result(
    pool: RecordingPool, fast_scenario: Scenario
) -> None:
    """Snapshots after iterations 3 and 6 of 8; killed after 5 are done: the run goes on from
    3 and re-runs 3 and 4 (reported once each) to the result of an unkilled run."""
    options: dict[str, Any] = {
        "iterations": 8,
        "optimizer": ps.SGDConfig(lr=0.05, momentum=0.9),
        "check_reference": True,
    }
    unkilled = tiny_run(fast_scenario, pool=pool, **options)
    reported: dict[str, Any] = {}
    survived = tiny_run(
        fast_scenario,
        pool=pool,
        max_recoveries=1,
        snapshot_every=3,
        progress=killer(pool, "server", after=5, done=reported),
        **options,
    )
    (recovery,) = survived.recoveries
    assert recovery.iteration == 5 and recovery.restarted_at == 3, recovery
    assert reported["iterations"] == 8
    assert survived.params_match_reference is True
    assert survived.iterations == 8 and len(survived.telemetry) == 8
    for name, value in unkilled.state_dict.items():
        np.testing.assert_array_equal(survived.state_dict[name], value, err_msg=name)


def test_without_recovery_a_killed_server_ends_the_run_naming_it(
    pool: RecordingPool, fast_scenario: Scenario
) -> None:
    with pytest.raises(ps.PSActorDiedError, match=f"server 1 died during iteration {KILL_AFTER}"):
        tiny_run(fast_scenario, pool=pool, iterations=5, progress=killer(pool, "server"))


# It waits out the timeout on purpose: the default suite waits out a short one.
@pytest.mark.parametrize("timeout_s", [pytest.param(6.0, marks=pytest.mark.slow), 2.0])
def test_a_stopped_server_ends_the_run_after_the_timeout_not_twice_it(
    pool: RecordingPool, fast_scenario: Scenario, timeout_s: float
) -> None:
    # Every actor of the timed run started already (earlier tests' killed ones replaced): on a
    # loaded machine starting a process can outlast the short timeout below.
    tiny_run(fast_scenario, pool=pool, iterations=1)
    first_server = len(pool.handed_out)
    stopped: dict[str, float] = {}

    def stop_server_1(n: int) -> None:
        if not stopped:
            pid = ray.get(pool.handed_out[first_server + 1].pid.remote())
            os.kill(pid, signal.SIGSTOP)  # hung, not dead: only the timeout can tell
            stopped["at"] = time.monotonic()

    with pytest.raises(
        ps.PSTimeoutError,
        match=rf"iteration 1: no reply in {timeout_s:g} s from .*; not answering a ping: "
        r"server 1 \(if it",
    ):
        tiny_run(
            fast_scenario, pool=pool, iterations=4, timeout_s=timeout_s, progress=stop_server_1
        )
    waited = time.monotonic() - stopped["at"]
    # The timeout, and the short wait for the other actors' answers (FAILURE_WAIT_S, twice).
    assert timeout_s <= waited < timeout_s + 4 * FAILURE_WAIT_S + 2, waited
    # The stopped server was killed, not given back to the pool: the next run is healthy.
    assert tiny_run(fast_scenario, pool=pool, iterations=2).iterations == 2
