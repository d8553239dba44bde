from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

from unstall import __version__
from unstall.cli.app import app

runner = CliRunner()


def test_help_lists_every_group_with_a_purpose() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for name in ("sim", "trace", "ps", "profile", "sparse", "recommend", "demo"):
        assert name in result.output


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert __version__ in result.output


def test_python_dash_m_runs_the_same_cli() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "unstall", "--version"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0
    assert __version__ in proc.stdout
