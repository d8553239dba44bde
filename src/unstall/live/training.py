"""One segment of a job's training on one placement: what each of the job's processes runs.

A job runs in segments: from its start (or the checkpoint it resumes from) to its end, or to the
iteration at which it is stopped (preemption, migration). Every process of the job joins one
fresh ``torch.distributed`` group (gloo on CPUs, NCCL on GPUs), and after every step the
processes agree, by an all-reduce of their stop flags, whether to go on: so they all stop after
the same iteration, and the checkpoint that rank 0 then writes (model, optimizer, iteration; the
data position is the iteration, as batches are drawn per iteration) resumes the job exactly.

Two kinds of compute:

- real: the job's model trains on synthetic batches of its zoo model (or the user's model, data
  and loss), data-parallel with DDP; or the user's own loop, ``train(ctx)``, runs
  (:mod:`unstall.live.train_loop`);
- emulated: each step waits the perf model's iteration time (set by the backend, and changed
  while the job runs when the links it shares change) and all-reduces a small buffer.

Nothing here knows Ray: the executor (:mod:`unstall.live.executor`) calls :func:`run_segment`.
"""

from __future__ import annotations

import io
import itertools
import math
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import nn

from unstall.live.train_loop import JobLog, UserLoop, captured
from unstall.usercode import describe_exception, load_callable
from unstall.workload import zoo
from unstall.workload.batches import to_device
from unstall.workload.losses import loss_problem, resolve_loss
from unstall.workload.zoo_jobs import SyntheticData, zoo_job

# Elements all-reduced every emulated step: enough to be a real exchange between the job's
# processes, small enough to cost nothing next to the emulated transfer time.
SYNC_ELEMENTS = 1024
# Wall seconds an emulated job's processes may fall behind their schedule and still catch up.
CATCH_UP_S = 2.0
Batch = tuple[Any, Any]


ModelFn = Callable[[], nn.Module]
DataFn = Callable[[int, int], Iterable[Batch]]
LossFn = Callable[[Any, Any], torch.Tensor]


@dataclass(frozen=True)
class UserWork:
    """A user's own job: ``model_fn() -> nn.Module``, ``data_fn(rank, world_size) -> iterable
    of (inputs, targets)``, ``loss(outputs, targets) -> scalar tensor``.

    Each is the function itself (sent to the executors by value: ``unstall live run`` loads
    them in its own process) or its reference, ``FILE.py:FUNC`` or ``package.module:FUNC``,
    loaded in each executor when a segment starts (the scheduler service never runs a user's
    code in its own process); the loss may also be a built-in loss's name (``cross_entropy``,
    ``mse``). Either way the built-in loop trains them the same: see :func:`job_functions`."""

    model_fn: ModelFn | str
    data_fn: DataFn | str
    loss: LossFn | str


@dataclass(frozen=True)
class JobFunctions:
    """What the built-in loop calls: a job's model, data and loss functions, loaded."""

    model_fn: ModelFn
    data_fn: DataFn
    loss: LossFn


def job_functions(user: UserWork, job_id: str) -> JobFunctions:
    """The user's functions, each reference loaded here (in the executor that trains them; a
    file is loaded once per process and kept) and each function given as it is."""
    model_fn, data_fn = user.model_fn, user.data_fn
    if isinstance(model_fn, str):
        model_fn = load_callable(model_fn, what="model function")
    if isinstance(data_fn, str):
        data_fn = load_callable(data_fn, what="data function")
    return JobFunctions(
        model_fn=model_fn,
        data_fn=data_fn,
        loss=resolve_loss(user.loss, owner=f"job {job_id}", field="loss"),
    )


@dataclass(frozen=True)
class JobWork:
    """What a job trains and for how long: ``iterations`` in all (fractional in emulated
    compute, where one is the perf model's iteration).

    ``train``: the user's own loop, ``train(ctx)`` (real compute), as a function (sent to the
    executors by value) or its reference ``FILE.py:FUNC`` (loaded in each executor: the driver
    never runs the user's code); None: the built-in loop over ``user`` (the user's model, data
    and loss: functions or references, loaded in the executors as ``train`` is) or, without
    it, the zoo ``model``.
    ``log_path``: the job's log file, to which every process appends its segment's start and
    end, the user's loop's stdout, stderr and reports (None: no log; output goes where the
    executor's goes)."""

    job_id: str
    model: str
    iterations: float
    emulated: bool
    batch_size: int = 8
    image_size: int = 32
    lr: float = 0.05
    seed: int = 0
    user: UserWork | None = None
    train: Callable[[Any], Any] | str | None = None
    log_path: str | None = None

    @property
    def data_seed(self) -> int:
        """The job's own data stream: the run's seed and a stable digest of the job id."""
        return self.seed * 1_000_003 + zlib.crc32(self.job_id.encode())


