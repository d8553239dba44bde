"""A user's own training loop, ``def train(ctx)``, as one segment of a live job.

The user writes the loop; unstall forms the job's group, hands the loop a :class:`TrainContext`
and keeps what the loop gives back through it:

- ``ctx.restore()``: the state the job's last ``ctx.save`` kept (None on a fresh start); the
  step to go on from is whatever the loop saved in it;
- ``ctx.should_stop()``: whether the scheduler preempts or migrates the job. The processes agree
  on it (an all-reduce of their stop flags, as the built-in loops do after every step), so every
  rank gets the same answer at the same call and all of them stop after the same step;
- ``ctx.save(state, step=)``: a checkpoint of the job at ``step`` iterations (rank 0's is kept;
  on the other ranks it does nothing), periodically and when told to stop;
- ``ctx.report(step=, **metrics)``: progress and metrics, kept in the segment's outcome and
  written to the job's log when it has one.

A loop that returns without being told to stop has finished its ``ctx.iterations``. A loop
told to stop has got as far as its last save: the job resumes from it, elsewhere, exactly as
the built-in jobs do.
"""

from __future__ import annotations

import io
import json
import math
import numbers
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist

from unstall.usercode import UserCodeNameError, is_reference, load_callable, user_code_error

# The reports a segment keeps in its outcome: the latest ones (a loop that reports every step
# for hours must not grow the outcome without end; the job's log holds them all).
MAX_REPORTS = 10_000
WHAT = "training function"
TrainFn = Callable[["TrainContext"], Any]


class _Work(Protocol):
    """What this module reads of a :class:`unstall.live.training.JobWork` (which imports this
    module: the protocols keep the import one way)."""

    @property
    def job_id(self) -> str: ...
    @property
    def iterations(self) -> float: ...
    @property
    def data_seed(self) -> int: ...
    @property
    def train(self) -> TrainFn | str | None: ...


class SegmentPlan(Protocol):
    """What this module reads of a :class:`unstall.live.training.SegmentPlan`."""

    @property
    def work(self) -> _Work: ...
    @property
    def rank(self) -> int: ...
    @property
    def world_size(self) -> int: ...
    @property
    def device(self) -> str: ...
    @property
    def start_iteration(self) -> float: ...
    @property
    def checkpoint(self) -> bytes | None: ...
    @property
    def checkpoint_every_s(self) -> float: ...


class SegmentControl(Protocol):
    """What this module reads of a :class:`unstall.live.training.SegmentControl`."""

    @property
    def stop(self) -> threading.Event: ...


class JobLog:
    """The job's log file (appended to by every process of every segment): lines of the loop's
    stdout and stderr and its reports, each prefixed with the process's rank."""

    def __init__(self, path: str, rank: int) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        # Line-buffered appends: the job's processes write whole lines to one file.
        self._file = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        self._prefix = f"[rank {rank}] "
        self._lock = threading.Lock()

    def line(self, text: str) -> None:
        with self._lock:
            self._file.write(self._prefix + text.rstrip("\n") + "\n")

    def stream(self) -> _LineStream:
        """A text stream whose lines go to the log (for ``print`` in the user's loop)."""
        return _LineStream(self)

    def close(self) -> None:
        self._file.close()


class _LineStream(io.TextIOBase):
    """Collects written text into lines for a :class:`JobLog`."""

    def __init__(self, log: JobLog) -> None:
        self._log = log
        self._pending = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        *lines, self._pending = (self._pending + text).split("\n")
        for line in lines:
            self._log.line(line)
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._log.line(self._pending)
            self._pending = ""


@contextmanager
def captured(log: JobLog | None) -> Iterator[None]:
    """The process's stdout and stderr to ``log`` while the block runs (nothing without one).
    An executor runs one segment at a time, so replacing them process-wide catches only it."""
    if log is None:
        yield
        return
    out, err = log.stream(), log.stream()
    try:
        with redirect_stdout(out), redirect_stderr(err):
            yield
    finally:
        out.flush()
        err.flush()


