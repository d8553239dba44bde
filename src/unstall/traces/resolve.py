"""A trace from what a user names: a :class:`Trace` as it is, a file in any known format (read
with its options), or the trace embedded in the package when nothing is named.

Every front door that takes a trace (:func:`unstall.sim.simulate`, the live backend, a
command) resolves it here.
"""

from __future__ import annotations

from os import PathLike
from pathlib import Path

from unstall.errors import ArgumentTypeError, ConfigError
from unstall.traces.default import default_trace
from unstall.traces.reading import ReadOptions
from unstall.traces.registry import AUTO, read_trace
from unstall.traces.schema import Trace, is_data_frame


def resolve_trace(
    trace: Trace | str | PathLike[str] | None = None,
    fmt: str = AUTO,
    options: ReadOptions | None = None,
    *,
    owner: str = "resolve_trace",
    field: str = "trace",
) -> Trace:
    """``trace`` itself when it is a :class:`Trace`; the file at a path, in format ``fmt``
    (detected by default) read with ``options``; or, for None, the embedded default trace (a
    format given for it is refused: it was meant for a file that is not there). Another type
    raises :class:`~unstall.errors.ArgumentTypeError` (a TypeError) naming ``owner.field``."""
    if isinstance(trace, Trace):
        return trace
    if trace is None:
        if fmt != AUTO:
            raise ConfigError(
                "trace",
                "trace_format",
                f"{fmt!r} is the format of a trace file, and no trace was given (without one "
                "the embedded default trace is used)",
            )
        return default_trace()
    if isinstance(trace, str | PathLike):
        return read_trace(trace if isinstance(trace, str | Path) else Path(trace), fmt, options)
    wanted = "takes a Trace, a trace file's path, or None for the embedded default trace"
    hint = ": Trace.from_frame(df) builds one" if is_data_frame(trace) else ""
    raise ArgumentTypeError(owner, field, f"{wanted}; got {type(trace).__name__}{hint}")
