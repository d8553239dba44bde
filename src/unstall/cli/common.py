"""What every command shares: console, the --json/--quiet options, progress bars, error exits."""

from __future__ import annotations

import functools
import inspect
import re
import sys
import typing
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar

import typer
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from unstall.errors import (
    ConfigError,
    ConfigFileError,
    UnknownOptionError,
    UnstallError,
    did_you_mean,
)
from unstall.results import replaced_atomically, write_result
from unstall.usercode import UserCodeNameError

# Output that is not a terminal (a log, a pipe, a test) has no width to respect: keep rows whole.
console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)

PathOrText = TypeVar("PathOrText", Path, str)


def writable_file(path: PathOrText | None) -> PathOrText | None:
    """An option callback: an output file (a Path or its text) that cannot be written (a folder
    there, a file on its way, a folder that cannot be made) is refused while the command line is
    read, before any work starts (see :func:`check_writable`)."""
    if path is not None:
        check_writable(Path(path))
    return path


JsonOpt = Annotated[
    Path | None,
    typer.Option(
        "--json",
        help="Write the result as JSON to this path, and its full config beside it "
        "(PATH with .config.json).",
        dir_okay=False,
        callback=writable_file,
    ),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or live tables.")]

# typer's parsing errors (it carries its own copy of click): found from the one it exports.
_UsageError: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError"
)
_ClickException: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
)

P = ParamSpec("P")
R = TypeVar("R")

# Exit codes, one rule for every command: 2 = usage (an unknown name or option, a number out of
# range, a field missing from a file the user wrote); 1 = data that cannot be used, or a run that
# failed or whose answer is "no" (no configuration meets a budget); 130 = interrupted.
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT

# The code of each error that reaches the user: the first class it is an instance of decides.
EXIT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (KeyboardInterrupt, EXIT_INTERRUPTED),
    (_UsageError, EXIT_USAGE),  # typer's own: an unknown option, a value out of its range
    (ConfigError, EXIT_USAGE),  # an option's value or a config field that cannot work
    (ConfigFileError, EXIT_USAGE),  # a cluster or scenario file the user wrote
    (UserCodeNameError, EXIT_USAGE),  # FILE.py:NAME naming code that is not there
    (UnstallError, EXIT_FAILED),  # data that cannot be used, a run that failed
    (OSError, EXIT_FAILED),  # the system refused to read or write a file
    (_ClickException, EXIT_FAILED),
)


def exit_code_of(exc: BaseException) -> int:
    """The exit status of a command that stopped on ``exc`` (see :data:`EXIT_CODES`)."""
    for cls, code in EXIT_CODES:
        if isinstance(exc, cls):
            return code
    return EXIT_FAILED


def print_error(message: str, *, label: str = "error:", style: str = "bold red") -> None:
    """One line on stderr: ``label`` in ``style``, then ``message`` exactly as it is. The message
    is never read as rich markup: an exception's text, a file name or a gloo error may hold
    "[/x]" or "[red]" (rich would raise MarkupError on the one, swallow the other)."""
    line = Text.assemble((label, style), " ", message) if label else Text(message)
    # soft_wrap: one line, also where stderr is a log file of fixed width.
    err_console.print(line, highlight=False, soft_wrap=True)


class Interrupted(KeyboardInterrupt):
    """A Ctrl-C that a command caught to say how far it got: its message is the line that
    :func:`handle_errors` prints after "interrupted: " (e.g. "stopped at simulated time 3.2 h,
    40 of 120 jobs finished; nothing written")."""


def handle_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Print unstall's own errors, and the system's refusals to read or write a file (a folder
    that cannot be made, a full disk, no permission), as one red line without a traceback, and
    exit with the code :data:`EXIT_CODES` gives (2 for usage, 1 for the rest); Ctrl-C says
    so in one line (with the progress the command reported, when it raised
    :class:`Interrupted`) and exits 130, as a shell expects of an interrupted command (what was
    written stays whole: outputs are replaced atomically)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except UnstallError as exc:
            message = _in_users_words(exc, fn, kwargs)
            if message is None:
                message = str(exc)
                message += _option_given_for(exc, fn, kwargs) + _options_named_in(
                    message, fn, getattr(exc, "field", None)
                )
            print_error(message)
            raise typer.Exit(exit_code_of(exc)) from exc
        except OSError as exc:
            # The machine, not unstall, said no: name the file and the reason, as a shell would.
            where = f"{exc.filename}: " if exc.filename is not None else ""
            print_error(where + (exc.strerror or str(exc)))
            raise typer.Exit(exit_code_of(exc)) from exc
        except KeyboardInterrupt as exc:
            # Outputs are replaced atomically: none is ever left half-written.
            what = "stopped, no partial output written"
            if isinstance(exc, Interrupted):
                what = str(exc)
            print_error(what, label="interrupted:", style="")
            raise typer.Exit(exit_code_of(exc)) from exc

    return wrapper


class OneLineUsageErrors(TyperGroup):
    """The root group: typer's own refusals (an unknown option or command, a value out of an
    option's range) print as one error line, as unstall's own do, instead of typer's usage lines
    and boxed panel; exit status 2 (usage) by :data:`EXIT_CODES`. unstall's errors raised by an
    option's callback (an output that cannot be written) print as one line too."""

    def invoke(self, ctx: Any) -> Any:  # typer's click.Context
        try:
            return super().invoke(ctx)
        except UnstallError as exc:  # from an option's callback, before the command runs
            print_error(str(exc))
            raise typer.Exit(exit_code_of(exc)) from exc
        except _ClickException as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # a group run bare: its help is shown
                raise
            where = getattr(exc, "ctx", None) or ctx
            help_hint = f" (see {where.command_path} --help)"
            print_error(exc.format_message() + help_hint)  # type: ignore[attr-defined]
            raise typer.Exit(exit_code_of(exc)) from exc


