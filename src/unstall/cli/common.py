"""What every command shares: console, the --json/--quiet options, progress bars, error exits."""

from __future__ import annotations

import functools
import inspect
import sys
import typing
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from unstall.errors import ConfigError, UnstallError
from unstall.results import write_result

# Output that is not a terminal (a log, a pipe, a test) has no width to respect: keep rows whole.
console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)

JsonOpt = Annotated[
    Path | None,
    typer.Option(
        "--json",
        help="Write the result as JSON to this path, and its full config beside it "
        "(PATH with .config.json).",
        dir_okay=False,
    ),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")]

P = ParamSpec("P")
R = TypeVar("R")

# Exit codes: 1 = the run finished but the answer is "no" (e.g. no configuration meets a budget)
# or an input could not be used; 2 = usage error or a part that is not built yet.
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT


class Interrupted(KeyboardInterrupt):
    """A Ctrl-C that a command caught to say how far it got: its message is the line that
    :func:`handle_errors` prints after "interrupted: " (e.g. "stopped at simulated time 3.2 h,
    40 of 120 jobs finished; nothing written")."""


def handle_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Print unstall's own errors, and the system's refusals to read or write a file (a folder
    that cannot be made, a full disk, no permission), as one red line and exit 1, without a
    traceback; Ctrl-C says
    so in one line (with the progress the command reported, when it raised
    :class:`Interrupted`) and exits 130, as a shell expects of an interrupted command (what was
    written stays whole: outputs are replaced atomically)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except UnstallError as exc:
            # The message may quote a user's text ("[/x]" in an exception, a file named
            # "[red]t.csv"): escaped, rich prints it as is instead of reading it as markup.
            message = str(exc) + _option_given_for(exc, fn, kwargs)
            # soft_wrap: one line, also where stderr is a log file of fixed width.
            err_console.print(
                f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True
            )
            raise typer.Exit(EXIT_FAILED) from exc
        except OSError as exc:
            # The machine, not unstall, said no: name the file and the reason, as a shell would.
            where = f"{exc.filename}: " if exc.filename is not None else ""
            why = exc.strerror or str(exc)
            err_console.print(
                f"[bold red]error:[/] {escape(where + why)}", highlight=False, soft_wrap=True
            )
            raise typer.Exit(EXIT_FAILED) from exc
        except KeyboardInterrupt as exc:
            # Outputs are replaced atomically: none is ever left half-written.
            what = "stopped, no partial output written"
            if isinstance(exc, Interrupted):
                what = str(exc)
            err_console.print(f"interrupted: {escape(what)}", highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_INTERRUPTED) from exc

    return wrapper


def _option_given_for(exc: UnstallError, command: Callable[..., Any], given: dict[str, Any]) -> str:
    """ " (option --jobs)" when the config field an error names took the value of one of the
    command's options that the user set: the message names the field (SyntheticTraceConfig.jobs),
    the user typed the option."""
    field = getattr(exc, "field", None)
    if not isinstance(exc, ConfigError) or not field:
        return ""
    name = field.split(".")[-1]
    param = inspect.signature(command).parameters.get(name)
    if param is None or name not in given or given[name] == param.default:
        return ""
    return f" (option {_flag_of(command, name)})"


def _flag_of(command: Callable[..., Any], name: str) -> str:
    """The long flag a command declares for its parameter ``name`` (``--max-jobs``)."""
    try:
        hints = typing.get_type_hints(command, include_extras=True)
    except (NameError, TypeError):  # an annotation that does not resolve: fall back on the name
        hints = {}
    for meta in getattr(hints.get(name), "__metadata__", ()):
        # In Annotated[..., typer.Option("--max-jobs", "-m")] typer keeps the first declaration
        # as the option's ``default`` and only the rest as ``param_decls``.
        first = getattr(meta, "default", None)
        decls = ([first] if isinstance(first, str) else []) + list(
            getattr(meta, "param_decls", None) or ()
        )
        for decl in decls:
            if decl.startswith("--"):
                return str(decl).split("/")[0]
    return "--" + name.replace("_", "-")


def save_json(path: Path | None, result: Any, config: Any) -> None:
    """Honour --json: write the result and its config, and say where."""
    if path is None:
        return
    cpath = write_result(path, result, config)
    console.print(f"wrote {path} (config: {cpath})", highlight=False)


def check_writable(*paths: Path | None) -> None:
    """Fail now, before a long run, when an output file cannot be written: the path is a
    folder, or a file stands where a folder on its way should be (missing folders are made)."""
    for path in paths:
        if path is None:
            continue
        if path.is_dir():
            raise UnstallError(f"{path} is a folder: give a file name to write")
        _check_folders_on_the_way(path, path.parent)


def check_folder_writable(path: Path) -> None:
    """Fail now when ``path`` cannot be the folder a command writes into: a file is there, or
    on its way."""
    if path.exists() and not path.is_dir():
        raise UnstallError(f"{path} is a file: give a folder to write into")
    _check_folders_on_the_way(path, path)


def _check_folders_on_the_way(path: Path, folder: Path) -> None:
    """The nearest existing folder on the way to ``folder`` must be a folder, and the missing
    ones must be ones that can be made there: they are made and removed again now, so that a
    long run does not end refused, and a run that writes nothing leaves nothing behind."""
    missing: list[Path] = []
    for ancestor in (folder, *folder.parents):
        if ancestor.exists():
            if not ancestor.is_dir():
                raise UnstallError(f"cannot write {path}: {ancestor} is a file, not a folder")
            break
        missing.append(ancestor)
    try:
        for made in reversed(missing):
            made.mkdir()
    except OSError as exc:
        raise UnstallError(f"cannot write {path}: {exc.strerror or exc} ({folder})") from exc
    finally:
        for made in missing:  # deepest first
            if made.is_dir():
                made.rmdir()


def comma_list(text: str) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``: the parsing of every comma-separated option."""
    return [part.strip() for part in text.split(",") if part.strip()]


def show_progress(quiet: bool) -> bool:
    """Progress bars only for a person watching: not with --quiet, not when stderr is no tty."""
    return not quiet and sys.stderr.isatty()


@contextmanager
def progress_bar(description: str, total: int, quiet: bool) -> Iterator[Callable[[int], None]]:
    """Yield ``advance(n)``; draws a rich bar on stderr unless quiet or not a tty."""
    if not show_progress(quiet):

        def ignore(n: int = 1) -> None:
            return None

        yield ignore
        return
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    ) as progress:
        task = progress.add_task(description, total=total)

        def advance(n: int = 1) -> None:
            progress.advance(task, n)

        yield advance


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> Table:
    """A borderless rich table that does not wrap cells, so wide tables stay readable in 80
    columns and in logs; numbers right-aligned and shortened by :func:`fmt`."""
    t = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
        show_edge=False,
    )
    for i, col in enumerate(columns):
        numeric = bool(rows) and isinstance(rows[0][i], int | float)
        t.add_column(col, justify="right" if numeric else "left", no_wrap=True)
    for row in rows:
        t.add_row(*(fmt(v) for v in row))
    return t


def fmt(value: object) -> str:
    """Short human form of a cell: floats to 4 significant digits, large ints with separators."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value != value:  # NaN
            return "-"
        if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
            return f"{value:.3e}"
        return f"{value:.4g}"
    return str(value)
