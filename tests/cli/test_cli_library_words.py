"""The library's errors name its parameters (``job_profiles``); the command line says which of
its options fills each."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from unstall.cli.app import app
from unstall.cli.common import handle_errors
from unstall.errors import ConfigError, UnstallError


def test_an_error_naming_a_library_parameter_says_the_command_s_option() -> None:
    res = CliRunner().invoke(app, ["sim", "run", "--policy", "fifo", "--model-mix", "nosuch=1"])
    assert res.exit_code == 2
    assert "a JobProfile in job_profiles" in res.output
    assert "(option --model-mix)" in res.output
    assert "(job_profiles: option --job-profile)" in res.output


def test_only_names_of_the_command_s_parameters_other_than_the_field_get_a_hint() -> None:
    mini = typer.Typer()

    @mini.command()
    @handle_errors
    def run(max_jobs: int = 0, job_profile: list[str] | None = None) -> None:
        if max_jobs:
            raise ConfigError("simulate", "max_jobs", "must be > 0; see also job_profiles")
        raise UnstallError("trace_format and retry_min_s are not options here")

    named = CliRunner().invoke(mini, ["--max-jobs", "-1"])
    assert named.output.rstrip().endswith(
        "see also job_profiles (option --max-jobs) (job_profiles: option --job-profile)"
    )
    plain = CliRunner().invoke(mini, [])
    assert plain.output.rstrip().endswith("retry_min_s are not options here")
