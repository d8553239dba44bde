"""`unstall jobs ...`: submit to a running `unstall serve`, see the queue, cancel, read logs."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from unstall.cli.common import console, handle_errors, table

if TYPE_CHECKING:
    from unstall.service import Client, JobRecord, WhatIf

app = typer.Typer(no_args_is_help=True, add_completion=False)

ServerOpt = Annotated[
    str | None,
    typer.Option(
        "--server", help="The service's URL (default UNSTALL_SERVER, then http://127.0.0.1:8470)."
    ),
]
TokenFileOpt = Annotated[
    Path | None,
    typer.Option("--token-file", help="A file whose first word is your token (Bearer)."),
]
UserOpt = Annotated[
    str | None, typer.Option("--user", help="Who you are, where the service has no tokens.")
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print the records as JSON.")]


def _client(server: str | None, token_file: Path | None, user: str | None) -> Client:
    from unstall.errors import UnstallError
    from unstall.service import Client

    token = None
    if token_file is not None:
        try:
            words = token_file.read_text().split()
        except OSError as exc:
            raise UnstallError(f"{token_file}: cannot read the token ({exc.strerror})") from exc
        if not words:
            raise UnstallError(f"{token_file}: no token in it")
        token = words[0]
    return Client(server, token=token, user=user)


@app.command("submit")
@handle_errors
def submit(
    gpus: Annotated[int, typer.Option("--gpus", min=1, help="GPUs the job needs.")],
    model: Annotated[
        str | None,
        typer.Option(
            "--model", help="A zoo model, or your model_fn as FILE.py:FUNC (with --data)."
        ),
    ] = None,
    data: Annotated[
        str | None, typer.Option("--data", help="Your data_fn, FILE.py:FUNC (with --model).")
    ] = None,
    loss: Annotated[
        str | None,
        typer.Option(
            "--loss",
            help="Your loss, FILE.py:FUNC, or a built-in one's name (with --model, --data; "
            "default cross_entropy).",
        ),
    ] = None,
    train: Annotated[
        str | None, typer.Option("--train", help="Your own training loop, FILE.py:FUNC(ctx).")
    ] = None,
    iterations: Annotated[
        int | None, typer.Option("--iterations", min=1, help="Iterations it trains in all.")
    ] = None,
    duration_s: Annotated[
        float | None,
        typer.Option("--duration-s", min=0.0, help="Run seconds (emulated compute) instead."),
    ] = None,
    expected_duration_s: Annotated[
        float | None,
        typer.Option("--expected-duration-s", help="Your estimate of its run time (estimates)."),
    ] = None,
    name: Annotated[str, typer.Option("--name", help="A name to find it by.")] = "",
    priority: Annotated[int, typer.Option("--priority", help="Higher first.")] = 0,
    server: ServerOpt = None,
    token_file: TokenFileOpt = None,
    user: UserOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Submit a job; prints its id (the record with --json). Your files go with it."""
    from pydantic import ValidationError

    from unstall.errors import ConfigError, UnstallError
    from unstall.service import JobSpec

    files: dict[str, str] = {}
    sources: dict[str, Path] = {}
    is_zoo = model is not None and ":" not in model
    for reference in (None if is_zoo else model, data, loss, train):
        if reference is not None and ".py:" in reference:
            path = Path(reference.rpartition(":")[0])
            # The job's copy of each file is named by the file's name alone: two files of one
            # name (from two folders) would be one in the store.
            if path.name in sources and sources[path.name].resolve() != path.resolve():
                raise UnstallError(
                    f"{sources[path.name]} and {path}: the job's files are named by their names "
                    "alone; give them different names"
                )
            sources[path.name] = path
            files[path.name] = _read(path)
    if not is_zoo and model is not None:
        if data is None:
            raise ConfigError("jobs submit", "data", "your model (FILE.py:FUNC) needs your data")
        if loss is None:
            loss = "cross_entropy"  # as `unstall live run` trains your model by default
    renamed = {
        "model": model if is_zoo else None,
        "model_fn": None if is_zoo or model is None else _local(model),
        "data_fn": _local(data),
        "loss": _local(loss) if loss is not None and ":" in loss else loss,
        "train": _local(train),
    }
    try:
        spec = JobSpec(
            name=name,
            user=user or "",
            gpus=gpus,
            priority=priority,
            iterations=iterations,
            duration_s=duration_s,
            expected_duration_s=expected_duration_s,
            files=files,
            **renamed,
        )
    except ValidationError as exc:  # a spec the service would refuse: said before sending it
        raise ConfigError("jobs submit", "job", _spec_problems(exc)) from None
    with _client(server, token_file, user) as client:
        record = client.submit(spec)
    if as_json:
        print(record.model_dump_json(indent=2))
    else:
        print(record.id)


