"""Failures of spawned profiling workers: each failing worker writes its own, and the parent
reports the one that caused the others.

A worker can also fail before any of unstall's code runs in it: spawn starts each worker by
running the calling script again (as ``__mp_main__``), and a script that calls the profiler at
its top level, without an ``if __name__ == "__main__":`` guard, calls it again in every worker,
where multiprocessing refuses to start processes. Every worker therefore marks that it started
(``OUT.started.RANK``): when none did and none wrote a failure, the parent says how to guard the
script (:func:`spawn_guard_error`) instead of "process 0 terminated with exit code 1".

One worker's failure makes its peers fail in turn: gloo tells them "Connection closed by
peer" as soon as the failing worker leaves the group. Each worker therefore writes its failure
to a file of its own (``OUT.error.RANK``), saying whether it is the user's code (a
:class:`~unstall.usercode.UserCodeError`), one of unstall's own checks (another
:class:`~unstall.errors.UnstallError`) or anything else; the parent reports the user's error
first, then unstall's, then the rest, the earliest of a kind.

The timed training steps call the model and the loss bare (a wrapper would be timed too): what
one of them raises is turned into a :class:`~unstall.usercode.UserCodeError` afterwards
(:func:`step_failure`), naming the step's phase, the user's file and line where it was raised
(the innermost frame of the traceback outside Python, its installed packages and unstall), and
the batch it was given.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from unstall.errors import UnstallError
from unstall.usercode import (
    UserCodeError,
    describe_exception,
    innermost_user_frame,
    where_defined,
)

# The order in which failures are taken for the cause (lower first).
_CAUSE_ORDER = {"user": 0, "unstall": 1, "other": 2}


def one_line(exc: BaseException) -> str:
    """``exc`` as one line: unstall's own message, else the type and the message's first line."""
    return str(exc) if isinstance(exc, UnstallError) else describe_exception(exc)


def error_path(out_path: str, rank: int) -> Path:
    return Path(f"{out_path}.error.{rank}")


def write_error(out_path: str, rank: int, exc: BaseException) -> None:
    """Record rank ``rank``'s failure ``exc`` beside ``out_path``."""
    kind = "other"
    if isinstance(exc, UserCodeError):
        kind = "user"
    elif isinstance(exc, UnstallError):
        kind = "unstall"
    record = {"kind": kind, "time": time.time(), "message": one_line(exc)}
    path = error_path(out_path, rank)
    # Written whole, then renamed: the parent may terminate this worker at any moment (when a
    # peer has exited), and must never read half a record.
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(record), encoding="utf-8")
    os.replace(partial, path)


def worker_error(out_path: str) -> str | None:
    """The message of the failure that caused the others, or ``None`` when no worker wrote one."""
    records = []
    for path in Path(out_path).parent.glob(f"{Path(out_path).name}.error.*"):
        if path.suffix == ".partial":
            continue
        try:
            records.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    if not records:
        return None
    first = min(records, key=lambda r: (_CAUSE_ORDER.get(r.get("kind"), 2), r.get("time", 0.0)))
    return str(first.get("message", ""))


# --- workers that never started -----------------------------------------------------------------

GUARD = 'if __name__ == "__main__":'


def rerun_script() -> str | None:
    """The module or script file that spawn runs again in each worker before it unpickles its
    task, or None when it runs none (an interactive session, ``python -c``, ``python -m pkg``).

    The same choice as :func:`multiprocessing.spawn.get_preparation_data` and the worker's
    ``_fixup_main_from_name``/``_fixup_main_from_path``.
    """
    main = sys.modules.get("__main__")
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name is not None:
        return None if name == "__main__" or name.endswith(".__main__") else name
    return _main_path()


def _main_path() -> str | None:
    """The script file spawn runs again, when it runs one by its path."""
    main = sys.modules.get("__main__")
    if getattr(getattr(main, "__spec__", None), "name", None) is not None:
        return None
    path = getattr(main, "__file__", None)
    if path is None:
        return None
    # A relative path is taken from the directory the program started in, as spawn does.
    start = getattr(multiprocessing.process, "ORIGINAL_DIR", None) or os.getcwd()
    return os.path.normpath(os.path.join(start, path))


def spawn_guard_error(script: str | None) -> UnstallError:
    """The one line that says why workers died while starting: spawn ran ``script`` again."""
    ran = f"the calling script ({script})" if script else "the calling script"
    return UnstallError(
        f"the profiling workers are started with spawn, which runs {ran} again in each worker:"
        f" the script must guard its top-level code with `{GUARD}` (or call the profiler from"
        " an importable file)"
    )