class TrainContext:
    """What a user's ``train(ctx)`` gets: see the module docstring."""

    def __init__(
        self,
        plan: SegmentPlan,
        control: SegmentControl,
        on_checkpoint: Callable[[float, bytes], None] | None,
        log: JobLog | None,
        restored: Any = None,
    ) -> None:
        work = plan.work
        self.rank = plan.rank
        self.world_size = plan.world_size
        self.device = torch.device(plan.device)
        self.group = dist.group.WORLD
        self.iterations = int(work.iterations)
        self.job_id = work.job_id
        self.seed = work.data_seed  # the job's own seed: the run's seed and its id
        self._plan = plan
        self._control = control
        self._on_checkpoint = on_checkpoint
        self._log = log
        self._restored = restored
        self._stopping = False
        self._last_save = time.monotonic()
        self.saved_step = int(plan.start_iteration)
        self.saved: bytes | None = None
        self.reports: list[dict[str, float]] = []

    def restore(self) -> Any:
        """The state the last ``save`` kept, loaded with ``torch.load`` onto ``ctx.device``;
        None on a fresh start."""
        return self._restored

    def should_stop(self) -> bool:
        """Whether to stop now (the job is preempted or migrated). Call it on every rank at the
        same point of the loop: the ranks agree by an all-reduce, so all get the same answer.
        Once True it stays True, with no more collectives."""
        if self._stopping:
            return True
        flag = torch.zeros(1)
        flag[0] = 1.0 if self._control.stop.is_set() else 0.0
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        self._stopping = bool(flag[0] > 0)
        return self._stopping

    @property
    def told_to_stop(self) -> bool:
        """Whether ``should_stop`` has said True (without asking the other ranks again)."""
        return self._stopping

    def checkpoint_due(self) -> bool:
        """Whether the run's checkpoint period (``checkpoint_every_s``) has passed since this
        process's last save: a loop may save when this says so rather than every N steps. Each
        process reads its own clock: no collective may depend on the answer."""
        return time.monotonic() - self._last_save >= self._plan.checkpoint_every_s

    def save(self, state: Any, *, step: int) -> None:
        """Keep ``state`` (a dict of tensors, state_dicts, numbers) as the job's checkpoint at
        ``step`` iterations; rank 0's is kept, on the other ranks this does nothing."""
        step = _whole(step, "save", self.iterations)
        self._last_save = time.monotonic()
        # Every rank counts the step (its outcome says where the job stands); rank 0 keeps it.
        self.saved_step = step
        if self.rank != 0:
            return
        buffer = io.BytesIO()
        torch.save({"iteration": float(step), "state": state}, buffer)
        self.saved = buffer.getvalue()
        if not self._stopping and self._on_checkpoint is not None:
            # A periodic checkpoint goes to the store now; the one made on a stop goes back
            # with the segment's outcome, stored before the segment reports its end.
            self._on_checkpoint(float(step), self.saved)
        if self._log is not None:
            self._log.line(f"checkpoint at step {step}")

    def report(self, *, step: int, **metrics: Any) -> None:
        """Progress (``step``, iterations done) and metrics (numbers or one-element tensors)."""
        entry = {"step": float(_whole(step, "report", self.iterations))}
        for name, value in metrics.items():
            entry[name] = _number(name, value)
        self.reports.append(entry)
        del self.reports[:-MAX_REPORTS]
        if self._log is not None:
            shown = {k: int(v) if k == "step" else v for k, v in entry.items()}
            self._log.line("report " + json.dumps(shown))


