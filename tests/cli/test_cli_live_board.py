"""`unstall live run` on a terminal: the table of running and queued jobs it draws from a
live run's status (`unstall.cli.live_board`), and which output gets the table and which the
event lines."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from unstall.cli import live as cli_live
from unstall.cli.live_board import header_line, running_percent, status_board, status_view
from unstall.live.status import LiveStatus, QueuedRow, RunningRow


def _status() -> LiveStatus:
    running = tuple(
        RunningRow(
            job_id=f"run{i}",
            model="vgg16",
            gpus=2,
            placement="0:1+1:1" if i == 0 else f"{i}:2",
            progress=0.5,
            iterations_done=1234.0,
            iterations_total=2468.0,
            restarts=i,
        )
        for i in range(3)
    )
    queued = tuple(
        QueuedRow(job_id=f"wait{i}", gpus=4, queued_since_s=60.0, waited_s=90.0, position=i + 1)
        for i in range(2)
    )
    return LiveStatus(
        time_s=150.0,
        jobs_total=9,
        jobs_finished=6,
        jobs_failed=0,
        gpus_busy=6,
        gpus_total=16,
        running=running,
        running_total=3,
        queued=queued,
        queued_total=7,
    )


def _drawn(renderable: object) -> str:
    out = io.StringIO()
    Console(file=out, force_terminal=True, width=100, color_system=None).print(renderable)
    return out.getvalue()


def test_the_table_shows_each_running_job_where_it_runs_and_how_far_it_is() -> None:
    text = _drawn(status_view(_status(), "live run of fifo", 83.0))
    lines = text.splitlines()
    assert (
        lines[0] == "live run of fifo  0:01:23 (trace 2.50 min)  jobs 6/9 finished  GPUs 6/16 busy"
    )
    heads = [line.split() for line in lines if "GPUs" in line and "busy" not in line]
    assert heads == [
        ["3", "running", "model", "GPUs", "placement", "progress", "iterations", "restarts"],
        ["7", "queued", "GPUs", "waiting", "queued", "at", "position"],
    ]
    first = next(line for line in lines if "run0" in line).split()
    assert first == ["run0", "vgg16", "2", "0:1+1:1", "50%", "1,234/2,468", "0"]
    assert next(line for line in lines if "run2" in line).split()[-1] == "2"
    waiting = next(line for line in lines if "wait1" in line).split()
    assert waiting == ["wait1", "4", "1.50", "min", "1.00", "min", "2"]
    assert "… and 5 more" in text  # 7 queued, 2 listed


def test_a_running_job_reads_at_most_99_percent() -> None:
    assert [running_percent(p) for p in (0.0, 0.416, 0.999, 1.0)] == ["0%", "41%", "99%", "99%"]


def test_the_table_says_when_nothing_runs_or_waits_and_before_the_run_begins() -> None:
    empty = LiveStatus(
        time_s=3600.0,
        jobs_total=2,
        jobs_finished=1,
        jobs_failed=1,
        gpus_busy=0,
        gpus_total=8,
        running=(),
        running_total=0,
        queued=(),
        queued_total=0,
    )
    text = _drawn(status_view(empty, "live run of fifo", 3725.0))
    assert "1:02:05 (trace 1.00 h)  jobs 1/2 finished (1 failed)  GPUs 0/8 busy" in text
    assert text.splitlines()[1:] == ["no job running or queued"]
    assert header_line(None, "live run", 2.0) == "live run  0:00:02  starting Ray and the executors"


def test_the_board_redraws_in_place_and_leaves_the_last_state() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100, color_system=None)
    with status_board("live run of fifo", console=console) as on_status:
        on_status(_status())
    text = out.getvalue()
    assert "run0" in text and "0:1+1:1" in text and "50%" in text
    assert "\x1b[" in text  # cursor moves: drawn in place, not line after line


def test_a_terminal_gets_the_table_and_anything_else_the_event_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for terminal in (True, False):
        console = Console(file=io.StringIO(), force_terminal=terminal)
        monkeypatch.setattr(cli_live, "err_console", console)
        for quiet in (False, True):
            for events in (False, True):
                table = cli_live.shows_table(quiet, events)
                lines = cli_live._event_printer(events, quiet) is not None
                # The table only on a terminal, without --quiet or --events.
                assert table == (terminal and not quiet and not events)
                # Event lines where asked, or off a terminal unless --quiet: never both.
                assert lines == (events or (not terminal and not quiet))
                assert not (table and lines)
