"""The PTB benchmark's comparison of runs over seeds (benchmarks/lstm_ptb.py --compare)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from conftest import load_benchmark


def _bench() -> ModuleType:
    return load_benchmark("lstm_ptb")


def _run(
    mode: str,
    seed: int,
    valid: float,
    train_s: float = 100.0,
    *,
    earlier: list[float] | None = None,
) -> dict[str, Any]:
    """One run; ``earlier``: the validation perplexities of the epochs before the last."""
    config = {"mode": mode, "hidden": 8, "layers": 2, "batch": 4, "bptt": 5, "p": 0.5}
    config |= {"seed": seed, "threads": 1, "input_mask_steps": 1, "decoder_mask_steps": 1}
    epochs = [
        {"epoch": i + 1, "train_s": train_s, "train_ppl": 2 * v, "valid_ppl": v}
        for i, v in enumerate([*(earlier or []), valid])
    ]
    return {"config": config, "result": {"epochs": epochs, "test_ppl": valid}}


def test_seeds_are_told_apart_and_their_gaps_averaged(tmp_path: Path) -> None:
    bench = _bench()
    paths = []
    for seed, (std, struct) in enumerate([(100.0, 105.0), (200.0, 196.0), (50.0, 50.5)]):
        for mode, valid in (("standard", std), ("structured", struct)):
            path = tmp_path / f"{mode}{seed}.json"
            path.write_text(json.dumps({"runs": {mode: _run(mode, seed, valid)}}))
            paths.append(path)
    runs = bench.merge_runs(paths)
    assert set(runs) == {"standard", "structured", "standard s1", "structured s1"} | {
        "standard s2",
        "structured s2",
    }
    report = bench.compare(runs)
    # each structured run against the standard run of its own seed
    assert report["summary"]["structured s1"]["valid_ppl_rel_diff_vs_standard"] == pytest.approx(
        -0.02
    )
    seeds = report["across_seeds"]["structured"]
    assert seeds["seeds"] == [0, 1, 2]
    assert seeds["gaps"] == pytest.approx([0.05, -0.02, 0.01])
    assert seeds["mean_gap"] == pytest.approx(0.04 / 3)
    assert seeds["meets_ppl_goal_on_mean"]


def test_one_seed_gives_no_mean_and_a_repeated_run_is_refused(tmp_path: Path) -> None:
    bench = _bench()
    runs = {"standard": _run("standard", 0, 100.0), "structured": _run("structured", 0, 110.0)}
    assert bench.compare(runs)["across_seeds"] == {}
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"runs": {"structured": _run("structured", 0, 110.0)}}))
    with pytest.raises(SystemExit, match="twice with the same batch, threads, seed and device"):
        bench.merge_runs([path, path])


def test_the_gap_is_given_after_every_epoch_and_averaged_over_seeds() -> None:
    bench = _bench()
    runs = {
        "standard": _run("standard", 0, 200.0, earlier=[400.0]),
        "structured": _run("structured", 0, 202.0, earlier=[440.0]),
        "standard s1": _run("standard", 1, 200.0, earlier=[400.0]),
        "structured s1": _run("structured", 1, 196.0, earlier=[420.0]),
    }
    report = bench.compare(runs)
    assert report["summary"]["structured"]["valid_ppl_gap_by_epoch"] == pytest.approx([0.1, 0.01])
    assert report["summary"]["structured s1"]["valid_ppl_gap_by_epoch"] == pytest.approx(
        [0.05, -0.02]
    )
    seeds = report["across_seeds"]["structured"]
    assert seeds["mean_gap_by_epoch"] == pytest.approx([0.075, -0.005])
    assert seeds["mean_gap"] == pytest.approx(-0.005)