def restored_state(plan: SegmentPlan, device: torch.device) -> Any:
    if plan.checkpoint is None:
        return None
    held = torch.load(io.BytesIO(plan.checkpoint), map_location=device, weights_only=True)
    if float(held["iteration"]) != plan.start_iteration:
        raise RuntimeError(
            f"job {plan.work.job_id}: checkpoint at iteration {held['iteration']}, asked to "
            f"resume at {plan.start_iteration}"
        )
    return held["state"]


def _whole(step: Any, method: str, iterations: int) -> int:
    """``step`` as a whole number of iterations within the job's, or a ValueError that says
    which call gave it (raised in the user's loop: its message names the loop's line)."""
    if isinstance(step, torch.Tensor):
        step = step.item()
    if isinstance(step, bool) or not isinstance(step, int | float) or step != math.floor(step):
        raise ValueError(f"ctx.{method}: step must be a whole number of iterations, got {step!r}")
    if not 0 <= step <= iterations:
        raise ValueError(f"ctx.{method}: step {int(step)} is outside the job's 0..{iterations}")
    return int(step)


def _number(name: str, value: Any) -> float:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"ctx.report: metric {name!r} is a tensor of {value.numel()} values")
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"ctx.report: metric {name!r} must be a number, got {value!r}")
    return float(value)


def train_function(train: TrainFn | str) -> TrainFn:
    """The user's ``train``: itself, or loaded here from its reference (``FILE.py:FUNC``), so
    that a reference is loaded where the loop runs, never in the driver."""
    if isinstance(train, str):
        return load_callable(train, what=WHAT)
    return train


def absolute_reference(reference: str, what: str = WHAT) -> str:
    """``FILE.py:FUNC`` with FILE made absolute (a module reference as it is), for processes
    that run in other folders; a text that is no reference is a usage error naming ``what``."""
    if not is_reference(reference):
        raise UserCodeNameError(f"{what} {reference!r}: want FILE.py:FUNC or package.module:FUNC")
    target, _, name = reference.rpartition(":")
    if target.endswith(".py") or "/" in target or "\\" in target:
        return f"{Path(target).resolve()}:{name}"
    return reference


class UserLoop:
    """One segment of a user's loop, as :func:`unstall.live.training.run_segment` runs it."""

    behind_s = 0.0  # what emulated compute measures; a user's loop is real compute
    scheduled_s = 0.0

    def __init__(self, plan: SegmentPlan, control: SegmentControl, log: JobLog | None) -> None:
        work = plan.work
        if work.train is None:
            raise ValueError(f"job {work.job_id}: no training function")
        if work.iterations != math.floor(work.iterations):
            raise ValueError(f"job {work.job_id}: a training loop needs whole iterations")
        self.plan = plan
        self.control = control
        self.log = log
        self.fn = train_function(work.train)
        # Loaded before the loop runs, so that the segment's restore time counts it.
        self.restored = restored_state(plan, torch.device(plan.device))
        self.ctx: TrainContext | None = None

    @property
    def reports(self) -> tuple[dict[str, float], ...]:
        return tuple(self.ctx.reports) if self.ctx is not None else ()

    def train(
        self,
        control: SegmentControl,
        on_checkpoint: Callable[[float, bytes], None] | None,
    ) -> tuple[float, bool]:
        """Run the loop; returns where the job stands and whether it finished."""
        ctx = TrainContext(self.plan, control, on_checkpoint, self.log, self.restored)
        self.ctx = ctx
        try:
            self.fn(ctx)
        except Exception as exc:
            raise user_code_error(self.fn, exc, what=WHAT) from exc
        if not ctx.told_to_stop or ctx.saved_step >= ctx.iterations:
            return float(ctx.iterations), True
        return float(ctx.saved_step), False

    def checkpoint(self, iteration: float) -> bytes | None:
        """Rank 0's last save, when it holds the job at ``iteration`` (else the store's copy
        of an earlier save is the job's checkpoint)."""
        ctx = self.ctx
        if ctx is None or ctx.saved is None or ctx.saved_step != int(iteration):
            return None
        return ctx.saved