@dataclass(frozen=True)
class SegmentPlan:
    """One process's part of a segment: its rank in the job's group, where the group meets, the
    iteration it starts from and the checkpoint holding that state (None for a fresh start)."""

    work: JobWork
    rank: int
    world_size: int
    master_addr: str
    master_port: int
    start_iteration: float = 0.0
    checkpoint: bytes | None = None
    iteration_wall_s: float = 0.0  # emulated: wall seconds one iteration takes now
    step_wall_s: float = 0.05
    checkpoint_every_s: float = 5.0
    join_timeout_s: float = 60.0
    device: str = "cpu"


@dataclass
class SegmentControl:
    """What the backend may change while a segment runs: the stop request and (emulated) the
    wall seconds an iteration takes."""

    stop: threading.Event = field(default_factory=threading.Event)
    iteration_wall_s: float = 0.0


@dataclass(frozen=True)
class SegmentOutcome:
    """How one process's segment ended. ``iteration`` is where the job stands (absolute);
    ``finished``: it did all its iterations; else it stopped on request. Times in wall seconds:
    joining the group, building the model and restoring the checkpoint, training, and writing
    the final checkpoint. ``checkpoint`` (rank 0 only) resumes the job."""

    job_id: str
    rank: int
    iteration: float
    finished: bool
    join_s: float
    restore_s: float
    train_s: float
    save_s: float
    checkpoint: bytes | None = None
    # Emulated compute: wall seconds the process fell behind the perf model's pace for good
    # (beyond what it could catch up): the emulating machine was too busy to keep it.
    behind_s: float = 0.0
    # Emulated compute: wall seconds its steps were scheduled to take (each step's iterations
    # at the iteration time the backend set): the perf model's time for what it did, without
    # the emulation's own latencies, which ``train_s`` holds too.
    scheduled_s: float = 0.0
    # A user's loop (rank 0's: every process keeps its own): what it reported, the latest
    # ``MAX_REPORTS`` in call order, each ``{"step": ..., metric: value}``.
    reports: tuple[dict[str, float], ...] = ()


class _SegmentTrainer(Protocol):
    """What run_segment needs of a segment's trainer (a built-in loop or the user's)."""

    behind_s: float
    scheduled_s: float

    @property
    def reports(self) -> tuple[dict[str, float], ...]: ...

    def train(
        self, control: SegmentControl, on_checkpoint: Callable[[float, bytes], None] | None
    ) -> tuple[float, bool]: ...

    def checkpoint(self, iteration: float) -> bytes | None: ...


def run_segment(
    plan: SegmentPlan,
    control: SegmentControl,
    on_checkpoint: Callable[[float, bytes], None] | None = None,
) -> SegmentOutcome:
    """Join the job's group, restore its state, train until done or stopped, leave the group.

    ``on_checkpoint(iteration, blob)`` receives rank 0's periodic checkpoints. With the job's
    ``log_path``, the segment's course and the output of the job's code go to that file."""
    log = JobLog(plan.work.log_path, plan.rank) if plan.work.log_path else None
    try:
        with captured(log):
            return _run_logged(plan, control, on_checkpoint, log)
    except Exception as exc:
        if log is not None:
            log.line(f"failed: {describe_exception(exc)}")
        raise
    finally:
        if log is not None:
            log.close()