def check_not_bootstrapping() -> None:
    """Refuse to profile inside a worker that spawn is still starting: its script called the
    profiler at the top level, and starting workers from here would fail in multiprocessing
    with a message of many lines."""
    # multiprocessing's own test for this (spawn._check_not_importing_main): the attribute is
    # set on the current process while a spawned child runs its parent's main script.
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        # Here the script is being run as __mp_main__ (runpy names the module it runs); the
        # worker's own __main__ is spawn's bootstrap.
        running = sys.modules.get("__mp_main__")
        raise spawn_guard_error(getattr(running, "__file__", None) or rerun_script())


def check_script_runs_again() -> None:
    """Fail before spawning when spawn cannot run the calling script again: a script read from
    stdin (``python - < train.py``) has the ``__file__`` "<stdin>", which every worker would fail
    to open, guarded or not."""
    path = _main_path()
    if path is not None and not os.path.isfile(path):
        shown = getattr(sys.modules.get("__main__"), "__file__", path)
        raise UnstallError(
            "the profiling workers are started with spawn, which runs the calling script again"
            f" in each worker, and {shown!r} is not a file (a script read from stdin?): run it"
            f" from a file, its top-level code under `{GUARD}`"
        )


def mark_started(out_path: str, rank: int) -> None:
    """Rank ``rank`` got as far as running unstall's code (see the module docstring)."""
    Path(f"{out_path}.started.{rank}").touch()


def any_started(out_path: str) -> bool:
    """Whether any worker got as far as running unstall's code."""
    return any(Path(out_path).parent.glob(f"{Path(out_path).name}.started.*"))


# --- failures inside a training step -------------------------------------------------------------


def user_frame(exc: BaseException) -> str | None:
    """``"FILE:LINE in FUNCTION"`` of the innermost frame of ``exc``'s traceback in the user's
    code, or None when it was raised in library code alone (see
    :func:`unstall.usercode.innermost_user_frame`)."""
    frame = innermost_user_frame(exc)
    return None if frame is None else f"{frame.path}:{frame.line} in {frame.function}"


def _distributed(exc: BaseException) -> bool:
    """Whether ``exc`` is the process group's (a peer left: gloo's "Connection closed by peer")."""
    import torch.distributed as dist

    text = str(exc).lower()
    return isinstance(exc, dist.DistError) or "gloo" in text or "nccl" in text


def describe_value(value: Any) -> str:
    """``"float32 (8, 16)"`` for a tensor, else the type's name."""
    import torch

    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).removeprefix('torch.')} {tuple(value.shape)}"
    return type(value).__name__


def describe_loss(loss: Callable[..., Any]) -> str:
    """A user's loss function with where it is defined; a loss module (the default
    cross-entropy) by its class."""
    from unstall.workload.losses import LOSSES  # (torch: imported where a loss is described)

    built_in = next((name for name, fn in LOSSES.items() if fn is loss), None)
    if built_in is not None:
        return f"the loss {built_in}"
    if hasattr(getattr(loss, "__func__", loss), "__code__"):
        return f"loss function {where_defined(loss)}"
    return f"the loss {type(loss).__name__}"


def step_failure(
    exc: BaseException,
    *,
    phase: str,
    model_fn: Callable[..., Any] | None,
    loss: Callable[..., Any],
    inputs: Any = None,
    targets: Any = None,
    outputs: Any = None,
) -> BaseException:
    """What a training step that raised ``exc`` in ``phase`` (data, forward, loss, backward,
    optimizer) reports: a :class:`UserCodeError` naming the user's line and the batch when the
    user's code raised it or the model or loss failed on the batch; else ``exc`` itself (the
    process group's failure when a peer left, a DataLoader's, unstall's own)."""
    if isinstance(exc, UnstallError) or _distributed(exc):
        # A collective's failure is a peer's that left, even inside the user's forward (a
        # SyncBatchNorm): the failure that made it leave is the one to report.
        return exc
    frame = user_frame(exc)
    if frame is None and phase not in ("forward", "loss"):
        return exc
    at = f" at {frame}" if frame is not None else ""
    batch = f"inputs {describe_value(inputs)}, targets {describe_value(targets)}"
    model = "the model"
    if model_fn is not None and hasattr(getattr(model_fn, "__func__", model_fn), "__code__"):
        model = f"the model of model function {where_defined(model_fn)}"
    what = {
        "forward": f"{model} failed{at} on a batch of {batch}",
        "loss": f"{describe_loss(loss)} failed{at} on outputs {describe_value(outputs)} and"
        f" targets {describe_value(targets)}",
        "backward": f"the backward pass failed{at}",
        "optimizer": f"the optimizer step failed{at}",
    }.get(phase, f"reading the next batch failed{at}")
    return UserCodeError(f"{what}: {describe_exception(exc)}")
