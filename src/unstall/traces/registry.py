"""The trace formats unstall reads, by name, and ``read_trace`` that picks one (or is told)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from os import PathLike
from pathlib import Path

from unstall.errors import ConfigError, a_or_an
from unstall.traces import helios, pai, philly_csv, philly_json, pollux, unstall_format
from unstall.traces.reading import Reader, ReadOptions
from unstall.traces.schema import Trace, TraceError, is_data_frame
from unstall.traces.validation import header_of

READERS: dict[str, Reader] = {
    reader.name: reader
    for reader in (
        unstall_format.READER,
        philly_csv.READER,
        philly_json.READER,
        helios.READER,
        pai.READER,
        pollux.READER,
    )
}

AUTO = "auto"
# Files whose first line is not a CSV header, so sniffers get an empty one.
_NOT_CSV = (".parquet", ".pq", ".json", ".jsonl")


def detect_format(path: str | Path) -> str:
    """The one format whose sniffer accepts ``path`` (by name, suffix and header line).

    Raises :class:`TraceError` when no format or more than one fits, listing the candidates.
    """
    p = Path(path)
    if not p.exists():
        raise TraceError(str(p), "no such file")
    not_csv = p.is_dir() or p.suffix.lower() in _NOT_CSV
    header: list[str] = [] if not_csv else header_of(p)
    if p.is_file() and (p.stat().st_size == 0 or (not not_csv and not header)):
        # Nothing to tell a format by, and nothing any format could read.
        raise TraceError(str(p), "the file is empty")
    matches = [name for name, reader in READERS.items() if reader.sniff(p, header)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        first = ",".join(header)[:120] if header else "(no CSV header)"
        raise TraceError(
            str(p),
            f"cannot tell the trace format from the name or first line ({first}); "
            f"pass the format, one of {sorted(READERS)}",
            line=1 if header else None,
        )
    raise TraceError(
        str(p), f"ambiguous trace format: looks like {matches}; pass the format explicitly"
    )


def read_trace(path: str | Path, fmt: str = AUTO, options: ReadOptions | None = None) -> Trace:
    """Read and validate the trace at ``path`` in format ``fmt`` (or detect it).

    ``options`` is a :class:`ReadOptions` (the choices some formats need; None: the defaults).
    Every reader raises :class:`TraceError` naming the file, line and field of the first
    problem; rows it leaves out on purpose (unfinished jobs, CPU-only jobs) are counted in
    :attr:`Trace.skipped`.
    """
    if not isinstance(path, str | PathLike):
        hint = "Trace.from_frame(df) builds a trace from a table" if is_data_frame(path) else ""
        raise ConfigError(
            "read_trace",
            "path",
            f"must be a file path, got {type(path).__name__}" + (f": {hint}" if hint else ""),
        )
    if options is not None and not isinstance(options, ReadOptions):
        # A dict would be ignored by the readers that never look at it and break the others;
        # its keys are not checked anywhere either, so it is refused whatever it holds.
        known = [f.name for f in fields(ReadOptions)]
        why = (
            f"must be a ReadOptions (unstall.traces.ReadOptions, with fields {', '.join(known)})"
            f" or None, got {a_or_an(type(options).__name__)}"
        )
        unknown = [k for k in options if k not in known] if isinstance(options, Mapping) else []
        if unknown:
            why += f"; there is no option {unknown[0]!r}"
        elif isinstance(options, Mapping) and options:
            given = ", ".join(f"{k}={v!r}" for k, v in options.items())
            why += f": pass ReadOptions({given})"
        raise ConfigError("read_trace", "options", why)
    p = Path(path)
    name = detect_format(p) if fmt == AUTO else fmt
    if name not in READERS:
        raise TraceError(
            str(p), f"unknown trace format {name!r}; known: {sorted(READERS)}", field="format"
        )
    if not p.exists():
        raise TraceError(str(p), "no such file")
    return READERS[name].read(p, options or ReadOptions())
