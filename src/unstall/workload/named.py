"""A callable with the label a run's result shows for it.

A run takes its model, data and loss as callables; its result says what they were. A plain
function is shown by its name; :class:`Named` carries the text a user chose instead (a zoo
model's name and options, ``digits``, ``model.py:build``), which is how the command line keeps
its results saying what was typed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class Named:
    """``fn`` shown as ``label`` (made with ``options``); calling it calls ``fn``."""

    fn: Callable[..., Any]
    label: str
    options: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __reduce__(self) -> tuple[Any, ...]:  # a mappingproxy does not pickle
        return (Named, (self.fn, self.label, dict(self.options)))


def unwrap(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The callable inside any :class:`Named` (what errors in user code should name)."""
    while isinstance(fn, Named):
        fn = fn.fn
    return fn


def label_of(fn: Callable[..., Any]) -> str:
    """A :class:`Named`'s label, else the function's (or a partial's function's, or the
    callable object's class's) name."""
    if isinstance(fn, Named):
        return fn.label
    if isinstance(fn, functools.partial):
        return label_of(fn.func)
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    return str(name) if name else type(fn).__name__


def options_of(fn: Callable[..., Any]) -> dict[str, object]:
    """A :class:`Named`'s options (none for anything else)."""
    return dict(fn.options) if isinstance(fn, Named) else {}
