"""The service's job store: what survives the service.

A store is a directory (``unstall serve --store DIR``) holding:

- ``jobs.db``: the records, an SQLite database in WAL mode through SQLAlchemy Core (a
  ``postgresql://`` URL may hold them instead, where a team outgrows one host). Two tables: the
  jobs as submitted (their spec), and an **append-only event table**, the source of truth: a
  job's current state is rebuilt from its events (:func:`replay`).
- ``code/<job>/``: the files a user sent with a job (their training code);
- ``logs/<job>.log``: what a job printed and reported;
- ``checkpoints/<job>.ckpt``: each job's latest checkpoint, written by its rank 0 (a durable
  file, not an actor that dies with the service).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa

from unstall.errors import ConfigError
from unstall.service.models import JobEventRecord, JobSpec

_META = sa.MetaData()
JOBS = sa.Table(
    "jobs",
    _META,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("id", sa.String(64), unique=True, nullable=False),
    sa.Column("user", sa.String(100), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("spec", sa.Text, nullable=False),
    sa.Column("submitted_at", sa.Float, nullable=False),
)
EVENTS = sa.Table(
    "events",
    _META,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("job_id", sa.String(64), nullable=False, index=True),
    sa.Column("at", sa.Float, nullable=False),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("detail", sa.Text, nullable=False, default=""),
)

# Event kinds that end a job.
FINAL = {"succeeded": "succeeded", "gave_up": "failed", "cancelled": "cancelled"}


@dataclass
class StoredJob:
    """A job as the store holds it: its spec and what its events say of it."""

    seq: int
    id: str
    spec: JobSpec
    submitted_at: float
    state: str = "pending"  # pending, running, succeeded, failed, cancelled
    placement: str = ""
    started_at: float | None = None
    ended_at: float | None = None
    restarts: int = 0
    error: str = ""
    cancel_requested: bool = False
    events: list[JobEventRecord] = field(default_factory=list)


class JobStore:
    """Jobs and their events in a database, files in a directory (see the module docstring).

    ``directory`` holds the files; ``url`` the records (default: SQLite in the directory). Safe
    to use from several threads: SQLAlchemy pools the connections and writes are serialised.
    """

    def __init__(self, directory: Path | str, url: str | None = None) -> None:
        self.directory = Path(directory).expanduser()
        for sub in ("code", "logs", "checkpoints"):
            (self.directory / sub).mkdir(parents=True, exist_ok=True)
        self.url = url or f"sqlite:///{self.directory / 'jobs.db'}"
        self.engine = _engine(self.url)
        _META.create_all(self.engine)
        self._write = threading.Lock()

    # --- writing -------------------------------------------------------------------------------

    def submit(self, spec: JobSpec, at: float) -> str:
        """Store a new job and its ``submitted`` event in one transaction; returns its id."""
        return self.submit_many([(spec, at)])[0]

    def submit_many(self, jobs: Sequence[tuple[JobSpec, float]]) -> list[str]:
        """Store new jobs ``(spec, submitted at)`` and their ``submitted`` events in one
        transaction (a group commit: each is durable once this returns); their ids, in order.

        A job's id is ``job-SEQ``, its row's sequence number: the next ones are counted on from
        the largest stored, under the write lock (one service writes a store at a time), so
        that the rows go in with their ids in two statements whatever their number."""
        if not jobs:
            return []
        with self._write, self.engine.begin() as db:
            last = db.execute(sa.select(sa.func.max(JOBS.c.seq))).scalar()
            first = int(last or 0) + 1
            ids = [f"job-{first + i}" for i in range(len(jobs))]
            db.execute(
                JOBS.insert(),
                [
                    {
                        "seq": first + i,
                        "id": job_id,
                        "user": spec.user,
                        "name": spec.name,
                        "spec": spec.model_dump_json(),
                        "submitted_at": at,
                    }
                    for i, (job_id, (spec, at)) in enumerate(zip(ids, jobs, strict=True))
                ],
            )
            db.execute(
                EVENTS.insert(),
                [
                    {"job_id": job_id, "at": at, "kind": "submitted", "detail": ""}
                    for job_id, (_spec, at) in zip(ids, jobs, strict=True)
                ],
            )
        for job_id, (spec, _at) in zip(ids, jobs, strict=True):
            if spec.files:
                self._write_files(job_id, spec.files)
        return ids

    def _write_files(self, job_id: str, files: dict[str, str]) -> None:
        root = self.code_dir(job_id)
        for name, text in files.items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)

    def record(self, events: Sequence[tuple[str, float, str, str]]) -> None:
        """Append events ``(job_id, at, kind, detail)`` in one transaction."""
        if not events:
            return
        rows = [{"job_id": j, "at": at, "kind": k, "detail": d} for j, at, k, d in events]
        with self._write, self.engine.begin() as db:
            db.execute(EVENTS.insert(), rows)

    # --- reading -------------------------------------------------------------------------------

    def load(self) -> dict[str, StoredJob]:
        """Every job with its state rebuilt from its events, in submission order."""
        with self.engine.connect() as db:
            jobs = db.execute(sa.select(JOBS).order_by(JOBS.c.seq)).all()
            events = db.execute(sa.select(EVENTS).order_by(EVENTS.c.seq)).all()
        found = {
            row.id: StoredJob(
                seq=row.seq,
                id=row.id,
                spec=JobSpec.model_validate_json(row.spec),
                submitted_at=row.submitted_at,
            )
            for row in jobs
            if row.id
        }
        replay(
            found,
            (
                JobEventRecord(seq=e.seq, job_id=e.job_id, at=e.at, kind=e.kind, detail=e.detail)
                for e in events
            ),
        )
        return found

    def events(self, job_id: str) -> list[JobEventRecord]:
        with self.engine.connect() as db:
            rows = db.execute(
                sa.select(EVENTS).where(EVENTS.c.job_id == job_id).order_by(EVENTS.c.seq)
            ).all()
        return [
            JobEventRecord(seq=e.seq, job_id=e.job_id, at=e.at, kind=e.kind, detail=e.detail)
            for e in rows
        ]

    # --- files ---------------------------------------------------------------------------------

    def code_dir(self, job_id: str) -> Path:
        return self.directory / "code" / job_id

    def log_path(self, job_id: str) -> Path:
        return self.logs_dir / f"{job_id}.log"

    @property
    def logs_dir(self) -> Path:
        return self.directory / "logs"

    @property
    def checkpoint_dir(self) -> Path:
        return self.directory / "checkpoints"

    def log_event(self, job_id: str, at: float, kind: str, detail: str) -> None:
        """A line in the job's log: when, what, and the event's detail."""
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))
        line = f"{when} [unstall] {kind}{': ' + detail if detail else ''}\n"
        with open(self.log_path(job_id), "a") as log:
            log.write(line)

    def close(self) -> None:
        self.engine.dispose()


def replay(jobs: dict[str, StoredJob], events: Iterable[JobEventRecord]) -> None:
    """A job's state from its events, in order (the store's source of truth)."""
    for event in events:
        job = jobs.get(event.job_id)
        if job is None:
            continue
        job.events.append(event)
        kind = event.kind
        if kind == "started" or kind == "migrated":
            job.state = "running"
            job.placement = event.detail
            if job.started_at is None:
                job.started_at = event.at
        elif kind in ("preempted", "failed", "requeued"):
            job.state = "pending"
            job.placement = ""
            job.restarts += 1
            if kind == "failed":
                job.error = event.detail
        elif kind == "cancel_requested":
            job.cancel_requested = True
        elif kind in FINAL:
            job.state = FINAL[kind]
            job.placement = ""
            job.ended_at = event.at
            if kind == "gave_up":
                job.error = event.detail
        if kind == "migrated":
            job.restarts += 1


def _engine(url: str) -> sa.Engine:
    """The database; SQLite in WAL mode (readers never wait for the writer), synchronous
    NORMAL (a committed event survives a kill of the service; only a power loss may take the
    last ones)."""
    if url.startswith("sqlite"):
        engine = sa.create_engine(url, connect_args={"check_same_thread": False})

        @sa.event.listens_for(engine, "connect")
        def _pragmas(connection: object, _record: object) -> None:
            cursor = connection.cursor()  # type: ignore[attr-defined]
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA busy_timeout=5000")
            cursor.close()

        return engine
    if url.startswith(("postgresql", "postgres")):
        return sa.create_engine(url, pool_pre_ping=True)
    raise ConfigError("JobStore", "url", f"{url!r}: give a sqlite:/// or postgresql:// URL")
