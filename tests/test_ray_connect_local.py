"""What a local Ray started by unstall.ray_connect.connect_ray gets: the folders the driver added
to sys.path on its workers' PYTHONPATH (a function imported from one runs there), Ray's flags
(zero-copy torch tensors only where asked); and the runtime environment of --working-dir."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from unstall.errors import ConfigError
from unstall.ray_connect import _with_driver_path, driver_path_additions, working_dir_env

SCRIPT = """
import sys
sys.path.insert(0, sys.argv[1])  # as a script or notebook adds its own folder
import ray
from helper_mod import triple  # importable here only through the folder added above
from unstall.ray_connect import connect_ray

assert connect_ray(num_cpus=1) is True
# triple pickles by reference (helper_mod.triple): the worker must import helper_mod itself.
print("worker:", ray.get(ray.remote(triple).remote(14)))
from ray._private import ray_constants
print("zero-copy:", ray_constants.RAY_ENABLE_ZERO_COPY_TORCH_TENSORS)
ray.shutdown()
"""


def test_a_function_from_a_folder_the_driver_added_runs_on_a_local_ray(tmp_path: Path) -> None:
    folder = tmp_path / "code"
    folder.mkdir()
    (folder / "helper_mod.py").write_text("def triple(x):\n    return 3 * x\n")
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}
    env.pop("RAY_ENABLE_ZERO_COPY_TORCH_TENSORS", None)
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(folder)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.strip().splitlines()
    assert "worker: 42" in lines, out.stdout + out.stderr
    assert "zero-copy: False" in lines  # only the parameter server asks for it


def test_the_driver_s_additions_lead_the_workers_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    assert driver_path_additions()[0] == str(tmp_path.resolve())
    assert not any("site-packages" in p for p in driver_path_additions())
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = _with_driver_path({"working_dir": "w", "env_vars": {"A": "1"}})
    assert env is not None and env["working_dir"] == "w" and env["env_vars"]["A"] == "1"
    first, *_, last = env["env_vars"]["PYTHONPATH"].split(os.pathsep)
    assert (first, last) == (str(tmp_path.resolve()), "/elsewhere")


def test_a_working_dir_is_a_folder(tmp_path: Path) -> None:
    assert working_dir_env(None, owner="sweep") is None
    assert working_dir_env(tmp_path, owner="sweep") == {"working_dir": str(tmp_path.resolve())}
    with pytest.raises(ConfigError, match=r"^sweep\.working_dir: .* is not a folder \(nothing"):
        working_dir_env(tmp_path / "nowhere", owner="sweep")
    (tmp_path / "f.py").write_text("")
    with pytest.raises(ConfigError, match=r"\(a file: give the folder that holds your modules"):
        working_dir_env(tmp_path / "f.py", owner="ps", field="working-dir")
