"""One rule for every command's exit status, and one error line whatever the message holds:
2 for usage, 1 for data that cannot be used or a run that failed, 130 for an interrupt."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from unstall.cli import common
from unstall.cli.app import app
from unstall.cli.common import exit_code_of, handle_errors, print_error
from unstall.errors import ConfigError, ConfigFileError, DataFileError, UnstallError
from unstall.usercode import UserCodeError, UserCodeNameError

runner = CliRunner()

MARKUP = [
    "[red]",
    "[/]",
    "[...]",
    "[1, 2]",
    "gloo: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed",
    "[bold]not bold[/bold] and [link=x]y[/link]",
    "a path ending in a backslash \\",
    "[red]t.csv: no such file [/x]",
]


@pytest.mark.parametrize("message", MARKUP)
def test_an_error_line_prints_its_message_as_is(message: str) -> None:
    with common.err_console.capture() as captured:
        print_error(message)
    assert captured.get() == f"error: {message}\n"


@pytest.mark.parametrize("message", MARKUP)
def test_handle_errors_prints_any_message_on_one_line(message: str) -> None:
    @handle_errors
    def command() -> None:
        raise UnstallError(message)

    with common.err_console.capture() as captured, pytest.raises(typer.Exit) as stopped:
        command()
    assert captured.get() == f"error: {message}\n"
    assert stopped.value.exit_code == 1


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (ConfigError("SimRequest", "max_jobs", "must be > 0"), 2),
        (ConfigFileError("c.toml", "missing", field="nodes[0].count"), 2),
        (UserCodeNameError("my.py has no policy class 'X'"), 2),
        (DataFileError("t.csv", "not a number", line=2), 1),
        (UserCodeError("model function f failed: RuntimeError: boom"), 1),
        (UnstallError("the workers failed"), 1),
        (OSError(28, "No space left on device"), 1),
        (KeyboardInterrupt(), 130),
        (common.Interrupted("stopped at 3 h"), 130),
        (RuntimeError("a bug"), 1),
    ],
)
def test_each_kind_of_error_has_its_exit_code(error: BaseException, code: int) -> None:
    assert exit_code_of(error) == code


def test_the_system_refusing_a_file_is_one_line_naming_it() -> None:
    @handle_errors
    def command() -> None:
        raise FileNotFoundError(2, "No such file or directory", "/x/[red]y.csv")

    with common.err_console.capture() as captured, pytest.raises(typer.Exit) as stopped:
        command()
    assert captured.get() == "error: /x/[red]y.csv: No such file or directory\n"
    assert stopped.value.exit_code == 1


@handle_errors
def _interrupted() -> None:
    raise KeyboardInterrupt


def test_an_interrupt_exits_130_in_one_line() -> None:
    with common.err_console.capture() as captured, pytest.raises(typer.Exit) as stopped:
        _interrupted()
    assert stopped.value.exit_code == 130
    assert captured.get() == "interrupted: stopped, no partial output written\n"


def _cluster(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _bad_trace(tmp_path: Path) -> str:
    path = tmp_path / "t.csv"
    path.write_text("job_id,submit_s,num_gpus,duration_s\na,0,x,5\n")
    return str(path)


SIM = ["sim", "run", "--policy", "fifo", "--max-jobs", "3", "-q"]
BUDGET = ["recommend", "--model", "mlp", "--samples", "1000", "--epochs", "1"]
COMMANDS = [
    # usage: unknown names, options, numbers out of range, fields missing from a user's file
    (["sim", "run", "--policy", "fifoo", "-q"], 2, "unknown policy 'fifoo'"),
    ([*SIM, "--policy-option", "bogus=1"], 2, "'fifo' has no options"),
    ([*SIM, "--congestion", "extreme"], 2, "'extreme' is neither a level"),
    (["sim", "run", "--policy", "fifo", "--max-jobs", "-3"], 2, "(option --max-jobs)"),
    (["ps", "train", "-n", "-1"], 2, "Invalid value for '--iterations' / '-n'"),
    ([*BUDGET[:4], "-5", "--epochs", "1", "--budget-hours", "1"], 2, "'--samples'"),
    (["sim", "runn"], 2, "No such command 'runn'"),
    ([*SIM, "--bogus"], 2, "No such option: --bogus"),
    (["profile", "run", "--model", "my.py"], 2, "name the function returning your nn.Module"),
    ([*SIM, "--cluster", "{nocount}"], 2, "field 'nodes[0].count': missing"),
    ([*SIM, "--trace-format", "xlsx"], 2, "unknown trace format 'xlsx'"),
    (["trace", "show", "--format", "pollux"], 2, "no trace was given"),
    ([*SIM, "--cluster", "{norack}"], 2, "field 'nodes_per_rack': required"),
    # data that cannot be used, a run whose answer is no
    ([*SIM, "--trace", "{trace}"], 1, "line 2, field 'num_gpus': not a number"),
    ([*BUDGET, "--budget-hours", "0.000001"], 1, "no configuration meets"),
    ([*SIM, "--json", "/proc/unstall-x/y.json"], 1, "cannot write /proc/unstall-x/y.json"),
]


@pytest.mark.parametrize(("args", "code", "says"), COMMANDS)
def test_every_command_exits_by_the_one_rule_with_one_line(
    tmp_path: Path, args: list[str], code: int, says: str
) -> None:
    files = {
        "nocount": _cluster(tmp_path, "groups.toml", "[[nodes]]\ngpus_per_node = 4\n"),
        "norack": _cluster(tmp_path, "racks.toml", "racks = 2\ngpus_per_node = 4\n"),
        "trace": _bad_trace(tmp_path),
    }
    args = [a.format(**files) if a.startswith("{") else a for a in args]
    result = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert result.exit_code == code, result.output
    errors = [line for line in result.output.splitlines() if line.startswith(("error:", "no "))]
    assert len(errors) == 1 and says in errors[0], result.output
    assert "╭" not in result.output and "Traceback" not in result.output


def test_a_file_named_with_brackets_is_said_as_is(tmp_path: Path) -> None:
    """ "wrote PATH" lines print paths as they are: "[/x]" in one raised rich's MarkupError after
    the file was written, "[red]" in one was swallowed."""
    (tmp_path / "a[").mkdir()
    out, json_out = tmp_path / "a[/x]t.csv", tmp_path / "[red]t.json"
    args = ["trace", "generate", "--jobs", "3", "--out", str(out), "--json", str(json_out)]
    result = runner.invoke(app, args, env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.output and f"wrote {json_out}" in result.output
