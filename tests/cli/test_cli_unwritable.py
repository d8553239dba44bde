"""Every output a command takes is checked while its command line is read: a path that cannot
be written fails at once, in one line, exit 1, before any work (a simulation, a training, a
profile) starts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from unstall.cli.app import app

runner = CliRunner()
NOWHERE = "/proc/unstall-no-such-folder/out"  # a folder no one can make under /proc

REQUIRED = {
    "recommend": ["--model", "mlp", "--samples", "10", "--epochs", "1", "--budget-hours", "1"],
    "trace convert": ["t.csv"],
    "profile convert": ["p.json", "--gpu", "v100"],
}
OUTPUTS = [
    ("sim models", "--json"),
    ("sim calibrate", "--json"),
    ("sim calibrate", "--plot"),
    ("sim run --policy fifo", "--json"),
    ("sim run --policy fifo", "--jobs-out"),
    ("sim compare", "--json"),
    ("sim sweep", "--json"),
    ("trace show", "--json"),
    ("trace generate", "--out"),
    ("trace generate --out t.csv", "--json"),
    ("trace convert", "--out"),
    ("ps train", "--json"),
    ("ps bench", "--json"),
    ("profile run", "--json"),
    ("profile fit", "--json"),
    ("profile fit", "--points"),
    ("profile convert", "--out"),
    ("recommend", "--json"),
    ("sparse lstm-train", "--json"),
    ("sparse lstm-train", "--checkpoint"),
    ("sparse lstm-bench", "--json"),
    ("sparse analyze", "--json"),
    ("sparse analyze", "--plot"),
]


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc (Linux)")
@pytest.mark.parametrize(("command", "option"), OUTPUTS)
def test_an_output_that_cannot_be_written_is_refused_before_the_work(
    command: str, option: str
) -> None:
    words = command.split()
    args = [*words, *REQUIRED.get(" ".join(words[:2]), []), option, f"{NOWHERE}/x.json"]
    started = time.monotonic()
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert lines == [f"error: cannot write {NOWHERE}/x.json: No such file or directory ({NOWHERE})"]
    assert time.monotonic() - started < 5  # refused, not run
