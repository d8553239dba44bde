"""What crosses the service's API: a job's spec (what a user submits) and its record (what the
service answers), as pydantic models so that a bad request is refused naming its field (422).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# A submission's files together (the user's code) may be at most this many bytes of text.
MAX_FILES_BYTES = 1_000_000
# Names of a job's files: a plain relative path of a few parts, no "..", no absolute path.
_FILE_NAME = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+){0,3}$")
# ``FILE.py:FUNC`` or ``package.module:FUNC``: the user-code convention every part shares.
_REFERENCE = re.compile(r"^[^:\s]+:[A-Za-z_][A-Za-z0-9_]*$")
_LOSS_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

JobStateName = Literal["pending", "running", "succeeded", "failed", "cancelled"]
STATES: tuple[str, ...] = ("pending", "running", "succeeded", "failed", "cancelled")


class JobSpec(BaseModel):
    """A job as its user submits it.

    What it trains is one of: a zoo ``model`` (synthetic batches); the user's ``model_fn`` with
    ``data_fn`` and ``loss`` (``FILE.py:FUNC`` each, the file among ``files``; the loss may be a
    built-in one's name, ``cross_entropy`` or ``mse``); or the user's own loop, ``train``
    (``def train(ctx)``). The user's code runs in the executors only, in real compute. How
    long: ``iterations``, or in emulated compute ``duration_s`` (run seconds at its
    consolidated placement). ``expected_duration_s`` is the user's own estimate of its run
    time (as Slurm's time limit), used by the estimates only.
    """

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    name: str = Field(default="", max_length=200)
    user: str = Field(default="", max_length=100)
    gpus: int = Field(ge=1, le=4096)
    priority: int = Field(default=0, ge=-1000, le=1000)
    model: str | None = Field(default=None, max_length=200)
    model_fn: str | None = Field(default=None, max_length=300)
    data_fn: str | None = Field(default=None, max_length=300)
    loss: str | None = Field(default=None, max_length=300)
    train: str | None = Field(default=None, max_length=300)
    iterations: int | None = Field(default=None, ge=1, le=10**12)
    duration_s: float | None = Field(default=None, gt=0, le=10**9)
    expected_duration_s: float | None = Field(default=None, gt=0, le=10**9)
    files: dict[str, str] = Field(default_factory=dict)

    @field_validator("model_fn", "data_fn", "train")
    @classmethod
    def _reference(cls, value: str | None) -> str | None:
        if value is not None and not _REFERENCE.match(value):
            raise ValueError("must name a function as FILE.py:FUNC or package.module:FUNC")
        return value

    @field_validator("loss")
    @classmethod
    def _loss(cls, value: str | None) -> str | None:
        # A built-in loss's name (the scheduler knows which there are) or the user's function.
        if value is not None and not (_REFERENCE.match(value) or _LOSS_NAME.match(value)):
            raise ValueError(
                "must name a function as FILE.py:FUNC or package.module:FUNC, or a built-in loss"
            )
        return value

    @field_validator("files")
    @classmethod
    def _files(cls, files: dict[str, str]) -> dict[str, str]:
        total = 0
        for name, text in files.items():
            if not _FILE_NAME.match(name) or ".." in name.split("/"):
                raise ValueError(f"{name!r} is not a plain relative file name")
            total += len(text.encode())
        if total > MAX_FILES_BYTES:
            raise ValueError(f"{total} bytes of files; at most {MAX_FILES_BYTES} may be sent")
        return files

    @model_validator(mode="after")
    def _what_and_how_long(self) -> JobSpec:
        kinds = [
            k
            for k, v in (("model", self.model), ("train", self.train), ("model_fn", self.model_fn))
            if v is not None
        ]
        if not kinds:
            raise ValueError("name what it trains: model, model_fn (with data_fn, loss) or train")
        if len(kinds) > 1:
            raise ValueError(f"give one of model, model_fn and train, not {' and '.join(kinds)}")
        if self.model_fn is not None and (self.data_fn is None or self.loss is None):
            raise ValueError("model_fn needs data_fn and loss too")
        if self.model_fn is None and (self.data_fn is not None or self.loss is not None):
            raise ValueError("data_fn and loss go with model_fn")
        if (self.iterations is None) == (self.duration_s is None):
            raise ValueError("give one of iterations and duration_s")
        return self


class JobEventRecord(BaseModel):
    """One event of a job's history: ``submitted``, ``started`` (detail: its placement),
    ``preempted``, ``migrated``, ``failed`` (detail: the reason), ``requeued`` (after a restart
    of the service), ``cancelled`` (detail: by whom), ``succeeded``, ``gave_up``."""

    seq: int
    job_id: str
    at: float  # wall time, seconds since the epoch
    kind: str
    detail: str = ""


class JobRecord(BaseModel):
    """A job as the service answers for it."""

    id: str
    name: str
    user: str
    state: JobStateName
    gpus: int
    priority: int
    model: str
    placement: str = ""  # "0:2+1:2": node and GPUs of each part, while it runs
    position: int | None = None  # in the queue (1: next), null unless pending
    reason: str = ""  # why it waits, in words
    progress: float = 0.0  # share of its work done, 0-1
    iterations_done: float = 0.0
    iterations_total: float = 0.0
    restarts: int = 0  # preemptions, migrations and failures it came back from
    submitted_at: float
    started_at: float | None = None
    ended_at: float | None = None
    error: str = ""
    # The service's estimates (docs/service.md, "Estimates"): while it waits, when it will
    # start; while it waits or runs, when it will end; how long it is expected to run (seconds
    # at its consolidated placement); and the first estimate of its start, made at submit
    # and kept after it started (how right the estimates were).
    estimated_start: float | None = None
    estimated_end: float | None = None
    estimated_run_s: float | None = None
    estimated_start_at_submit: float | None = None


class JobDetail(JobRecord):
    """A job with its spec and its events (``jobs show``)."""

    spec: JobSpec
    events: list[JobEventRecord]


class ClusterNode(BaseModel):
    index: int
    rack: int
    gpus: int
    gpu_type: str
    lost: bool = False
    jobs: list[str] = Field(default_factory=list)  # the job on each GPU ("" where free)


class ClusterRecord(BaseModel):
    """The cluster as the service sees it."""

    policy: str
    total_gpus: int
    busy_gpus: int
    free_gpus: int
    lost_gpus: int
    pending: int
    running: int
    nodes: list[ClusterNode]


class WhatIfPolicy(BaseModel):
    """One policy's forecast of the queue as it is (times: seconds since the epoch; figures
    over the jobs there now, from their submit)."""

    policy: str
    serving: bool  # the policy the service runs now
    avg_jct_s: float | None  # null where some job does not end within the forecast
    avg_wait_s: float | None  # of the waiting jobs, submit to start
    makespan: float | None  # when the last job there now ends
    moves: int  # preemptions and migrations it predicts
    starts: dict[str, float]  # each waiting job's estimated start
    ends: dict[str, float]


class WhatIf(BaseModel):
    """The queue as it is under each policy (``unstall jobs whatif``, ``GET /api/whatif``)."""

    at: float  # the state forecast: when the scheduler took it
    running: int
    waiting: list[str]  # the waiting jobs in queue order (those forecast)
    policies: list[WhatIfPolicy]
