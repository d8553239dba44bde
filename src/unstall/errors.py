"""Exceptions shared by every part of unstall.

Each names what was wrong (a config field, a file and line) so that the CLI can print it as is.
"""

from __future__ import annotations


class UnstallError(Exception):
    """Base of every error unstall raises on purpose (the CLI prints these without a traceback)."""


class ConfigError(UnstallError, ValueError):
    """A config field holds a value that cannot work; the message names the class and field."""

    def __init__(self, owner: str, field: str, why: str) -> None:
        self.owner = owner
        self.field = field
        self.why = why
        super().__init__(f"{owner}.{field}: {why}")


class DataFileError(UnstallError, ValueError):
    """An input file cannot be read as expected; the message names the file, line and field."""

    def __init__(
        self, path: str, why: str, *, line: int | None = None, field: str | None = None
    ) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.why = why
        where = path
        if line is not None:
            where += f", line {line}"
        if field is not None:
            where += f", field '{field}'"
        super().__init__(f"{where}: {why}")
