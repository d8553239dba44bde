"""The one loader of user code that every part shares.

A user names a Python object the way uvicorn and gunicorn name an app: ``path/to/file.py:name``
for a file, or ``package.module:name`` for an importable module (``name`` may be dotted:
``file.py:Factory.build``). :func:`load_object` returns the object; every failure raises
:class:`UserCodeError` with one line naming the file (and line, for a syntax error or an
exception raised while the file runs) and what was wrong, never a traceback from inside the
loader.

Code loaded from a file is registered with cloudpickle to travel *by value*: a model function
from ``my_model.py`` sent to a Ray worker on another node then works although that node cannot
import ``my_model``. :func:`call_user` runs a user callable and turns whatever it raises into a
:class:`UserCodeError` that names the function and where it is defined.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import os
import sys
import sysconfig
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple, TypeVar

from unstall.errors import UnstallError, a_or_an

T = TypeVar("T")

# Loaded files live in sys.modules under this prefix plus a digest of their absolute path, so
# that two files called model.py in different folders never replace each other.
_FILE_MODULE_PREFIX = "unstall_user_"


class UserCodeError(UnstallError):
    """User code could not be loaded or failed when called; the message names the file."""


class UserCodeNameError(UserCodeError):
    """The user named code that is not there: no such file or module, no such name in it, or a
    reference not written FILE.py:NAME (a usage error: the CLI exits 2 for it)."""


def is_reference(text: str) -> bool:
    """Whether ``text`` names user code (``file.py:name`` or ``module:name``), not a built-in name.

    Built-in names (zoo models, policies, presets) never contain a colon; a Windows drive letter
    (``C:\\...``) is not a module reference either.
    """
    if ":" not in text:
        return False
    target, _, name = text.rpartition(":")
    return bool(target) and bool(name) and not (len(target) == 1 and target.isalpha())


def load_object(reference: str, *, what: str = "object") -> Any:
    """The object ``reference`` names (``file.py:name`` or ``package.module:name``).

    ``what`` says what the object is for ("model function", "policy class") in error messages.
    """
    if not is_reference(reference):
        raise UserCodeNameError(f"{what} {reference!r}: want FILE.py:NAME or package.module:NAME")
    target, _, attribute = reference.rpartition(":")
    if target.endswith(".py") or "/" in target or "\\" in target:
        module = _load_file(Path(target), what=what)
        where = target
    else:
        module = _import_module(target, what=what)
        where = target
    return _attribute(module, attribute, where=where, what=what)


def load_callable(reference: str, *, what: str = "function") -> Callable[..., Any]:
    """Like :func:`load_object`, and the object must be callable (a function or a class)."""
    obj = load_object(reference, what=what)
    if not callable(obj):
        raise UserCodeError(
            f"{what} {reference!r} is {a_or_an(type(obj).__name__)}, not something to call"
        )
    return obj


def _load_file(path: Path, *, what: str) -> ModuleType:
    if not path.is_file():
        why = "is a folder" if path.is_dir() else "no such file"
        raise UserCodeNameError(f"{what} file {path}: {why}")
    absolute = path.resolve()
    name = _FILE_MODULE_PREFIX + hashlib.sha1(str(absolute).encode()).hexdigest()[:12]
    cached = sys.modules.get(name)
    if cached is not None:
        return cached
    spec = importlib.util.spec_from_file_location(name, absolute)
    if spec is None or spec.loader is None:
        raise UserCodeError(f"{what} file {path}: not a Python file Python can load")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    # The file's own folder first on sys.path while it runs, so it can import its siblings;
    # then last, for the imports its functions make when called (``def make_model(): from
    # layers import Block``), where it shadows no installed module.
    folder = str(absolute.parent)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        del sys.modules[name]
        raise UserCodeError(f"{path}, line {exc.lineno}: syntax error: {exc.msg}") from None
    except BaseException as exc:
        del sys.modules[name]
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        where = f"{path}{_user_line(exc, absolute)}"
        raise UserCodeError(f"{where}: {describe_exception(exc)}") from exc
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)
    if added:
        sys.path.append(folder)
    _travel_by_value(module)
    return module


def _import_module(name: str, *, what: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise UserCodeNameError(
                f"{what} module {name!r}: not importable (no module named {exc.name!r}; "
                "for a file, give its path ending in .py)"
            ) from None
        raise UserCodeError(f"module {name}: {describe_exception(exc)}") from exc
    except SyntaxError as exc:
        raise UserCodeError(f"{exc.filename}, line {exc.lineno}: syntax error: {exc.msg}") from None
    except Exception as exc:
        raise UserCodeError(f"module {name}: {describe_exception(exc)}") from exc


def _attribute(module: ModuleType, dotted: str, *, where: str, what: str) -> Any:
    obj: Any = module
    for part in dotted.split("."):
        if not hasattr(obj, part):
            known = sorted(n for n in vars(module) if not n.startswith("_"))
            shown = ", ".join(known[:20]) + (", ..." if len(known) > 20 else "")
            raise UserCodeNameError(
                f"{where} has no {what} {dotted!r}; it defines: {shown or 'nothing'}"
            )
        obj = getattr(obj, part)
    return obj


def _travel_by_value(module: ModuleType) -> None:
    """Have cloudpickle send this module's functions and classes by value: the package's copy,
    and Ray's own (``ray.cloudpickle``, a separate copy with its own registry) when Ray is
    imported, as it is by every part that runs on Ray."""
    names = ["cloudpickle", "ray.cloudpickle"] if "ray" in sys.modules else ["cloudpickle"]
    for name in names:
        try:
            pickler = importlib.import_module(name)
        except ImportError:  # not installed: nothing of it will pickle the code
            continue
        pickler.register_pickle_by_value(module)


def where_defined(obj: object) -> str:
    """``file.py:name`` (line N) of a function or class, for messages about it."""
    target = getattr(obj, "__func__", obj)
    name = getattr(target, "__qualname__", None) or type(target).__name__
    code = getattr(target, "__code__", None)
    if code is not None:
        return f"{name} ({code.co_filename}:{code.co_firstlineno})"
    module = sys.modules.get(getattr(target, "__module__", "") or "")
    path = getattr(module, "__file__", None)
    return f"{name} ({path})" if path else name


def call_user(fn: Callable[..., T], *args: Any, what: str = "function", **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``; anything it raises becomes a :class:`UserCodeError` naming ``fn``
    and the line of the user's code where it was raised."""
    try:
        return fn(*args, **kwargs)
    except UnstallError:
        raise
    except Exception as exc:
        raise user_code_error(fn, exc, what=what) from exc


