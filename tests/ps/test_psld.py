"""PSLD on Ray: the reference invariant through forced migrations and a scale-out and scale-in
(the elastic fields of a psld run's result from the shell: tests/cli/test_cli_ps_psld.py)."""

from __future__ import annotations

from typing import Any

import pytest

from ps_helpers import ScriptedController, tiny_run
from unstall.ps import ControllerConfig, PSLDStrategy
from unstall.ps.psld.controller import PSLDController
from unstall.ps.scenarios import Scenario, scenario_from_mapping

pytestmark = pytest.mark.usefixtures("ray_session")


def test_psld_matches_the_reference_through_migrations_and_scaling(
    ps_pool: Any, fast_scenario: Scenario
) -> None:
    controller = ScriptedController()
    controller.script_done = []

    def scripted(config: ControllerConfig) -> PSLDController:
        return controller

    r = tiny_run(
        fast_scenario,
        strategy=PSLDStrategy(make_controller=scripted),
        iterations=5,
        spares=1,
        check_reference=True,
        pool=ps_pool,
    )
    assert r.params_match_reference is True
    assert r.reference_max_rel_err is not None and r.reference_max_rel_err <= 1e-6
    assert (r.scale_outs, r.scale_ins) == (1, 1)
    # The warm start's placement, then a forced decision at each of the five boundaries.
    assert r.elastic_events[0].kind == "WarmStart"
    assert len(r.elastic_events) == 6 and r.migrations >= 4  # a shuffle may move nothing
    assert r.servers_over_time == (4, 4, 3, 3, 3)
    assert r.max_pause_s > 0 and r.total_pause_s >= r.max_pause_s
    assert set(r.server_bytes) == {"1", "2", "3"}  # server 0 was drained and stopped
    # Every pause went back to the controller, whose hysteresis now predicts from them.
    assert controller.pauses.source() == "learned from 5 pause(s)"
    assert controller.pauses.start_s != controller.config.scale_out_cost_s


def owned_in_first_iteration(r: Any) -> dict[int, int]:
    return {s.server: s.owned_bytes for s in r.telemetry[0].servers}


def test_warm_start_gives_the_slow_server_less_from_the_first_iteration(
    ps_pool: Any, fast_scenario: Scenario
) -> None:
    """Server 2 (100 MB/s against 500) is probed slow before iteration 0 and starts with less;
    switched off, the run starts from the even split. Both stay exact."""
    warm = tiny_run(fast_scenario, strategy=PSLDStrategy(), check_reference=True, pool=ps_pool)
    assert warm.params_match_reference is True
    first = warm.elastic_events[0]
    assert first.kind == "WarmStart" and first.chunks_moved == 0 and "2: " in first.reason
    owned = owned_in_first_iteration(warm)
    assert owned[2] < min(owned[0], owned[1])
    # Its time is part of the run, not of the decisions' pauses.
    assert warm.warm_start_s > 0 and warm.total_s == pytest.approx(
        sum(t.iter_s + t.boundary_s for t in warm.telemetry) + warm.warm_start_s
    )
    assert warm.total_pause_s == sum(e.pause_s for e in warm.elastic_events[1:])
    # Nothing changes in this scenario: the probes sent with the iterations trip nothing.
    assert not any(e.held for e in warm.elastic_events)
    assert all(t.held_s == 0 for t in warm.telemetry)

    cold_strategy = PSLDStrategy(config=ControllerConfig(warm_start=False))
    cold = tiny_run(fast_scenario, strategy=cold_strategy, check_reference=True, pool=ps_pool)
    assert cold.params_match_reference is True
    assert cold.warm_start_s == 0 and all(e.kind != "WarmStart" for e in cold.elastic_events)
    even = owned_in_first_iteration(cold)
    assert max(even.values()) - min(even.values()) <= 4_096  # one chunk of the tiny model


# The slow link moves from server 2 to server 0 at iteration 2 (of 4).
MOVING = {
    "name": "moving",
    "servers": 3,
    "base": {"bandwidth_mb_s": 5.0, "latency_ms": 0.1},
    "phases": [
        {"start": 0.0, "servers": [{"server": 2, "bandwidth_mb_s": 1.25}]},
        {"start": 0.5, "servers": [{"server": 0, "bandwidth_mb_s": 1.25}]},
    ],
}


def test_a_boundary_probe_unloads_a_new_straggler_before_its_first_iteration(
    ps_pool: Any,
) -> None:
    """Probed at the boundary, server 0 runs iteration 2 with less already (without a probe,
    only iteration 3 would)."""
    moving = scenario_from_mapping(MOVING, "moving.json")
    strategy = PSLDStrategy(config=ControllerConfig(probe_every=1, probe_in_step=False))
    steps: list[str] = []
    r = tiny_run(
        moving,
        strategy=strategy,
        iterations=4,
        check_reference=True,
        pool=ps_pool,
        progress=lambda n: steps.append("trained"),
        check_progress=lambda n: steps.append("replayed"),
    )
    assert r.params_match_reference is True
    assert steps == ["trained"] * 4 + ["replayed"] * 4  # the check's replay reports too
    owned = [{s.server: s.owned_bytes for s in t.servers} for t in r.telemetry]
    assert owned[0][2] < min(owned[0][0], owned[0][1])
    assert owned[2][0] < min(owned[2][1], owned[2][2])
    moves = [e for e in r.elastic_events if e.kind == "Reassign"]
    assert moves and moves[0].iteration == 1  # decided after iteration 1, from the probe


@pytest.mark.parametrize("in_step", [True, False])
def test_a_probe_sent_with_the_iteration_holds_the_pushes_for_a_new_straggler(
    ps_pool: Any, in_step: bool
) -> None:
    """With ``probe_in_step`` (the default) the servers are probed as iteration 2 starts:
    server 0's probe trips its wire, the pushes wait while its chunks move, and server 0 has
    less in iteration 2 itself; exact all the same. Without it, only iteration 3 would."""
    moving = scenario_from_mapping(MOVING, "moving.json")
    strategy = PSLDStrategy(config=ControllerConfig(probe_in_step=in_step))
    r = tiny_run(moving, strategy=strategy, iterations=4, check_reference=True, pool=ps_pool)
    assert r.params_match_reference is True
    owned = [{s.server: s.owned_bytes for s in t.servers} for t in r.telemetry]
    assert (owned[2][0] < min(owned[2][1], owned[2][2])) is in_step
    assert owned[3][0] < min(owned[3][1], owned[3][2])
    held = [e for e in r.elastic_events if e.held]
    if in_step:
        assert [(e.iteration, e.kind) for e in held] == [(1, "Reassign")]
        assert r.telemetry[2].held_s >= held[0].pause_s > 0
        assert all(t.held_s == 0 for t in r.telemetry if t.iteration != 2)
    else:
        assert held == [] and all(t.held_s == 0 for t in r.telemetry)
