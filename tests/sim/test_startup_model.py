"""The start-up model: what a job's start-up and restores cost by what its placement spans and
its model (wall seconds x a live run's speedup), its fit on live runs' measured set-ups, its
file, and the simulator charging it."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from unstall.errors import DataFileError, UnstallError
from unstall.net import TopologyConfig
from unstall.sched.base import ClusterLayout, ClusterSnapshot, Decision, Preempt, Start
from unstall.sim import (
    SetupTerms,
    StartupModel,
    default_startup_model,
    fit_startup_model,
    read_setups,
    simulate,
)
from unstall.sim.startup import resolve_startup_model, spans
from unstall.traces import Trace

TERMS = SetupTerms(base_s=0.5, per_gpu_s=0.01, per_node_s=0.2, per_rack_s=0.4)
RESTORE = SetupTerms(base_s=0.3, per_gpu_s=0.0, per_node_s=0.1, per_rack_s=0.0)
MODEL = StartupModel(startup=TERMS, restore=RESTORE)
RACKS = (0, 0, 1, 1)  # four nodes in two racks


def test_a_placement_spans_its_gpus_nodes_and_racks() -> None:
    assert spans(((0, 4),), RACKS) == (4, 1, 1)
    assert spans(((0, 2), (1, 2)), RACKS) == (4, 2, 1)
    assert spans(((1, 1), (2, 3)), RACKS) == (4, 2, 2)


def test_a_set_up_grows_with_each_node_and_rack_beyond_the_first_times_the_speedup() -> None:
    assert MODEL.startup_s("m", ((0, 1),), RACKS) == pytest.approx(0.5)
    assert MODEL.startup_s("m", ((0, 4),), RACKS) == pytest.approx(0.5 + 0.03)
    assert MODEL.startup_s("m", ((1, 2), (2, 2)), RACKS) == pytest.approx(0.5 + 0.03 + 0.2 + 0.4)
    assert MODEL.restore_s("m", ((0, 2), (1, 2)), RACKS) == pytest.approx(0.4)
    # Wall seconds are trace seconds times the live run's speedup.
    fast = MODEL.for_speedup(20.0)
    assert fast.startup_s("m", ((0, 1),), RACKS) == pytest.approx(10.0)
    with pytest.raises(ValueError, match=r"StartupModel\.speedup: must be > 0"):
        MODEL.for_speedup(0.0)


def test_a_model_offset_applies_to_its_model_only_and_never_below_zero() -> None:
    terms = SetupTerms(
        base_s=0.5, per_gpu_s=0, per_node_s=0, per_rack_s=0, by_model_s=(("big", 2.0), ("x", -1))
    )
    assert terms.wall_s("big", 1, 1, 1) == pytest.approx(2.5)
    assert terms.wall_s("other", 1, 1, 1) == pytest.approx(0.5)
    assert terms.wall_s("x", 1, 1, 1) == 0.0


def _setups(rng: np.random.Generator, n: int, truth: SetupTerms, kind: str) -> pd.DataFrame:
    gpus = rng.choice([1, 2, 4, 8], size=n)
    nodes = np.where(gpus == 8, 2, np.where(rng.random(n) < 0.3, np.minimum(gpus, 2), 1))
    racks = np.where((nodes > 1) & (rng.random(n) < 0.5), 2, 1)
    models = rng.choice(["a", "b"], size=n)
    wall = [
        truth.wall_s(m, int(g), int(k), int(r)) * rng.uniform(0.95, 1.05)
        for m, g, k, r in zip(models, gpus, nodes, racks, strict=True)
    ]
    frame = pd.DataFrame(
        {"kind": kind, "model": models, "gpus": gpus, "nodes": nodes, "racks": racks}
    )
    return frame.assign(setup_wall_s=wall)


def test_the_fit_finds_the_terms_a_few_set_ups_ten_times_too_long_do_not_drag() -> None:
    rng = np.random.default_rng(3)
    setups = pd.concat(
        [_setups(rng, 80, TERMS, "startup"), _setups(rng, 30, RESTORE, "restore")],
        ignore_index=True,
    )
    slow = setups.sample(5, random_state=1).index  # a busy machine's stalls
    setups.loc[slow, "setup_wall_s"] *= 10
    model = fit_startup_model(setups, source="synthetic")
    for fitted, truth in ((model.startup, TERMS), (model.restore, RESTORE)):
        assert fitted.base_s == pytest.approx(truth.base_s, abs=0.05)
        assert fitted.per_node_s == pytest.approx(truth.per_node_s, abs=0.05)
        assert fitted.per_rack_s == pytest.approx(truth.per_rack_s, abs=0.05)
        assert fitted.median_abs_error_s < 0.05
    assert model.startup.samples == 80 and model.restore.samples == 30


def test_a_kind_with_too_few_set_ups_takes_the_others_terms() -> None:
    setups = _setups(np.random.default_rng(0), 20, TERMS, "startup")
    model = fit_startup_model(setups)
    assert model.restore.samples == 0 and model.startup.samples == 20
    assert model.restore.base_s == model.startup.base_s
    assert model.restore.per_node_s == model.startup.per_node_s
    with pytest.raises(UnstallError, match="too few set-ups"):
        fit_startup_model(setups.iloc[:2])


def test_a_model_that_sits_apart_gets_an_offset_of_its_own() -> None:
    rng = np.random.default_rng(1)
    setups = _setups(rng, 60, TERMS, "startup")
    setups.loc[setups["model"] == "b", "setup_wall_s"] += 3.0
    model = fit_startup_model(setups)
    offsets = dict(model.startup.by_model_s)
    # b is the slower by 3 s, shrunk by n / (n + 5): a model seen a few times says little.
    n = int((setups["model"] == "b").sum())
    assert offsets["b"] - offsets.get("a", 0.0) == pytest.approx(3.0 * n / (n + 5), rel=0.1)


def _live_json(path: Path, setups: pd.DataFrame, compute: str = "emulated") -> Path:
    body = {"result": {}, "live": {"compute": compute, "speedup": 10.0}}
    body["setups"] = setups.assign(job_id="j", placement="0:1").to_dict("records")
    path.write_text(json.dumps(body, default=float))
    return path


def test_live_runs_json_is_read_and_a_file_that_is_not_one_is_named(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    one = _live_json(tmp_path / "one.json", _setups(rng, 10, TERMS, "startup"))
    two = _live_json(tmp_path / "two.json", _setups(rng, 6, RESTORE, "restore"))
    setups, compute = read_setups([one, two])
    assert len(setups) == 16 and compute == "emulated"
    assert set(setups["run"]) == {str(one), str(two)}
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"result": {}, "live": {}}))
    with pytest.raises(DataFileError, match=r"old\.json.*setups.*run it again"):
        read_setups([old])
    (tmp_path / "sim.json").write_text(json.dumps({"policy": "fifo"}))
    with pytest.raises(DataFileError, match="not a live run's JSON"):
        read_setups([tmp_path / "sim.json"])
    real = _live_json(tmp_path / "real.json", _setups(rng, 6, TERMS, "startup"), "real")
    with pytest.raises(UnstallError, match="mix compute modes"):
        read_setups([one, real])


def test_a_model_file_round_trips_and_a_broken_one_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "model.json"
    fitted = fit_startup_model(_setups(np.random.default_rng(4), 20, TERMS, "startup"))
    fitted.save(path)
    assert StartupModel.load(path) == fitted
    assert resolve_startup_model(str(path), owner="t", field="f") == fitted
    body = json.loads(path.read_text())
    del body["restore"]["per_node_s"]
    path.write_text(json.dumps(body))
    with pytest.raises(DataFileError, match=r"model\.json.*restore\.per_node_s"):
        StartupModel.load(path)
    with pytest.raises(TypeError, match="startup_model"):
        resolve_startup_model(3.0, owner="simulate", field="startup_model")  # type: ignore[arg-type]
    assert resolve_startup_model("none", owner="t", field="f") is None


def test_the_package_ships_a_fitted_model_that_says_how_it_was_fitted() -> None:
    model = default_startup_model()
    assert resolve_startup_model("default", owner="t", field="f") is model
    assert model.startup.samples >= 20 and model.source and "live calibrate" in model.command
    assert model.speedup == 1.0 and model.compute == "emulated"
    # Within a node, a start-up takes a fraction of a wall second to a few on this emulation.
    assert 0.0 < model.startup.wall_s("resnet50", 1, 1, 1) < 5.0


# --- the simulator charging it ------------------------------------------------------------------

CLUSTER = TopologyConfig(name="four", racks=2, nodes_per_rack=2, gpus_per_node=2)


def _trace(rows: list[tuple[str, float, int, float]]) -> Trace:
    frame = pd.DataFrame(rows, columns=["job_id", "submit_s", "num_gpus", "duration_s"])
    return Trace.from_frame(frame.assign(model="resnet50"), source="jobs")


class _Spread:
    """Starts ``a`` over nodes 1 and 2 (two racks), ``b`` on node 0; preempts ``b`` when ``c``
    arrives and gives it back its GPUs once ``c`` is done."""

    name = "spread"
    needs_oracle = False

    def reset(self) -> None:
        self.preempted = False

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        queued = {job.job_id for job in snapshot.queued}
        running = {job.job_id for job in snapshot.running}
        starts = []
        if "a" in queued:
            starts.append(Start("a", ((1, 1), (2, 1))))
        if "c" in queued and "b" in running:
            self.preempted = True
            return Decision(preemptions=(Preempt("b"),), starts=(Start("c", ((0, 2),)),))
        if "b" in queued and "c" not in running:
            starts.append(Start("b", ((0, 2),)))
        return Decision(starts=tuple(starts))


def test_the_simulator_charges_each_start_by_what_it_spans_and_each_restore() -> None:
    trace = _trace([("a", 0.0, 2, 100.0), ("b", 0.0, 2, 100.0), ("c", 10.0, 2, 50.0)])
    speedup = 10.0
    model = MODEL.for_speedup(speedup)
    run = simulate(trace, CLUSTER, _Spread(), startup_model=model)
    plain = simulate(trace, CLUSTER, _Spread())
    jct, before = run.jobs.set_index("job_id")["jct_s"], plain.jobs.set_index("job_id")["jct_s"]
    layout = ClusterLayout.regular(racks=2, nodes_per_rack=2, gpus_per_node=2)
    spread = model.startup_s("resnet50", ((1, 1), (2, 1)), layout.node_rack)
    assert spread == pytest.approx(speedup * (0.5 + 0.01 + 0.2 + 0.4))
    # a: its spread start-up, no restore (without a model: no start-up at all).
    assert jct["a"] - before["a"] == pytest.approx(spread)
    # b: a start-up on one node, then a restore where the model says, not the fixed 60 s.
    assert run.result.preemptions == plain.result.preemptions == 1
    one_node = speedup * (0.5 + 0.01)
    restore = speedup * 0.3
    c_start = speedup * (0.5 + 0.01)
    assert jct["c"] == pytest.approx(50.0 + c_start)
    # b ran 10 - one_node s of its 100 by c's arrival, waits for c, restores, runs the rest.
    b_finish = (10.0 + c_start + 50.0) + restore + (100.0 - (10.0 - one_node))
    assert jct["b"] == pytest.approx(b_finish)
    # A fixed restore given with the model replaces the model's restores only.
    fixed = simulate(trace, CLUSTER, _Spread(), startup_model=model, restore_s=7.0)
    assert fixed.jobs.set_index("job_id")["jct_s"]["b"] == pytest.approx(b_finish - restore + 7.0)


def test_without_a_model_the_simulator_keeps_its_fixed_times() -> None:
    """simulate()'s defaults are unchanged (start-up 0, restore 60 s): the fingerprints of
    every policy hold; the command line turns the model on."""
    trace = _trace([("a", 0.0, 2, 100.0), ("b", 0.0, 2, 100.0), ("c", 10.0, 2, 50.0)])
    run = simulate(trace, CLUSTER, _Spread(), startup_model="none")
    jct = run.jobs.set_index("job_id")["jct_s"]
    assert jct["a"] == pytest.approx(100.0)
    assert jct["b"] == pytest.approx(10.0 + 50.0 + 60.0 + 90.0)
