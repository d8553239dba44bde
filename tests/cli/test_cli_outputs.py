"""Output paths are checked before any work starts: a folder where a file should go, or a file
where a folder should be, is refused at once (exit 2 where the option's own check catches it, as
a usage error; 1 otherwise), for every command that writes."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from unstall.cli.app import app

runner = CliRunner()


@pytest.mark.parametrize(
    "command",
    [
        ["sim", "run", "--policy", "fifo", "--json", "{dir}"],
        ["sim", "run", "--policy", "fifo", "--jobs-out", "{dir}"],
        ["sim", "compare", "--policies", "fifo", "--json", "{dir}"],
        ["sim", "sweep", "--policies", "fifo", "--json", "{dir}"],
        ["recommend", "--model", "resnet50", "--plot", "{dir}"],
        ["profile", "run", "--model", "mlp", "--trace", "{dir}"],
        ["ps", "bench", "--json", "{dir}"],
        ["ps", "train", "--save", "{dir}"],
    ],
    ids=lambda c: " ".join(c[:2]) + " " + c[-2],
)
def test_a_folder_where_a_file_goes_is_refused_first(tmp_path: Path, command: list[str]) -> None:
    args = [a.replace("{dir}", str(tmp_path)) for a in command]
    result = runner.invoke(app, args, env={"COLUMNS": "300"})
    assert result.exit_code in (1, 2), result.output
    text = " ".join(result.output.replace("│", " ").split())
    said = ("is a folder: give a file name to write", "is a directory")
    assert any(words in text for words in said), result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "command", [["sim", "compare", "--policies", "fifo"], ["sim", "sweep", "--policies", "fifo"]]
)
def test_a_file_where_the_output_folder_goes_is_refused_first(
    tmp_path: Path, command: list[str]
) -> None:
    blocker = tmp_path / "taken"
    blocker.write_text("mine")
    result = runner.invoke(app, [*command, "--out", str(blocker / "sub")])
    assert result.exit_code == 1, result.output
    assert f"{blocker} is a file, not a folder" in " ".join(result.output.split())
    assert blocker.read_text() == "mine"


# /proc takes no new folders, whoever asks (root too, where a read-only folder would not do).
NO_FOLDERS_HERE = Path("/proc/unstall-no-such-folder")


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc (Linux)")
@pytest.mark.parametrize(
    "command",
    [
        ["sim", "run", "--policy", "fifo", "--max-jobs", "3", "--json", "{out}/run.json"],
        ["sim", "compare", "--policies", "fifo", "--max-jobs", "3", "--out", "{out}"],
    ],
    ids=lambda c: " ".join(c[:2]),
)
def test_an_output_folder_that_cannot_be_made_is_refused_first(command: list[str]) -> None:
    args = [a.replace("{out}", str(NO_FOLDERS_HERE)) for a in command]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert f"cannot write {NO_FOLDERS_HERE}" in result.output
    assert "events" not in result.output  # refused before the simulation ran


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc (Linux)")
def test_the_system_refusing_a_write_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    result = runner.invoke(app, ["trace", "generate", "--jobs", "5", "--out", str(trace)])
    assert result.exit_code == 0, result.output
    out = NO_FOLDERS_HERE / "t.csv"
    result = runner.invoke(app, ["trace", "convert", str(trace), "--out", str(out)])
    assert result.exit_code == 1
    # refused while the command line is read, before the trace is read (the error printer's
    # own line for an OSError: tests/cli/test_cli_exit_codes.py)
    assert result.output.strip() == (
        f"error: cannot write {out}: No such file or directory ({NO_FOLDERS_HERE})"
    )