def user_code_error(fn: Callable[..., Any], exc: BaseException, *, what: str) -> UserCodeError:
    """The one-line error for ``exc``, raised by ``fn`` or by what ``fn`` returned (the iterator
    of a data function, the ``forward`` of a model): it names ``fn`` and the line of ``fn``'s
    file where ``exc`` was raised."""
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    where = _user_line(exc, Path(code.co_filename)) if code is not None else ""
    return UserCodeError(f"{what} {where_defined(fn)} failed{where}: {describe_exception(exc)}")


def _user_line(exc: BaseException, path: Path) -> str:
    """``", line N"`` of the innermost frame of ``path`` in the exception's traceback."""
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename) == path:
            line = frame.lineno
    return f", line {line}" if line is not None else ""


@functools.cache
def _library_roots() -> tuple[str, ...]:
    """The folders of code that is not the user's: Python's own, the installed packages, unstall."""
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots.add(os.path.dirname(os.path.abspath(__file__)))
    return tuple(os.path.join(os.path.realpath(root), "") for root in roots)


def is_library_file(path: str) -> bool:
    """Whether ``path`` is Python's own code, an installed package's or unstall's."""
    return os.path.realpath(path).startswith(_library_roots())


class UserFrame(NamedTuple):
    """Where in the user's code an exception passed: file, line and function."""

    path: str
    line: int
    function: str


def innermost_user_frame(exc: BaseException) -> UserFrame | None:
    """The innermost frame of ``exc``'s traceback in the user's code (outside Python, its
    installed packages and unstall), or None when it passed through library code alone: where
    a user's model or loss failed, when torch raised the error. Code sent by value has no file
    name of its own (``<dynamic-code>``); its module's ``__file__`` names the file."""
    found = None
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        path = frame.f_code.co_filename
        if path.startswith("<"):
            path = str(frame.f_globals.get("__file__") or path)
        if not path.startswith("<") and not is_library_file(path):
            name = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
            found = UserFrame(path, tb.tb_lineno, name)
        tb = tb.tb_next
    return found


def describe_exception(exc: BaseException) -> str:
    """``"ZeroDivisionError: division by zero"``: the type and the first line of the message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