def _spec_problems(exc: Any) -> str:
    """What is wrong with a spec (a pydantic ValidationError), each problem with its field."""
    parts = []
    for error in exc.errors():
        field = ".".join(str(p) for p in error.get("loc", ()))
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{field}: {message}" if field else message)
    return "; ".join(parts)


def _local(reference: str | None) -> str | None:
    """``path/to/file.py:FUNC`` as the job's own copy names it: ``file.py:FUNC``."""
    if reference is None or ".py:" not in reference:
        return reference
    path, _, func = reference.rpartition(":")
    return f"{Path(path).name}:{func}"


def _read(path: Path) -> str:
    from unstall.errors import UnstallError

    try:
        return path.read_text()
    except OSError as exc:
        raise UnstallError(f"{path}: cannot read it ({exc.strerror})") from exc


@app.command("list")
@handle_errors
def list_jobs(
    state: Annotated[
        str | None, typer.Option("--state", help="pending, running, succeeded, failed, cancelled.")
    ] = None,
    mine: Annotated[str | None, typer.Option("--for", help="Only this user's jobs.")] = None,
    server: ServerOpt = None,
    token_file: TokenFileOpt = None,
    user: UserOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """The jobs: pending ones with their place in the queue and why they wait."""
    with _client(server, token_file, user) as client:
        records = client.list(state=state, user=mine)
    if as_json:
        print(json.dumps([r.model_dump() for r in records], indent=2))
        return
    print_jobs(records)


def print_jobs(records: list[JobRecord]) -> None:
    """The jobs as a table: pending ones with their place in the queue and why they wait."""
    now = time.time()
    rows = [_row(r, now) for r in records]
    console.print(
        table(
            f"{len(records)} jobs",
            [
                "id",
                "name",
                "user",
                "state",
                "GPUs",
                "where / position",
                "progress",
                "starts / ends (est.)",
                "why",
            ],
            rows,
        )
    )


def _row(record: JobRecord, now: float) -> list[str]:
    where = record.placement
    if record.state == "pending" and record.position is not None:
        where = f"#{record.position}"
    return [
        record.id,
        record.name,
        record.user,
        record.state,
        str(record.gpus),
        where,
        f"{100 * record.progress:.0f}%",
        _estimate(record, now),
        record.reason or record.error,
    ]


def _estimate(record: JobRecord, now: float) -> str:
    """``starts in 12 min`` (pending), ``ends in 1.5 h`` (running), blank without one."""
    if record.state == "pending" and record.estimated_start is not None:
        return f"starts {_from_now(record.estimated_start, now)}"
    if record.state in ("pending", "running") and record.estimated_end is not None:
        return f"ends {_from_now(record.estimated_end, now)}"
    return ""


def _from_now(at: float, now: float) -> str:
    from unstall.sched.reasons import duration_words

    return "now" if at - now < 1.0 else f"in {duration_words(at - now)}"


@app.command("show")
@handle_errors
def show(
    job_id: Annotated[str, typer.Argument(help="The job's id.")],
    server: ServerOpt = None,
    token_file: TokenFileOpt = None,
    user: UserOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """One job: its record, its spec and its events."""
    with _client(server, token_file, user) as client:
        detail = client.get(job_id)
    if as_json:
        print(detail.model_dump_json(indent=2))
        return
    for field in ("id", "name", "user", "state", "gpus", "priority", "model", "placement"):
        console.print(f"{field}: {getattr(detail, field)}", highlight=False, markup=False)
    if detail.position is not None:
        console.print(
            f"position: {detail.position} ({detail.reason})", highlight=False, markup=False
        )
    now = time.time()
    for label, at in (
        ("estimated start", detail.estimated_start if detail.state == "pending" else None),
        ("estimated end", detail.estimated_end),
        ("start estimated at submit", detail.estimated_start_at_submit),
    ):
        if at is not None:
            console.print(
                f"{label}: {_when(at)} ({_from_now(at, now)})", highlight=False, markup=False
            )
    if detail.estimated_run_s is not None:
        from unstall.sched.reasons import duration_words

        console.print(
            f"expected run time: {duration_words(detail.estimated_run_s)} (consolidated)",
            highlight=False,
            markup=False,
        )
    console.print(
        f"progress: {detail.iterations_done:g} of {detail.iterations_total:g} iterations, "
        f"{detail.restarts} restarts",
        highlight=False,
        markup=False,
    )
    if detail.error:
        console.print(f"error: {detail.error}", highlight=False, markup=False)
    rows = [[_when(e.at), e.kind, e.detail] for e in detail.events]
    console.print(table("events", ["when", "event", "detail"], rows))


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


@app.command("cancel")
@handle_errors
def cancel(
    job_ids: Annotated[list[str], typer.Argument(help="The jobs' ids.")],
    server: ServerOpt = None,
    token_file: TokenFileOpt = None,
    user: UserOpt = None,
) -> None:
    """Cancel jobs (yours; an admin's token cancels anyone's)."""
    with _client(server, token_file, user) as client:
        for job_id in job_ids:
            client.cancel(job_id)
            print(f"{job_id}: cancelled")


@app.command("logs")
@handle_errors
def logs(
    job_id: Annotated[str, typer.Argument(help="The job's id.")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Until the job ends.")] = False,
    server: ServerOpt = None,
    token_file: TokenFileOpt = None,
    user: UserOpt = None,
) -> None:
    """A job's log: its events, what its training loop printed and reported."""
    with _client(server, token_file, user) as client:
        if follow:
            for text in client.follow(job_id):
                print(text, end="", flush=True)
            return
        offset = 0
        while True:
            text, offset = client.logs(job_id, offset)
            if not text:
                return
            print(text, end="")


@app.command("whatif")
@handle_errors
def whatif(
    policies: Annotated[
        list[str] | None,
        typer.Option("--policy", help="A policy to compare with the serving one (repeatable)."),
    ] = None,
    server: ServerOpt = None,
    token_file: TokenFileOpt = None,
    user: UserOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """The queue as it is now, forecast under the serving policy and each --policy: average
    JCT, waiting, makespan and each waiting job's estimated start, before you change policy."""
    with _client(server, token_file, user) as client:
        answer = client.whatif(policies or [])
    if as_json:
        print(answer.model_dump_json(indent=2))
        return
    print_whatif(answer)


def print_whatif(answer: WhatIf) -> None:
    """A what-if as two tables: the figures per policy, each waiting job's start per policy."""
    from unstall.sched.reasons import duration_words

    now = time.time()

    def span(seconds: float | None) -> str:
        return "-" if seconds is None else duration_words(seconds)

    rows = [
        [
            p.policy + (" (serving)" if p.serving else ""),
            span(p.avg_jct_s),
            span(p.avg_wait_s),
            "-" if p.makespan is None else _from_now(p.makespan, now),
            str(p.moves),
        ]
        for p in answer.policies
    ]
    console.print(
        table(
            f"what if: {answer.running} running, {len(answer.waiting)} waiting",
            ["policy", "avg JCT", "avg wait", "last job ends", "moves"],
            rows,
        )
    )
    if not answer.waiting:
        return
    starts = [
        [job_id]
        + [_from_now(p.starts[job_id], now) if job_id in p.starts else "-" for p in answer.policies]
        for job_id in answer.waiting
    ]
    console.print(
        table(
            "each waiting job's estimated start",
            ["job", *(p.policy for p in answer.policies)],
            starts,
        )
    )
