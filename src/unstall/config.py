"""Helpers for the frozen, keyword-only config dataclasses that every component owns.

A config validates itself in ``__post_init__`` with :func:`check`, so a bad value is reported with
the class and field that hold it, and why it cannot work.
"""

from __future__ import annotations

import dataclasses
import json
import numbers
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, SupportsFloat, SupportsIndex, TypeGuard, TypeVar

from unstall.errors import ConfigError, DataFileError, UnknownOptionError

T = TypeVar("T")


def check(ok: bool, owner: object, field: str, why: str) -> None:
    """Raise :class:`ConfigError` naming ``owner``'s class and ``field`` unless ``ok``."""
    if not ok:
        name = owner if isinstance(owner, str) else type(owner).__name__
        raise ConfigError(name, field, why)


def is_whole_number(value: object) -> TypeGuard[SupportsIndex]:
    """An integer (a numpy one too), not a bool: True is a switch, not a count of 1."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real_number(value: object) -> TypeGuard[SupportsFloat]:
    """A real number (a numpy one too), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_number(
    owner: object,
    field: str,
    value: object,
    *,
    whole: bool = False,
    optional: bool = False,
    wanted: str | None = None,
) -> None:
    """``value`` is a whole (``whole``) or real number, not a bool, or None where ``optional``;
    else a ConfigError "must be WANTED, got VALUE", WANTED by default "a whole number" or "a
    number", with " or None" where optional. Checked before a config compares the value (a
    string fails there as a bare TypeError, and 2.5 jobs deep inside numpy)."""
    if (is_whole_number(value) if whole else is_real_number(value)) or (optional and value is None):
        return
    if wanted is None:
        wanted = ("a whole number" if whole else "a number") + (" or None" if optional else "")
    check(False, owner, field, f"must be {wanted}, got {value!r}")


def check_positive(owner: object, **values: float) -> None:
    """Every keyword value must be a number > 0 (text, None or a bool is named as such, not a
    bare TypeError from the comparison)."""
    for field, value in values.items():
        _refuse_non_number(owner, field, value, "> 0")
        check(value > 0, owner, field, f"must be > 0, got {value!r}")


def check_non_negative(owner: object, **values: float) -> None:
    """Every keyword value must be a number >= 0."""
    for field, value in values.items():
        _refuse_non_number(owner, field, value, ">= 0")
        check(value >= 0, owner, field, f"must be >= 0, got {value!r}")


def _refuse_non_number(owner: object, field: str, value: object, bound: str) -> None:
    if not is_real_number(value):
        got = f"{type(value).__name__} {value!r}" if value is not None else "None"
        check(False, owner, field, f"must be a number {bound}, got {got}")


