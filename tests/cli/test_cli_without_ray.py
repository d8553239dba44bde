"""The simulator's commands need neither Ray nor torch: `unstall sim run` runs where Ray is not
installed (here: an importable ``ray`` that raises ImportError, first on the path), and
`unstall --help` and every command group's help start without importing either."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

NO_RAY = "raise ImportError(\"No module named 'ray' (hidden by the test)\")\n"


def without_ray(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` where ``import ray`` fails."""
    hidden = tmp_path / "hidden"
    (hidden / "ray").mkdir(parents=True, exist_ok=True)
    (hidden / "ray" / "__init__.py").write_text(NO_RAY)
    path = os.pathsep.join([str(hidden), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env = {**os.environ, "PYTHONPATH": path, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )


def test_sim_run_works_without_ray(tmp_path: Path) -> None:
    hidden = without_ray(["-c", "import ray"], tmp_path)
    assert "hidden by the test" in hidden.stderr  # the test's premise
    run = ["-m", "unstall", "sim", "run", "--policy", "fifo", "--max-jobs", "20", "-q"]
    out = without_ray(run, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "fifo" in out.stdout


HELP_CODE = """
import sys
from unstall.cli.app import app
for group in ([], ["sim"], ["trace"], ["ps"], ["profile"], ["sparse"], ["recommend"]):
    try:
        app([*group, "--help"], standalone_mode=False)
    except SystemExit:
        pass
    print(group, sorted({"torch", "ray"} & set(sys.modules)), file=sys.stderr)
"""


def test_help_of_every_command_group_starts_without_torch_or_ray() -> None:
    out = subprocess.run(
        [sys.executable, "-c", HELP_CODE], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 7 and all(line.endswith(" []") for line in lines), lines
