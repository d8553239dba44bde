"""Resolver of trace arguments: a file in any known format (read with its options), or the trace
embedded in the package when no file is given."""

from __future__ import annotations

from pathlib import Path

from unstall.errors import ConfigError
from unstall.traces import ReadOptions, Trace, default_trace, read_trace
from unstall.traces.registry import AUTO


def resolve_trace(
    path: str | Path | None, fmt: str = "auto", options: ReadOptions | None = None
) -> Trace:
    """The trace at ``path`` in format ``fmt`` (detected by default), or the embedded one (a
    format given for it is refused: it was meant for a file that is not there)."""
    if path is None:
        if fmt != AUTO:
            raise ConfigError(
                "trace",
                "trace_format",
                f"{fmt!r} is the format of a --trace file, and none was given (without one the "
                "embedded default trace is used)",
            )
        return default_trace()
    return read_trace(path, fmt, options)