def _run_logged(
    plan: SegmentPlan,
    control: SegmentControl,
    on_checkpoint: Callable[[float, bytes], None] | None,
    log: JobLog | None,
) -> SegmentOutcome:
    started = time.monotonic()
    if log is not None:
        log.line(
            f"segment from iteration {plan.start_iteration:g} of {plan.work.iterations:g}, "
            f"{plan.world_size} process{'es' if plan.world_size != 1 else ''} on {plan.device}"
        )
    # On GPUs the gradients go over NCCL and the per-step control (stop flags, the emulated
    # iteration time: small CPU tensors) over gloo, one group with a backend per device type.
    backend = "cpu:gloo,cuda:nccl" if plan.device.startswith("cuda") else "gloo"
    dist.init_process_group(
        backend,
        init_method=f"tcp://{_host(plan.master_addr)}:{plan.master_port}",
        rank=plan.rank,
        world_size=plan.world_size,
        timeout=timedelta(seconds=plan.join_timeout_s),
    )
    try:
        joined = time.monotonic()
        trainer = _trainer(plan, control, log)
        restored = time.monotonic()
        iteration, finished = trainer.train(control, on_checkpoint)
        trained = time.monotonic()
        blob = trainer.checkpoint(iteration) if plan.rank == 0 else None
        saved = time.monotonic()
    finally:
        dist.destroy_process_group()
    if log is not None:
        log.line(f"{'finished' if finished else 'stopped'} at iteration {iteration:g}")
    return SegmentOutcome(
        job_id=plan.work.job_id,
        rank=plan.rank,
        iteration=iteration,
        finished=finished,
        join_s=joined - started,
        restore_s=restored - joined,
        train_s=trained - restored,
        save_s=saved - trained,
        checkpoint=blob,
        behind_s=trainer.behind_s,
        scheduled_s=trainer.scheduled_s,
        reports=trainer.reports,
    )


def _trainer(plan: SegmentPlan, control: SegmentControl, log: JobLog | None) -> _SegmentTrainer:
    """The segment's loop: emulated, the user's own, or the built-in one over a model."""
    if plan.work.emulated:
        if plan.work.train is not None:
            raise ValueError(f"job {plan.work.job_id}: a training loop needs real compute")
        if plan.work.user is not None:
            raise ValueError(f"job {plan.work.job_id}: a user's model needs real compute")
        return _EmulatedTrainer(plan, control)
    if plan.work.train is not None:
        return UserLoop(plan, control, log)
    return _RealTrainer(plan)


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


class _Trainer:
    """The steps of one segment; subclasses say what a step is."""

    plan: SegmentPlan
    behind_s: float = 0.0  # emulated: wall seconds lost to a schedule that could not be kept
    scheduled_s: float = 0.0  # emulated: wall seconds the steps were scheduled to take
    reports: tuple[dict[str, float], ...] = ()  # a user's loop's alone

    def step(self, iteration: float, control: SegmentControl) -> float:
        """Do one step from ``iteration``; return the iterations it did."""
        raise NotImplementedError

    def state(self) -> dict[str, Any]:
        raise NotImplementedError

    def checkpoint(self, iteration: float) -> bytes:
        buffer = io.BytesIO()
        torch.save({"iteration": iteration, **self.state()}, buffer)
        return buffer.getvalue()

    def train(
        self,
        control: SegmentControl,
        on_checkpoint: Callable[[float, bytes], None] | None,
    ) -> tuple[float, bool]:
        plan = self.plan
        total = plan.work.iterations
        iteration = plan.start_iteration
        flag = torch.zeros(1)
        last_save = time.monotonic()
        while iteration < total:
            iteration += self.step(iteration, control)
            # Every process says whether it was asked to stop; all stop after the same step.
            flag[0] = 1.0 if control.stop.is_set() else 0.0
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            if flag[0] > 0 and iteration < total:
                return iteration, False
            if (
                on_checkpoint is not None
                and plan.rank == 0
                and time.monotonic() - last_save >= plan.checkpoint_every_s
                and iteration < total
            ):
                on_checkpoint(iteration, self.checkpoint(iteration))
                last_save = time.monotonic()
        return iteration, True


