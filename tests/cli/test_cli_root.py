from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer
from typer.testing import CliRunner

from unstall import __version__
from unstall.cli.app import app

runner = CliRunner()


def test_help_lists_every_group_with_a_purpose() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for name in ("sim", "trace", "ps", "profile", "sparse", "recommend", "demo"):
        assert name in result.output


def test_each_command_is_summarised_on_one_line_in_its_group_list() -> None:
    # What typer lists for a command: its short help, else its help, else its docstring's first
    # paragraph, whose line breaks it keeps (sentences broke mid-line in `unstall profile --help`).
    for group in app.registered_groups:
        assert group.typer_instance is not None
        for info in group.typer_instance.registered_commands:
            doc = info.callback.__doc__ if info.callback is not None else None
            shown = info.short_help or info.help or inspect.cleandoc(doc or "").split("\n\n")[0]
            assert shown, f"{group.name} {info.name}: no summary"
            assert "\n" not in shown, f"{group.name} {info.name}: {shown!r}"
    result = runner.invoke(app, ["profile", "--help"], env={"COLUMNS": "200"})
    assert "Fit the communication stall over depth sweeps with every candidate model (DDP" in (
        result.output
    )


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


def test_an_error_quoting_brackets_is_printed_as_is(tmp_path: Path) -> None:
    """Rich reads "[red]" or "[/x]" as markup: a user's exception or file name that holds such
    text must neither crash the error line nor lose part of it."""
    user = tmp_path / "brk.py"
    user.write_text('raise RuntimeError("bad value [/x] here")\n')
    result = runner.invoke(app, ["sim", "run", "--policy", f"{user}:X", "--max-jobs", "3"])
    assert result.exit_code == 1, result.output
    assert "bad value [/x] here" in result.output
    missing = tmp_path / "[red]t.csv"
    result = runner.invoke(app, ["trace", "show", str(missing)])
    assert result.exit_code == 1
    assert "[red]t.csv: no such file" in result.output


def test_help_keeps_bracketed_defaults() -> None:
    result = runner.invoke(app, ["ps", "train", "--help"], env={"COLUMNS": "200"})
    assert "SGD momentum (default: 0.9)" in result.output


def test_a_bad_option_value_names_the_option_as_well_as_the_field() -> None:
    result = runner.invoke(app, ["sparse", "lstm-bench", "--hidden", "0"])
    assert result.exit_code == 2  # usage: a value out of range
    assert "LSTMBenchConfig.hidden: must be > 0, got 0 (option --hidden)" in result.output
    result = runner.invoke(app, ["sim", "run", "--policy", "fifo", "--max-jobs", "-3"])
    assert result.exit_code == 2  # usage: a value out of range
    assert "(option --max-jobs)" in result.output
    # a field whose option has another name: the option's own flag, not the parameter's name
    result = runner.invoke(app, ["sparse", "lstm-bench", "--layers", "0"])
    assert "LSTMBenchConfig.num_layers: must be > 0, got 0 (option --layers)" in result.output
    args = ["recommend", "--model", "mlp", "--samples", "10", "--epochs", "1", "--budget-hours"]
    result = runner.invoke(app, [*args, "1", "--family", "P3"], env={"COLUMNS": "300"})
    assert result.exit_code == 2 and "(option --family)" in result.output


def _command(
    max_jobs: Annotated[int, typer.Option("--max-jobs", "-m")] = 1,
    num_layers: Annotated[int, typer.Option("--layers")] = 1,
    short_first: Annotated[int, typer.Option("-s", "--shorter")] = 1,
    flag: Annotated[bool, typer.Option("--on/--off")] = False,
    bare: int = 1,
) -> None:
    """Options declared the ways typer allows (type hints resolve at module level only)."""


def test_the_flag_of_an_option_is_its_first_long_declaration() -> None:
    from unstall.cli.common import _flag_of

    command = _command
    names = ("max_jobs", "num_layers", "short_first", "flag", "bare")
    flags = ["--max-jobs", "--layers", "--shorter", "--on", "--bare"]
    assert [_flag_of(command, n) for n in names] == flags


def test_a_long_error_stays_on_one_line_where_stderr_is_no_terminal(tmp_path: Path) -> None:
    missing = tmp_path / ("a-long-folder-name-" * 12) / "t.csv"
    result = runner.invoke(app, ["trace", "show", str(missing)])
    assert result.exit_code == 1
    errors = [line for line in result.output.splitlines() if "error:" in line]
    assert len(errors) == 1 and errors[0].endswith("t.csv: no such file"), result.output
