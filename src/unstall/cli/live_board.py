"""`unstall live run` on a terminal: a table of the running and queued jobs, redrawn in place.

The rows come from :func:`unstall.live.status.live_status` (the scheduling core's state, handed
over by ``run_live(on_status=...)`` a few times a second); this module only draws them. The
table is drawn on its own thread (rich's :class:`~rich.live.Live`, four times a second, so that
the elapsed time ticks while the run waits): it reads only the latest status, a frozen object
that the run's thread replaces whole.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text

from unstall.cli.common import err_console, fmt_duration, table

if TYPE_CHECKING:
    from unstall.live.status import LiveStatus

# Redraws a second: the elapsed time ticks; the rows change as often as statuses come.
REFRESH_PER_SECOND = 4


def elapsed_text(seconds: float) -> str:
    """Wall time as ``H:MM:SS``."""
    whole = int(max(0.0, seconds))
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def running_percent(progress: float) -> str:
    """A running job's progress in whole percent, rounded down and at most 99%: the estimate
    reaches its work before the job's end is seen (its start-up is not counted out), and a job
    reads 100% only once it has finished."""
    return f"{min(99, int(100 * progress))}%"


def header_line(status: LiveStatus | None, title: str, elapsed_wall_s: float) -> str:
    """What the run is at: elapsed wall time, trace time, jobs finished of all, GPUs busy (how
    many jobs run and wait heads their tables)."""
    clock = f"{title}  {elapsed_text(elapsed_wall_s)}"
    if status is None:
        return f"{clock}  starting Ray and the executors"
    failed = f" ({status.jobs_failed} failed)" if status.jobs_failed else ""
    return (
        f"{clock} (trace {fmt_duration(status.time_s)})  "
        f"jobs {status.jobs_finished}/{status.jobs_total} finished{failed}  "
        f"GPUs {status.gpus_busy}/{status.gpus_total} busy"
    )


def status_view(status: LiveStatus | None, title: str, elapsed_wall_s: float) -> RenderableType:
    """The header line, then a row per running job, then a row per queued job (the first
    rows of each, then how many more)."""
    parts: list[RenderableType] = [Text(header_line(status, title, elapsed_wall_s))]
    if status is None:
        return Group(*parts)
    if status.running:
        rows: list[list[object]] = [
            [
                row.job_id,
                row.model,
                row.gpus,
                row.placement,
                running_percent(row.progress),
                f"{row.iterations_done:,.0f}/{row.iterations_total:,.0f}",
                row.restarts,
            ]
            for row in status.running
        ]
        if status.running_more:
            rows.append([f"… and {status.running_more} more", "", "", "", "", "", ""])
        columns = [
            f"{status.running_total} running",
            "model",
            "GPUs",
            "placement",
            "progress",
            "iterations",
            "restarts",
        ]
        running = table("", columns, rows)
        for figure in (4, 5):  # progress and iterations: figures, written here
            running.columns[figure].justify = "right"
        parts.append(running)
    if status.queued:
        rows = [
            [
                row.job_id,
                row.gpus,
                fmt_duration(row.waited_s),
                fmt_duration(row.queued_since_s),
                row.position,
            ]
            for row in status.queued
        ]
        if status.queued_more:
            rows.append([f"… and {status.queued_more} more", "", "", "", ""])
        if status.running:
            parts.append(Text(""))
        columns = [f"{status.queued_total} queued", "GPUs", "waiting", "queued at", "position"]
        queued = table("", columns, rows)
        for figure in (2, 3):  # how long it waits, since when (trace time): figures too
            queued.columns[figure].justify = "right"
        parts.append(queued)
    if not (status.running or status.queued):
        parts.append(Text("no job running or queued"))
    return Group(*parts)


class StatusBoard:
    """What the live display draws: the latest status (None until the run begins)."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.began = time.monotonic()
        self.status: LiveStatus | None = None

    def update(self, status: LiveStatus) -> None:
        # One reference replaced: the drawing thread sees the old status or the new one.
        self.status = status

    def __rich__(self) -> RenderableType:
        return status_view(self.status, self.title, time.monotonic() - self.began)


@contextmanager
def status_board(
    title: str, console: Console | None = None
) -> Iterator[Callable[[LiveStatus], None]]:
    """Draw the run's status on ``console`` (stderr) while the block runs; yields the
    ``on_status`` to hand to ``run_live``. The last state stays on screen afterwards. Lines
    printed meanwhile (the run's log) appear above the table; so does what goes to stdout when
    stdout is the same terminal (a file or a pipe keeps its own)."""
    board = StatusBoard(title)
    with Live(
        board,
        console=console if console is not None else err_console,
        refresh_per_second=REFRESH_PER_SECOND,
        redirect_stdout=sys.stdout.isatty(),
        redirect_stderr=True,
    ):
        yield board.update