class _EmulatedTrainer(_Trainer):
    """All-reduces a small buffer that carries the iteration time the backend set, then waits
    that long for each iteration of the step."""

    def __init__(self, plan: SegmentPlan, control: SegmentControl) -> None:
        self.plan = plan
        if plan.checkpoint is not None:
            state = torch.load(io.BytesIO(plan.checkpoint), weights_only=True)
            if float(state["iteration"]) != plan.start_iteration:
                raise RuntimeError(
                    f"job {plan.work.job_id}: checkpoint at iteration {state['iteration']}, "
                    f"asked to resume at {plan.start_iteration}"
                )
        if control.iteration_wall_s <= 0:
            control.iteration_wall_s = plan.iteration_wall_s
        self.buffer = torch.zeros(SYNC_ELEMENTS)
        self.deadline = time.monotonic()

    def step(self, iteration: float, control: SegmentControl) -> float:
        # The processes agree on the iteration time first (the largest any of them was told):
        # the backend's new time reaches them at different steps, and processes that counted
        # different iterations a step would end the job at different steps, one of them then
        # waiting in a collective that the others have left.
        self.buffer[0] = control.iteration_wall_s
        dist.all_reduce(self.buffer, op=dist.ReduceOp.MAX)
        per_iteration = float(self.buffer[0])
        left = self.plan.work.iterations - iteration
        # Several iterations a step (at least step_wall_s of waiting), never past the end.
        count = max(1.0, math.floor(self.plan.step_wall_s / per_iteration)) if per_iteration else 1
        count = min(float(count), left)
        # Steps keep to a schedule rather than each waiting its full time after the last one
        # ended: the perf model's iteration time already holds the job's communication, so
        # the real all-reduce's own time (and Python's) is hidden while it fits the budget.
        # A process that fell behind (the emulating machine's cores were busy elsewhere: an
        # artefact of many emulated GPUs on few cores, not of the cluster) catches up, by up
        # to CATCH_UP_S; further behind, the schedule starts again from now and the loss shows.
        now = time.monotonic()
        if self.deadline < now - CATCH_UP_S:
            self.behind_s += now - CATCH_UP_S - self.deadline
            self.deadline = now - CATCH_UP_S
        self.deadline += count * per_iteration
        self.scheduled_s += count * per_iteration
        time.sleep(max(0.0, self.deadline - now))
        return count

    def state(self) -> dict[str, Any]:
        return {}


class _RealTrainer(_Trainer):
    """Data-parallel SGD of the job's model on its data (DDP)."""

    def __init__(self, plan: SegmentPlan) -> None:
        self.plan = plan
        work = plan.work
        if work.iterations != math.floor(work.iterations):
            raise ValueError(f"job {work.job_id}: real compute needs whole iterations")
        device = torch.device(plan.device)
        job = job_functions(work.user, work.job_id) if work.user is not None else _zoo_work(work)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(work.data_seed)  # every process builds the same initial weights
            model = job.model_fn()
        self.model = model.to(device)
        self.device = device
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=work.lr, momentum=0.9)
        start = int(plan.start_iteration)
        if plan.checkpoint is not None:
            state = torch.load(io.BytesIO(plan.checkpoint), map_location=device, weights_only=True)
            if int(state["iteration"]) != start:
                raise RuntimeError(
                    f"job {work.job_id}: checkpoint at iteration {state['iteration']}, asked "
                    f"to resume at {start}"
                )
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
        self.loss = job.loss
        self.ddp = nn.parallel.DistributedDataParallel(self.model)
        self.batches = _batches(job.data_fn, plan, start)

    def step(self, iteration: float, control: SegmentControl) -> float:
        inputs, targets = next(self.batches)
        inputs, targets = to_device(inputs, self.device), to_device(targets, self.device)
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss(self.ddp(inputs), targets)
        problem = loss_problem(loss)
        if problem is not None:
            raise ValueError(
                f"job {self.plan.work.job_id}: the loss {problem} at iteration {int(iteration)}"
            )
        loss.backward()
        self.optimizer.step()
        return 1.0

    def state(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}


def _zoo_work(work: JobWork) -> JobFunctions:
    """A zoo model's job (its model, synthetic batches drawn per (seed, step, rank) and loss),
    with the image side given for image models (small on CPUs)."""
    options = (
        {"image_size": work.image_size} if "image_size" in zoo.spec(work.model).defaults else {}
    )
    job = zoo_job(work.model, work.batch_size, work.data_seed, **options)
    return JobFunctions(model_fn=job.model_fn, data_fn=job.data_fn, loss=job.loss)


def _batches(
    data_fn: Callable[..., Iterable[Batch]], plan: SegmentPlan, start: int
) -> Iterator[Batch]:
    """This process's batches from iteration ``start`` on: synthetic data goes straight there
    (it is drawn per step); a user's data function is iterated (again from its start when it
    ends: a new epoch) and its first ``start`` batches skipped."""
    if isinstance(data_fn, SyntheticData):
        return iter(data_fn(plan.rank, plan.world_size, start))
    job_id = plan.work.job_id

    def epochs() -> Iterator[Batch]:
        while True:
            empty = True
            for batch in data_fn(plan.rank, plan.world_size):
                empty = False
                yield batch
            if empty:
                raise ValueError(f"job {job_id}: the data function yielded no batch")

    return itertools.islice(epochs(), start, None)


def final_parameters(blob: bytes) -> dict[str, torch.Tensor]:
    """The model parameters a real-compute checkpoint holds (to compare runs)."""
    state = torch.load(io.BytesIO(blob), weights_only=True)
    return dict(state["model"])
