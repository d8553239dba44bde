"""A policy's options: which keyword options a policy's factory takes and of which types, and
what of the Policy protocol an object lacks.

A registered policy names the frozen dataclass that holds its knobs; a policy class from user
code is typed by itself when it is a dataclass, else by its constructor's keyword parameters
with defaults (typed like the defaults). Both type ``make_policy``'s keyword options and the
``KEY=VALUE`` text a command line gives (:func:`unstall.config.parse_text_options`).
"""

from __future__ import annotations

import dataclasses
import inspect
import types
from collections.abc import Callable, Mapping
from typing import Any, Union, get_args, get_origin, get_type_hints

from unstall.config import is_real_number, is_whole_number
from unstall.errors import ConfigError, UnknownOptionError

# The Policy protocol's members as an error names them, and whether each must be callable.
_POLICY_MEMBERS = (
    ("name", "name", False),
    ("needs_oracle", "needs_oracle", False),
    ("decide", "decide(snapshot, rng)", True),
    ("reset", "reset()", True),
)


def missing_policy_members(policy: object) -> list[str]:
    """The members of the Policy protocol that ``policy`` lacks (its methods must be callable),
    as an error names them: only what is missing, so a user fixes what is wrong."""
    return [
        shown
        for attr, shown, call in _POLICY_MEMBERS
        if not hasattr(policy, attr) or (call and not callable(getattr(policy, attr)))
    ]


def missing_protocol(policy: object) -> str:
    """What ``policy`` lacks of the Policy protocol, as ``"decide(snapshot, rng) and reset()"``
    ("" when nothing)."""
    missing = missing_policy_members(policy)
    if len(missing) <= 1:
        return "".join(missing)
    return f"{', '.join(missing[:-1])} and {missing[-1]}"


def options_shape(factory: Callable[..., Any]) -> type[Any]:
    """A dataclass whose fields type the options of ``factory``: the class itself when it is a
    dataclass, else one named after it with a field per keyword parameter with a default
    (typed like the default), so that errors name the user's class."""
    if isinstance(factory, type) and dataclasses.is_dataclass(factory):
        return factory
    fields = []
    for name, param in inspect.signature(factory).parameters.items():
        usable = param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY)
        if usable and param.default is not param.empty:
            fields.append((name, type(param.default), dataclasses.field(default=param.default)))
    label = getattr(factory, "__name__", "policy")
    return dataclasses.make_dataclass(label, fields, frozen=True)


def check_options(cls: type[Any], options: Mapping[str, Any]) -> None:
    """Every option is a field of the dataclass ``cls`` that its constructor takes, of the
    field's type where that is a plain one (bool, int, float, str, or one of them or None).

    Checked here, once for every policy, because a config's own checks compare values
    (``age_weight >= 0``) and a string there fails as a bare TypeError."""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    try:
        hints = get_type_hints(cls)
    except Exception:  # a user's annotation that does not resolve: type by the defaults only
        hints = {}
    for key, value in options.items():
        field = fields.get(key)
        if field is None:
            raise UnknownOptionError(cls.__name__, key, fields)
        kinds = _plain_kinds(hints.get(key), field.default)
        if kinds is None or any(_is_kind(value, kind) for kind in kinds):
            continue
        wanted = " or ".join(_KIND_WORDS[kind] for kind in kinds)
        raise ConfigError(cls.__name__, key, f"must be {wanted}, got {value!r}")


# The plain option types that are checked, as an error names them; None stands for NoneType.
_KIND_WORDS: dict[type | None, str] = {
    bool: "True or False",
    int: "a whole number",
    float: "a number",
    str: "a string",
    None: "None",
}


def _plain_kinds(hint: object, default: object) -> tuple[type | None, ...] | None:
    """The plain types an option takes (from its annotation, else its default's type); None
    when they are not all plain (a tuple, a nested config: left to the config to check)."""
    if hint is None:
        return (type(default),) if type(default) in _KIND_WORDS else None
    union = get_origin(hint) in (Union, types.UnionType)
    args = get_args(hint) if union else (hint,)
    kinds = tuple(None if arg is type(None) else arg for arg in args)
    return kinds if all(kind in _KIND_WORDS for kind in kinds) else None


def _is_kind(value: object, kind: type | None) -> bool:
    # bool is an int, and an int is a number, but a switch is no count: True is no 1 here.
    if kind is None:
        return value is None
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return is_whole_number(value)
    if kind is float:
        return is_real_number(value)
    return isinstance(value, kind)
