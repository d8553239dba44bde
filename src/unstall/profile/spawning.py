"""The spawned workers of one host, watched by the parent: their progress, their failures, and
their stop.

torch's ``ProcessContext.join`` stops the other workers when one fails with a warning line of its
own on stderr ("Terminating process N via signal SIGTERM"), ahead of the profiler's one line that
says why; the parent therefore watches the processes itself, stops them quietly, and raises what
``join`` would have raised (the worker's traceback, or how it exited), which
:func:`unstall.profile.runner.run_workers` turns into that one line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# How often the parent looks at the workers and at rank 0's progress file.
POLL_S = 0.2


def spawn_workers(
    worker: Callable[..., None],
    args: tuple[Any, ...],
    nprocs: int,
    progress: Path,
    on_run: Callable[[str], None] | None,
) -> None:
    """Start ``nprocs`` processes running ``worker(rank, *args)`` and wait for them, passing
    each line rank 0 appends to ``progress`` (a finished run) to ``on_run``.

    The parent watches the workers itself rather than through torch's ``ProcessContext.join``:
    when one fails, that stops the others with a warning of its own on stderr ("Terminating
    process N via signal SIGTERM") before the profiler says why in one line; here they are
    stopped quietly and the failure is raised (:func:`_worker_failed`)."""
    import multiprocessing.connection

    import torch.multiprocessing as mp

    context = mp.spawn(worker, args=args, nprocs=nprocs, join=False)
    assert context is not None  # join=False returns the processes' context
    processes = context.processes
    seen = 0
    try:
        while True:
            running = [p.sentinel for p in processes if p.exitcode is None]
            if running:
                multiprocessing.connection.wait(running, timeout=POLL_S)
            runs = progress.read_text(encoding="utf-8").split() if progress.exists() else []
            for run in runs[seen:]:
                if on_run is not None:
                    on_run(run)
            seen = len(runs)
            failed = next((r for r, p in enumerate(processes) if p.exitcode not in (None, 0)), None)
            if failed is not None:
                _stop_workers(processes)
                raise _worker_failed(failed, processes[failed], context.error_files[failed])
            if all(p.exitcode == 0 for p in processes):
                return
    except BaseException:
        # A Ctrl-C that reached this process alone (a SIGTERM, `kill -INT`), or a failed
        # progress call: the workers would run on, orphans holding their gloo ports.
        _stop_workers(processes)
        raise
    finally:
        for path in context.error_files:  # torch's spawn wrapper leaves them in the temp folder
            Path(path).unlink(missing_ok=True)


def _worker_failed(rank: int, process: Any, error_file: str) -> Exception:
    """The exception torch's ``ProcessContext.join`` raises for worker ``rank`` (``process``):
    the worker's traceback when it raised (torch's spawn wrapper wrote it to ``error_file``),
    else how it exited."""
    import pickle
    import signal

    from torch.multiprocessing.spawn import ProcessExitedException, ProcessRaisedException

    try:
        with open(error_file, "rb") as handle:
            trace = pickle.load(handle)
    except (OSError, EOFError, pickle.UnpicklingError):
        trace = None
    if isinstance(trace, str):
        message = f"\n\n-- Process {rank} terminated with the following error:\n{trace}"
        return ProcessRaisedException(message, rank, process.pid)
    exitcode = process.exitcode
    how = f"exit code {exitcode}"
    name = None
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"<Unknown signal {-exitcode}>"
        how = f"signal {name}"
    return ProcessExitedException(
        f"process {rank} terminated with {how}",
        error_index=rank,
        error_pid=process.pid,
        exit_code=exitcode,
        signal_name=name,
    )


# How long stopped workers get to end before they are killed.
STOP_WAIT_S = 5.0


def _stop_workers(processes: Sequence[Any]) -> None:
    """Terminate the spawned workers still alive, wait for them, kill those that linger."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(STOP_WAIT_S)
        if process.is_alive():
            process.kill()
            process.join()
