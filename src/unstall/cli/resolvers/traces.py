"""Resolver of trace arguments: a file in any known format (read with its options), or the trace
embedded in the package when no file is given."""

from __future__ import annotations

from pathlib import Path

from unstall.traces import ReadOptions, Trace, default_trace, read_trace


def resolve_trace(
    path: str | Path | None, fmt: str = "auto", options: ReadOptions | None = None
) -> Trace:
    """The trace at ``path`` in format ``fmt`` (detected by default), or the embedded one."""
    return default_trace() if path is None else read_trace(path, fmt, options)
