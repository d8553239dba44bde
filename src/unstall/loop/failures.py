"""A policy that raises: the one-line account of what it raised and where.

A policy's ``decide`` or ``reset`` that raises (a user's ``1/0``) stops the run with a
:class:`PolicyCrashError` naming the policy, the exception and the file, line and function that
raised it, built by :func:`describe_failure`; ``unstall sim run``, ``sim compare`` and every
failed cell of ``sim sweep`` print that same text on one line, never the traceback through the
engine, which tells a policy's author nothing they can act on.
"""

from __future__ import annotations

import os
import sys
import traceback

from unstall.errors import UnstallError
from unstall.usercode import describe_exception


class PolicyCrashError(UnstallError):
    """A policy's ``decide`` or ``reset`` raised; ``error`` is :func:`describe_failure`'s text."""

    def __init__(self, policy: str, error: str) -> None:
        self.policy = policy
        self.error = error
        super().__init__(f"policy {policy!r} failed: {error}")

    def __reduce__(self) -> tuple[object, ...]:
        # Picklable as it was built (see unstall.errors.ConfigError.__reduce__).
        return (type(self), (self.policy, self.error), self.__dict__)


def policy_crash(policy: object, exc: Exception) -> PolicyCrashError:
    """What stops a run (simulated or live) when the policy's own code raised: the policy, the
    exception and where, in the policy's file when the innermost frame is elsewhere (a library
    it called)."""
    module = sys.modules.get(type(policy).__module__)
    home = getattr(module, "__file__", None)
    name = getattr(policy, "name", type(policy).__name__)
    return PolicyCrashError(str(name), describe_failure(exc, home))


def describe_failure(exc: BaseException, home: str | None = None) -> str:
    """``"ZeroDivisionError: division by zero (badpol.py:11, in decide)"``: the exception's type,
    the first line of its message and the innermost frame that raised it. When that frame is
    not in ``home`` (the policy's own file) but one of the frames is, the innermost such frame
    is named too: an error raised inside a library the policy called is then traced back to the
    line of the user's code that called it."""
    text = describe_exception(exc)
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return text
    place = _place(frames[-1])
    if home is not None and not _same_file(frames[-1].filename, home):
        mine = [frame for frame in frames if _same_file(frame.filename, home)]
        if mine:
            place += f"; from {_place(mine[-1])}"
    return f"{text} ({place})"


def _place(frame: traceback.FrameSummary) -> str:
    return f"{os.path.basename(frame.filename)}:{frame.lineno}, in {frame.name}"


def _same_file(a: str, b: str) -> bool:
    return os.path.normcase(os.path.abspath(a)) == os.path.normcase(os.path.abspath(b))
