"""A trace from what a user names: a Trace as it is, a file read in its format, or the embedded
default trace for nothing; a table or a number is a TypeError naming the parameter."""

from __future__ import annotations

from pathlib import Path

import pytest

from unstall.errors import ArgumentTypeError, ConfigError
from unstall.traces import default_trace, resolve_trace, write_trace


def test_a_trace_is_itself_a_path_is_read_and_nothing_is_the_embedded_one(
    tmp_path: Path,
) -> None:
    embedded = default_trace()
    assert resolve_trace(embedded) is embedded
    assert resolve_trace(None).equals(embedded)
    path = write_trace(embedded, tmp_path / "jobs.csv")
    assert resolve_trace(path).equals(embedded)
    assert resolve_trace(str(path), "unstall").equals(embedded)


def test_a_format_without_a_file_and_a_wrong_type_are_named() -> None:
    with pytest.raises(ConfigError, match=r"^trace\.trace_format: 'pollux' is the format of a"):
        resolve_trace(None, "pollux")
    with pytest.raises(TypeError) as err:
        resolve_trace(default_trace().jobs, owner="simulate")  # type: ignore[arg-type]
    assert isinstance(err.value, ArgumentTypeError)
    assert str(err.value) == (
        "simulate.trace: takes a Trace, a trace file's path, or None for the embedded default "
        "trace; got DataFrame: Trace.from_frame(df) builds one"
    )
