"""`unstall ps train --address` on the suite's multi-node Ray test cluster (``ray_test_cluster``:
a head and a second node on loopback): user code from files that import each other reaches every
node through ``--working-dir``, PSLD runs exact against the reference with actors on both
nodes, and a plain local run still works while that cluster is up.

Each run is a separate ``unstall`` process (this test process may already be connected to the
suite's own Ray), with a time limit: a connection that hangs (as it did when a loopback address
was rewritten to the machine's network address) fails the test in minutes, not fourteen."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import unstall

RUN_LIMIT_S = 240
SRC = str(Path(unstall.__file__).resolve().parents[1])

LAYERS = """
from torch import nn


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(width, width), nn.BatchNorm1d(width), nn.ReLU())

    def forward(self, x):
        return x + self.body(x)
"""

MODEL = """
import torch
from torch import nn

from layers import Block  # a module of its own: reaches the nodes through --working-dir


def build():
    return nn.Sequential(nn.Linear(8, 32), Block(32), Block(32), nn.Linear(32, 4))


def batches(rank, world_size):
    while True:
        x = torch.randn(16, 8)
        yield x, (x[:, :2] > 0).long().sum(dim=1) + (x[:, 2] > 1).long()


def loss(outputs, targets):
    return nn.functional.cross_entropy(outputs, targets)
"""


@pytest.fixture
def two_nodes(ray_test_cluster: Any) -> Any:
    """The suite's two-node test cluster (tests/ray_cluster.py)."""
    return ray_test_cluster


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("user_code")
    (folder / "layers.py").write_text(LAYERS)
    (folder / "model.py").write_text(MODEL)
    return folder


def unstall(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # This tree's unstall (not whatever the environment installed).
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "PYTHONPATH": SRC}
    env.pop("RAY_ADDRESS", None)
    return subprocess.run(
        [sys.executable, "-m", "unstall", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_LIMIT_S,
    )


def test_psld_on_two_nodes_with_user_code_exact_and_saved(
    two_nodes: Any, user_dir: Path, tmp_path: Path
) -> None:
    code = str(user_dir / "model.py")
    out = unstall(
        "ps", "train", "--address", two_nodes.address, "--working-dir", str(user_dir),
        "--model", f"{code}:build", "--data", f"{code}:batches", "--loss", f"{code}:loss",
        "--workers", "2", "--strategy", "psld", "--scenario", "dynamic",
        "-n", "16", "--check-reference", "--save", str(tmp_path / "w.pt"),
        "--json", str(tmp_path / "run.json"), "-q",
        cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads((tmp_path / "run.json").read_text())
    assert result["params_match_reference"] is True
    assert len(set(result["nodes"].values())) == 2, result["nodes"]  # actors on both nodes
    assert result["migrations"] >= 1  # PSLD moved chunks (the servers sit on both nodes)
    assert "ray nodes              2" in out.stdout
    # The saved weights load into a fresh instance of the user's model.
    sys.path.insert(0, str(user_dir))
    try:
        from unstall.usercode import load_callable

        model = load_callable(f"{code}:build")()
    finally:
        sys.path.remove(str(user_dir))
    model.load_state_dict(torch.load(tmp_path / "w.pt"))


FIT_SCRIPT = """
import json, sys
import torch
from unstall import ps
from unstall.usercode import load_callable

address, folder = sys.argv[1], sys.argv[2]
code = folder + "/model.py"
build, batches, loss = (load_callable(f"{code}:{name}") for name in ("build", "batches", "loss"))
result = ps.fit(
    build, batches, loss=loss, strategy=ps.STRATEGIES["psld"], scenario=ps.SCENARIOS["dynamic"](),
    optimizer=ps.SGDConfig(lr=0.1, nesterov=True), iterations=16, check_reference=True,
    address=address, runtime_env={"working_dir": folder},
)
fresh, untrained = build(), build()
fresh.load_state_dict(result.state_dict)
fresh.eval(), untrained.eval()
x = torch.randn(256, 8, generator=torch.Generator().manual_seed(99))
y = (x[:, :2] > 0).long().sum(dim=1) + (x[:, 2] > 1).long()
with torch.no_grad():
    trained_loss, untrained_loss = (float(loss(m(x), y)) for m in (fresh, untrained))
print(json.dumps({
    "exact": result.params_match_reference, "nodes": result.node_count,
    "trained": trained_loss, "untrained": untrained_loss,
}))
"""


# The command line's run on two nodes (above) takes the same path through fit(): the default
# suite keeps that one.
@pytest.mark.slow
def test_fit_on_two_nodes_from_python(two_nodes: Any, user_dir: Path, tmp_path: Path) -> None:
    script = tmp_path / "fit_on_cluster.py"
    script.write_text(FIT_SCRIPT)
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    out = subprocess.run(
        [sys.executable, str(script), two_nodes.address, str(user_dir)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_LIMIT_S,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["exact"] is True and got["nodes"] == 2
    # The weights loaded into a fresh instance carry the training: a lower loss than untrained.
    assert got["trained"] < 0.9 * got["untrained"], got


def test_without_working_dir_the_missing_module_is_one_line(
    two_nodes: Any, user_dir: Path, tmp_path: Path
) -> None:
    code = str(user_dir / "model.py")
    out = unstall(
        "ps", "train", "--address", two_nodes.address,
        "--model", f"{code}:build", "--data", f"{code}:batches", "-n", "2", "-q",
        cwd=tmp_path,
    )  # fmt: skip
    # The driver loads the file beside its own folder on the path; a node's worker does not.
    assert out.returncode == 1, out.stdout + out.stderr
    assert "layers" in out.stderr and "--working-dir" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.slow  # `make test-slow`; ray_connect's own tests cover the local start
def test_a_local_run_while_a_cluster_is_up_starts_its_own_ray(
    two_nodes: Any, tmp_path: Path
) -> None:
    out = unstall(
        "ps", "train", "--model", "mlp", "-o", "width=16", "-n", "3", "--check-reference",
        "--json", str(tmp_path / "local.json"), "-q",
        cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads((tmp_path / "local.json").read_text())
    assert result["params_match_reference"] is True and len(set(result["nodes"].values())) == 1