def _in_users_words(
    exc: UnstallError, command: Callable[..., Any], given: dict[str, Any]
) -> str | None:
    """An unknown name the user typed, said with the option as typed and nothing else (the
    library's words name its own objects, and the names they list would pull unrelated options
    in): ``--policy-option dally.wiat_factor: 'dally' has no such option (did you mean
    'wait_factor'?)``, ``--policy: unknown policy 'consolidat' (did you mean 'consolidate'?);
    known: [...]``. None for any other error."""
    if isinstance(exc, UnknownOptionError) and given.get("policy_option"):
        keys = [str(entry).split("=", 1)[0].strip() for entry in given["policy_option"]]
        typed = next((k for k in keys if k == exc.field or k.endswith("." + exc.field)), None)
        if typed is not None:
            hint = did_you_mean(exc.field, exc.known) or f"; its options: {', '.join(exc.known)}"
            return f"--policy-option {typed}: {exc.owner!r} has no such option{hint}"
    if isinstance(exc, ConfigError) and (exc.owner, exc.field) == ("policy", "name"):
        params = inspect.signature(command).parameters
        for name in ("policy", "policies"):
            if name in params and given.get(name) is not None:
                return f"{_flag_of(command, name)}: {exc.why}"
    return None


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


def _options_named_in(message: str, command: Callable[..., Any], field: str | None) -> str:
    """ " (job_profiles: option --job-profile)" for each parameter of the library that an error
    names in its own words, beside its field, where the command takes it as an option: a name
    with an underscore that is one of the command's parameters, or its plural (the command's
    repeatable ``job_profile`` fills the library's ``job_profiles``)."""
    params = inspect.signature(command).parameters
    skip = field.split(".")[-1] if field else None
    hints = []
    for word in dict.fromkeys(re.findall(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b", message)):
        name = word if word in params else word.removesuffix("s")
        if word != skip and name in params:
            hints.append(f"{word}: option {_flag_of(command, name)}")
    return f" ({'; '.join(hints)})" if hints else ""


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
    console.print(f"wrote {path} (config: {cpath})", highlight=False, markup=False)


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


def named_in_file(what: str, example: str) -> Callable[[Any], Any]:
    """An option callback for options that take user code: a bare ``my.py`` (no ``:NAME``) is
    refused at once, saying how to name the function or class in it (``my.py:make_model``),
    where the part's resolver would list its built-in names only. Lists and comma-separated
    values are checked item by item."""

    def check(value: Any) -> Any:
        items = value if isinstance(value, list | tuple) else [value]
        for item in items:
            for part in comma_list(item) if isinstance(item, str) else ():
                if part.lower().endswith(".py") and ":" not in part:
                    raise typer.BadParameter(
                        f"{part} is a file: name the {what} in it too, as {part}:{example}"
                    )
        return value

    return check


def known_trace_format(value: str) -> str:
    """An option callback: a trace format that no reader has is a usage error (exit 2) at once,
    not a file that cannot be read (exit 1) after the trace's name was checked."""
    from unstall.traces.registry import AUTO, READERS

    if value != AUTO and value not in READERS:
        raise typer.BadParameter(
            f"unknown trace format {value!r}; known: {AUTO} (detect), {', '.join(READERS)}"
        )
    return value


def positive(value: float | None) -> float | None:
    """An option callback: a number that must be above 0, said as such (typer's ``min=1e-9``
    read "not in the range x>=1e-09")."""
    if value is not None and not value > 0:
        raise typer.BadParameter(f"must be > 0, got {value:g}")
    return value


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


def table(
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    wrap: Sequence[str] = (),
) -> Table:
    """A borderless rich table that does not wrap cells, so wide tables stay readable in 80
    columns and in logs; numbers right-aligned and shortened by :func:`fmt`. The columns named
    in ``wrap`` (prose: a description) wrap and take the width left, so that a long text never
    cuts the names beside it short."""
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
        prose = col in wrap
        t.add_column(
            col,
            justify="right" if numeric else "left",
            no_wrap=not prose,
            ratio=1 if prose else None,
        )
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


def fmt_duration(seconds: float) -> str:
    """A duration in the unit that reads at its size, to three figures: milliseconds below a
    second, seconds below a minute, minutes below an hour, hours above ("7.02 ms", "12.3 s",
    "12.5 min", "1.60 h", "1,234 h"). One unit for all (hours) read "0.00 h" or "<0.0001 h" for
    every configuration of a small job."""
    if seconds != seconds:  # NaN
        return "-"
    seconds = float(f"{seconds:.3g}")  # 59.99 s reads 1.00 min, not 60.0 s
    for unit, size in (("h", 3600.0), ("min", 60.0), ("s", 1.0)):
        if seconds >= size:
            return f"{_three_figures(seconds / size)} {unit}"
    return f"{_three_figures(seconds * 1e3)} ms"


def _three_figures(value: float) -> str:
    """``value`` (>= 0) to three significant figures, trailing zeros kept, thousands separated."""
    value = float(f"{value:.3g}")
    if value >= 100 or value == 0:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:#.3g}"


def write_table(frame: object, path: Path) -> None:
    """A per-job table as CSV (or Parquet for ``.parquet``/``.pq``), written whole or not at
    all."""
    import pandas as pd

    assert isinstance(frame, pd.DataFrame)
    with replaced_atomically(path) as tmp:
        if path.suffix.lower() in (".parquet", ".pq"):
            frame.to_parquet(tmp, index=False)
        else:
            frame.to_csv(tmp, index=False)
    console.print(f"wrote {path}", highlight=False, markup=False)