def from_mapping(cls: type[T], data: Mapping[str, Any], *, source: str) -> T:
    """Build the dataclass ``cls`` from a mapping, rejecting unknown keys by name.

    Only top-level fields are handled; nested configs are built by their owners.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise DataFileError(
            source, f"unknown field(s) {unknown}; known: {sorted(known)}", field=unknown[0]
        )
    try:
        return cls(**data)
    except TypeError as exc:  # a missing required field
        raise DataFileError(source, str(exc)) from exc


def parse_text_options(
    cls: type[Any], pairs: Sequence[tuple[str, str]], *, owner: str
) -> dict[str, Any]:
    """Command-line ``KEY=VALUE`` text for fields of the dataclass ``cls``, each typed like the
    field's default (bool, int, float, str, or a comma-separated tuple of floats; a field that
    defaults to None takes ``none`` or a number of its annotated type)."""
    # Fields a constructor does not take (``init=False``: internal state) are no options.
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    parsed: dict[str, Any] = {}
    for key, text in pairs:
        field = fields.get(key)
        if field is None:
            raise UnknownOptionError(owner, key, fields)
        default = field.default
        try:
            parsed[key] = _parse_like(default, text, str(field.type))
        except ValueError:
            if default is None:  # an optional number
                kind = "whole number" if "int" in str(field.type) else "number"
                raise ConfigError(owner, key, f"{text!r} is not a {kind} (or none)") from None
            raise ConfigError(owner, key, f"{text!r} is not a {type(default).__name__}") from None
    return parsed


def _parse_like(default: object, text: str, annotation: str = "") -> object:
    if default is None:  # an optional number: "none" keeps it off, else typed by the annotation
        if text.strip().lower() in ("none", "off", ""):
            return None
        for kind, parse in (("float", float), ("int", int)):
            if kind in annotation:
                return parse(text)
        return text
    # bool before int: bool is a subclass of int.
    if isinstance(default, bool):
        word = text.strip().lower()
        if word in ("true", "yes", "on", "1"):
            return True
        if word in ("false", "no", "off", "0"):
            return False
        raise ValueError(text)
    if isinstance(default, int):
        return int(text)
    if isinstance(default, float):
        return float(text)
    if isinstance(default, tuple):
        return tuple(float(part) for part in text.split(",") if part.strip())
    return text


# Whole numbers beyond int64 cannot be counts, sizes or rates anything here can use; numpy and
# float() fail on them with an OverflowError, so they are refused where the file is read.
MAX_WHOLE_NUMBER = 2**63 - 1


def read_text_file(path: str | Path) -> str:
    """The text of a UTF-8 file (a byte-order mark before it, as spreadsheets and some editors
    write, dropped), with one-line errors for a missing, unreadable or binary file."""
    p = Path(path)
    if p.is_dir():
        raise DataFileError(str(p), "is a folder, expected a file")
    if not p.is_file():
        raise DataFileError(str(p), "no such file")
    try:
        return p.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        with p.open("rb") as fh:
            bad = first_non_utf8(fh)
        line = bad.line if bad is not None else None
        why = bad.describe() if bad is not None else exc.reason
        raise DataFileError(str(p), f"not UTF-8 text (a binary file?): {why}", line=line) from exc
    except OSError as exc:
        raise DataFileError(str(p), f"cannot read: {exc.strerror or exc}") from exc


@dataclasses.dataclass(frozen=True)
class NonUtf8:
    """Where a file stops being UTF-8: the line (1-based), the byte's offset in it (0-based),
    the line's bytes and the decoder's reason."""

    line: int
    offset: int
    raw: bytes
    reason: str

    def describe(self) -> str:
        """``byte 0xff at column 7: invalid start byte``."""
        return f"byte 0x{self.raw[self.offset]:02x} at column {self.offset + 1}: {self.reason}"


def first_non_utf8(lines: Iterable[bytes]) -> NonUtf8 | None:
    """The first line of a binary file's lines (an open ``rb`` file: read as it goes, so a large
    file is not held in memory) that is not UTF-8, and where in it; None when all are."""
    for number, raw in enumerate(lines, start=1):
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return NonUtf8(line=number, offset=exc.start, raw=raw, reason=exc.reason)
    return None


def check_number_sizes(data: object, source: str) -> None:
    """Refuse whole numbers too big for an int64 anywhere in parsed TOML/JSON, naming the field."""
    try:
        _check_sizes(data, source, "")
    except RecursionError:  # a file nested just short of the parser's own limit
        raise DataFileError(source, "nested too deeply to read") from None


def _check_sizes(data: object, source: str, where: str) -> None:
    if isinstance(data, bool):
        return
    if isinstance(data, int):
        if abs(data) > MAX_WHOLE_NUMBER:
            digits = len(str(abs(data)))
            raise DataFileError(
                source, f"a {digits}-digit number is too large (at most 2**63 - 1)", field=where
            )
        return
    if isinstance(data, dict):
        for key, value in data.items():
            _check_sizes(value, source, f"{where}.{key}" if where else str(key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            _check_sizes(value, source, f"{where}[{i}]")


def load_table_file(path: str | Path) -> dict[str, Any]:
    """Read a TOML or JSON file into a dict, with an error naming the file when it is not valid."""
    p = Path(path)
    text = read_text_file(p)
    try:
        data = tomllib.loads(text) if p.suffix.lower() == ".toml" else json.loads(text)
    except RecursionError:
        raise DataFileError(str(p), "nested too deeply to read") from None
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        line = getattr(exc, "lineno", None)
        raise DataFileError(str(p), f"not valid {p.suffix[1:].upper()}: {exc}", line=line) from exc
    if not isinstance(data, dict):
        raise DataFileError(str(p), "top level must be an object/table")
    check_number_sizes(data, str(p))
    return data
