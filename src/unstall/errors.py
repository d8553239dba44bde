"""Exceptions shared by every part of unstall.

Each names what was wrong (a config field, a file and line) so that the CLI can print it as is.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class UnstallError(Exception):
    """Base of every error unstall raises on purpose (the CLI prints these without a traceback)."""


class ConfigError(UnstallError, ValueError):
    """A config field holds a value that cannot work; the message names the class and field."""

    def __init__(self, owner: str, field: str, why: str) -> None:
        self.owner = owner
        self.field = field
        self.why = why
        super().__init__(f"{owner}.{field}: {why}")

    def __reduce__(self) -> tuple[object, ...]:
        # An exception pickles as its class called with ``args`` (the message alone), which
        # this __init__ does not take: without this, one raised in a worker process (a process
        # pool, a Ray task) would reach the caller as a broken pool or a failure to unpickle.
        # The instance's dict goes along as state (notes added to the exception, say).
        return (type(self), (self.owner, self.field, self.why), self.__dict__)


class UnknownOptionError(ConfigError):
    """An option a config does not have: ``field`` is the name given, ``known`` the options
    there are. The message suggests the closest known one when there is one, and lists them all
    only when there is none (a misspelling needs the one name, not thirty)."""

    def __init__(self, owner: str, field: str, known: Iterable[str]) -> None:
        self.known = tuple(sorted(known))
        hint = did_you_mean(field, self.known)
        super().__init__(owner, field, "unknown option" + (hint or f"; known: {list(self.known)}"))

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.owner, self.field, self.known), self.__dict__)


class ArgumentTypeError(ConfigError, TypeError):
    """An argument of a front door is of a type it does not take (a DataFrame where a trace
    belongs, a number where a cluster does); the message names the call, the parameter and
    what it takes. A TypeError, and a ConfigError for the command line's error handling."""


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

    def __reduce__(self) -> tuple[object, ...]:
        # See ConfigError.__reduce__; the keywords go through _rebuild_data_file_error.
        return (
            _rebuild_data_file_error,
            (type(self), self.path, self.why, self.line, self.field),
            self.__dict__,
        )


class ConfigFileError(DataFileError):
    """A file the user wrote to describe a run (a cluster, a PS scenario) misses a field, names
    an unknown one or holds a value that cannot work: a usage error, as a bad option is (the
    CLI exits 2 for it, 1 for data that cannot be used)."""


def _rebuild_data_file_error(
    cls: type[DataFileError], path: str, why: str, line: int | None, field: str | None
) -> DataFileError:
    return cls(path, why, line=line, field=field)


def unreadable_checkpoint_reason(exc: BaseException) -> str:
    """Why :func:`torch.load` refused a file, in the first sentence of its reason, for an error
    line. A refusal of weights-only loading opens with advice to load with
    ``weights_only=False`` (which would run any code the file holds) and to file an issue with
    PyTorch; its reason follows "WeightsUnpickler error:"."""
    text = str(exc)
    _, marker, after = text.partition("WeightsUnpickler error:")
    lines = [line.strip() for line in (after if marker else text).splitlines() if line.strip()]
    if not lines:  # an empty file: EOFError without a message
        return "the file ends early" if isinstance(exc, EOFError) else type(exc).__name__
    reason = lines[0].split(". ")[0].rstrip(".")
    return "cannot be unpickled" if "weights_only" in reason else reason


def a_or_an(noun: str) -> str:
    """``noun`` with its indefinite article, for error lines ("an int", "a str")."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def did_you_mean(word: object, known: Iterable[str]) -> str:
    """``" (did you mean 'wait_factor'?)"`` for the known name closest to a misspelt ``word``
    (difflib's ratio of at least 0.6, case ignored), else ``""``: for an error line, right after
    the unknown name."""
    if not isinstance(word, str):
        return ""
    names = list(known)
    lowered = {name.lower(): name for name in names}
    close = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
    return f" (did you mean {lowered[close[0]]!r}?)" if close else ""
