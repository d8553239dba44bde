"""docs/topology.md is the schema of topology files: every field is on it, every example on it
loads, and its hand-written copy of the small preset gives the preset's results."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from unstall.net import CALIBRATED_NETWORK_EFFICIENCY, TopologyConfig, load_topology, small
from unstall.sched import make_policy
from unstall.sim import congestion_level, simulate
from unstall.traces import default_trace

PAGE = Path(__file__).resolve().parents[2] / "docs" / "topology.md"
BLOCK = re.compile(r"^```(toml|json)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def examples() -> list[tuple[str, str]]:
    return BLOCK.findall(PAGE.read_text())


def test_every_field_is_documented() -> None:
    text = PAGE.read_text()
    for field in [f.name for f in dataclasses.fields(TopologyConfig)] + ["preset"]:
        assert f"| `{field}` |" in text, f"docs/topology.md lacks a row for {field}"


@pytest.mark.parametrize("index", range(len(examples())))
def test_every_example_loads(index: int, tmp_path: Path) -> None:
    suffix, body = examples()[index]
    path = tmp_path / f"example{index}.{suffix}"
    path.write_text(body)
    cluster = load_topology(path)
    assert cluster.n_gpus > 0


def test_the_hand_copy_of_small_runs_as_the_preset(tmp_path: Path) -> None:
    suffix, body = examples()[0]
    path = tmp_path / f"copy.{suffix}"
    path.write_text(body)
    copy = load_topology(path)
    assert copy.name == "small-by-hand"
    assert copy.network_efficiency == CALIBRATED_NETWORK_EFFICIENCY
    assert dataclasses.replace(copy, name="small") == small()
    runs = [
        simulate(
            default_trace(), c, make_policy("fifo"), congestion=congestion_level("low"), max_jobs=80
        ).jobs
        for c in (copy, small())
    ]
    assert runs[0].equals(runs[1])
