"""The service's scheduler: the scheduling core with a wall clock, the live executors and the
job store, in one background thread.

Arrivals are open-ended: a submission is stored first (its ``submitted`` event is the commit
point), then handed to the scheduler's inbox; the scheduler adds it to the core at the next
instant. Cancels go through the inbox too. Every transition of the core is appended to the
store's event table after the instant that made it. The core's time is seconds since this
service started, times ``speedup``; jobs found again after a restart arrive at once with their
own submit times (earlier, so negative), and resume from their last durable checkpoint.

The API threads read a :class:`Snapshot` the scheduler publishes after each instant, never the
core's own state.
"""

from __future__ import annotations

import collections
import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from unstall.live.clock import WallClock
from unstall.live.cluster import LiveCluster
from unstall.live.config import LiveConfig
from unstall.live.driver import POLL_S, LiveDriver
from unstall.live.pool import ExecutorPool
from unstall.live.segments import JobRecord as LiveRecord
from unstall.live.status import estimated_done_iters
from unstall.live.training import JobWork, UserWork
from unstall.loop import (
    Collected,
    CoreSettings,
    Job,
    JobEvent,
    JobState,
    SchedulingCore,
    placement_text,
)
from unstall.net import TopologyConfig
from unstall.sched.base import Policy, policy_capabilities
from unstall.sched.reasons import wait_reasons
from unstall.service.estimates import (
    Estimates,
    EstimateSettings,
    Estimator,
    ForecastInput,
    RunTimes,
    arrivals_window,
    capture,
)
from unstall.service.history import History, Sample
from unstall.service.models import JobSpec
from unstall.service.store import JobStore, StoredJob
from unstall.sim import PerfSpeedModel, layout_of
from unstall.sim.forecast import Forecast
from unstall.sim.jobs import build_jobs
from unstall.sim.startup import default_startup_model
from unstall.usercode import is_reference
from unstall.workload.losses import LOSSES

# Wall seconds between two askings of the policy why its jobs wait, at least (it walks the
# queue: a queue of thousands is not walked every round).
REASONS_EVERY_S = 1.0

# What a job that names no zoo model (a training loop, a user's model) is timed as.
DEFAULT_MODEL = "resnet18"

# The spec's fields that name a user's function (FILE.py:FUNC, its file among the job's files).
USER_CODE_FIELDS = ("train", "model_fn", "data_fn", "loss")
# The core's transitions as the store names them (arrivals are stored as ``submitted`` when
# they come in, and as ``requeued`` when a restart finds a job that was running).
_STORED_KIND = {
    "started": "started",
    "migrated": "migrated",
    "preempted": "preempted",
    "finished": "succeeded",
    "failed": "failed",
    "gave_up": "gave_up",
    "cancelled": "cancelled",
}
# Submissions one instant takes in at most: a burst (those that came while the executors came
# up, or faster than instants) is taken in over several instants, one after the other, so that
# no instant (and what waits for it: a cancel, a job's end) takes long.
MAX_INTAKE = 500
_STATE = {
    JobState.PENDING: "pending",
    JobState.QUEUED: "pending",
    JobState.RUNNING: "running",
    JobState.DONE: "succeeded",
    JobState.FAILED: "failed",
    JobState.CANCELLED: "cancelled",
}


@dataclass(frozen=True, slots=True)
class JobStatus:
    """One job as the scheduler last saw it (run seconds converted to wall time)."""

    state: str
    placement: str
    done_iters: float
    total_iters: float
    restarts: int
    started_at: float | None
    ended_at: float | None
    error: str


@dataclass(frozen=True)
class Snapshot:
    """What the API reads: each job's status, the queue in order, the GPUs."""

    at: float
    jobs: dict[str, JobStatus] = field(default_factory=dict)
    queue: tuple[str, ...] = ()
    free_by_node: tuple[int, ...] = ()
    lost_nodes: frozenset[int] = frozenset()
    holders: dict[tuple[int, int], str] = field(default_factory=dict)  # (node, gpu) -> job
    reasons: dict[str, str] = field(default_factory=dict)  # why each queued job waits


@dataclass(frozen=True)
class _Submit:
    job_id: str
    spec: JobSpec
    submitted_at: float


@dataclass(frozen=True)
class _Cancel:
    job_id: str
    by: str


class ServiceDriver(LiveDriver):
    """The live driver for open-ended arrivals: it never runs out of work, and each instant it
    first takes what the inbox holds."""

    def __init__(self, core: SchedulingCore, *, scheduler: Scheduler, **kwargs: object) -> None:
        super().__init__(core, **kwargs)  # type: ignore[arg-type]
        self.scheduler = scheduler
        self._cancelled = False
        self.waited_s = 0.0  # wall seconds the latest instant waited for

    def next_instant(self, due_s: float, until_s: float) -> float:
        scheduler = self.scheduler
        if scheduler.stopping.is_set():
            return math.inf
        now = self.clock.now()
        wait = max(0.0, self.clock.wall(due_s - now)) if due_s < math.inf else POLL_S
        wait = min(wait, POLL_S)
        if scheduler.intake_left:  # a burst is being taken in: its next part at once
            wait = 0.0
        began = time.perf_counter()
        if self.segments:
            self._ended = self._wait(wait)
        else:
            scheduler.wakeup.wait(wait)
            scheduler.wakeup.clear()
        self.waited_s = time.perf_counter() - began
        self._cancelled = scheduler.take_inbox(self.clock.now())
        return self.clock.now()

    def collect(self, now: float) -> Collected:
        found = super().collect(now)
        if self._cancelled:  # GPUs freed or the queue changed: the policy looks again
            self._cancelled = False
            return Collected(wake=True, changed=found.changed, events=found.events)
        return found


class Scheduler:
    """The core, its driver and the store, in a thread of their own (see the module docstring)."""

    def __init__(
        self,
        *,
        store: JobStore,
        topology: TopologyConfig,
        policy: Policy,
        config: LiveConfig,
        log: Callable[[str], None] | None = None,
        estimates: EstimateSettings | None = None,
    ) -> None:
        self.store = store
        self.topology = topology
        self.policy = policy
        self.config = config
        self.log = log or (lambda _text: None)
        self.layout = layout_of(topology)
        self.speed = PerfSpeedModel(topology, {})
        self.started_wall = time.time()
        self.core = SchedulingCore(
            layout=self.layout,
            policy=policy,
            jobs=[],
            settings=CoreSettings(
                tick_s=policy_capabilities(policy).tick_s,
                seed=config.seed,
                max_failures=config.max_failures,
                record_rounds=True,
            ),
            on_event=self._on_event,
        )
        self.records: dict[str, LiveRecord] = {}
        self.pool: ExecutorPool | None = None
        self.driver: ServiceDriver | None = None
        self.inbox: queue.SimpleQueue[_Submit | _Cancel] = queue.SimpleQueue()
        self.wakeup = threading.Event()
        self.intake_left = False  # the latest instant took in MAX_INTAKE and more are waiting
        self.stopping = threading.Event()
        self.ready = threading.Event()  # the executors are up and the jobs restored
        self._pending_events: list[tuple[str, float, str, str]] = []
        self._cancel_by: dict[str, str] = {}  # who asked, by job, until the core cancels it
        self._ended_at: dict[str, float] = {}  # failed and cancelled jobs: when (wall)
        self._earlier_restarts: dict[str, int] = {}  # by job: before this start of the service
        self._statuses: dict[str, JobStatus] = {}
        self._dirty: set[int] = set()  # jobs whose status changed since the last snapshot
        self.snapshot = Snapshot(at=time.time(), free_by_node=tuple(self.layout.node_gpus))
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        # (wall seconds, jobs queued) of the latest instants that ran a round.
        self.round_costs: collections.deque[tuple[float, int]] = collections.deque(maxlen=2000)
        # The cluster's busy GPUs and queue over the last hours, for the dashboard's plots.
        self.history = History()
        # Estimates (service/estimates.py): what each job declared of its run time, the run
        # times of finished jobs, the latest arrivals, and when the jobs last changed.
        self.estimate_settings = estimates or EstimateSettings()
        self.declared_s: dict[str, float | None] = {}
        self.runtimes = RunTimes(self.estimate_settings.prior_runtime_s)
        self.arrivals: collections.deque[tuple[float, int, str, int]] = collections.deque()
        self.estimator = Estimator(
            layout=self.layout,
            speed=self.speed,
            policy=policy,
            startup=default_startup_model().for_speedup(config.speedup),
            restore_s=config.restore_s if config.restore_s is not None else 60.0,
            settings=self.estimate_settings,
            log=self.log,
        )
        self._changes = 0  # jobs came, went or changed state: counted
        self._forecast_changes = -1  # the count at the latest forecast taken
        self._forecast_at = -math.inf  # wall (monotonic) time of the latest forecast taken
        self._reasons_at = -math.inf
        self._reasons: dict[str, str] = {}
        self.last_input: ForecastInput | None = None

    # --- what the API asks ---------------------------------------------------------------------

    def submit(self, job_id: str, spec: JobSpec, submitted_at: float) -> None:
        """A stored job, to be added to the core at its next instant."""
        self.submit_many([(job_id, spec, submitted_at)])

    def submit_many(self, jobs: Sequence[tuple[str, JobSpec, float]]) -> None:
        """Stored jobs ``(id, spec, submitted at)``, to be added to the core at its next
        instant, in this order (one wake-up for them all)."""
        for job_id, spec, submitted_at in jobs:
            self.inbox.put(_Submit(job_id, spec, submitted_at))
        self.wakeup.set()

    def cancel(self, job_id: str, by: str) -> None:
        self.inbox.put(_Cancel(job_id, by))
        self.wakeup.set()

    def check_spec(self, spec: JobSpec) -> str | None:
        """Why the cluster can never run ``spec`` (None: it can), naming the field."""
        if spec.gpus > self.layout.total_gpus:
            return f"gpus: {spec.gpus} GPUs asked, the cluster has {self.layout.total_gpus}"
        if spec.model is not None:
            try:
                self.speed.consolidated_iter_s(spec.model, spec.gpus)
            except Exception as exc:  # the perf model's own words on an unknown model
                # The perf model's own words, without the field name it gives for traces.
                return f"model: {str(exc).split(': ', 1)[-1]}"
        if spec.duration_s is not None and not self.config.emulated:
            return "duration_s: only in emulated compute; give iterations"
        if self.config.emulated:
            # Emulated compute runs no user code: the perf model's times stand for it.
            if spec.train is not None:
                return "train: a training loop runs for real: this service runs --compute emulated"
            if spec.model_fn is not None:
                return (
                    "model_fn: your model, data and loss train for real: this service runs "
                    "--compute emulated"
                )
        for name in USER_CODE_FIELDS:
            reference = getattr(spec, name)
            if reference is None or not is_reference(reference):
                continue  # (a loss may be a built-in loss's name)
            file = reference.rpartition(":")[0]
            # The executors load a file from the job's stored files only.
            if file.endswith(".py") and file not in spec.files:
                return f"{name}: {file} is not among the job's files"
        if spec.loss is not None and not is_reference(spec.loss) and spec.loss not in LOSSES:
            return f"loss: {spec.loss!r} is neither a loss ({', '.join(LOSSES)}) nor FILE.py:FUNC"
        return None

    # --- the thread ----------------------------------------------------------------------------

    def start(self, found: dict[str, StoredJob], cluster: LiveCluster) -> None:
        """Run in a thread of its own: start the executors on ``cluster``, add the jobs the
        store holds (``found``), then schedule until stopped. Submissions wait in the inbox
        meanwhile; the API answers from the store."""
        self.pool = ExecutorPool(cluster, checkpoint_dir=self.store.checkpoint_dir)
        self.driver = ServiceDriver(
            self.core,
            scheduler=self,
            pool=self.pool,
            clock=WallClock(self.config.speedup),
            speed=self.speed,
            config=self.config,
            records=self.records,
            log=self.log,
        )
        self.core.attach(self.driver)
        self._thread = threading.Thread(
            target=self._run, args=(found,), name="unstall-scheduler", daemon=True
        )
        self._thread.start()
        self.estimator.start()

    def _run(self, found: dict[str, StoredJob]) -> None:
        assert self.pool is not None and self.driver is not None
        try:
            self.pool.start()
            # The core's time 0 is now: a wall time is started_wall + run seconds / speedup.
            self.driver.clock.start()
            self.started_wall = time.time()
            self._restore(found)
            self.core.reset_policy()
            self._publish()
            self.ready.set()
            while True:
                rounds = self.core.rounds
                began = time.perf_counter()
                if not self.core.step():
                    break
                self._flush()
                self._publish()
                if self.core.rounds != rounds:
                    # What an instant with a round cost: the round, its events written to the
                    # store, the new snapshot (the wait for the instant is not counted).
                    busy = time.perf_counter() - began - self.driver.waited_s
                    self.round_costs.append((busy, len(self.core.queued)))
        except BaseException as exc:  # the service reports it; the store keeps every job
            self.error = exc
            self.log(f"the scheduler stopped: {exc}")
        finally:
            self._flush()
            self._publish()

    def stop(self) -> None:
        """Stop the thread; running jobs checkpoint and are found again at the next start."""
        self.stopping.set()
        self.wakeup.set()
        self.estimator.stop()
        if self._thread is not None:
            self._thread.join(timeout=60)
        driver, pool = self.driver, self.pool
        self.driver = self.pool = None  # a second stop finds nothing left to stop
        if driver is not None and self.ready.is_set():
            driver.stop_everything()
        if pool is not None:
            pool.shutdown()

    # --- jobs in and out -----------------------------------------------------------------------

    def take_inbox(self, now: float) -> bool:
        """Add the submissions waiting in the inbox, carry out its cancels; whether any cancel
        changed the queue or freed GPUs."""
        cancelled = False
        taken = 0
        submits: list[_Submit] = []  # added together (one build_jobs), before a later cancel
        while True:
            if taken == MAX_INTAKE:  # the rest at the next instant, which comes at once
                self.intake_left = True
                break
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                self.intake_left = False
                break
            if isinstance(item, _Submit):
                submits.append(item)
                taken += 1
                continue
            if submits:
                self._add_many(submits, now)
                submits = []
            job = self.core.by_id.get(item.job_id)
            if job is not None and job.state in (
                JobState.PENDING,
                JobState.QUEUED,
                JobState.RUNNING,
            ):
                self._cancel_by[item.job_id] = item.by
                self.core.cancel(job, now)
                cancelled = True
        if submits:
            self._add_many(submits, now)
        return cancelled

    def _add_many(self, stored: Sequence[_Submit], now: float) -> list[Job]:
        """The core's jobs for stored specs, arriving now, in order; built together, so that
        what each (model, GPUs) costs to work out is worked out once. A job the core already
        has (stored just before the scheduler started, found in the store and in the inbox) is
        not added again."""
        fresh = [item for item in stored if item.job_id not in self.core.by_id]
        if not fresh:
            return []
        speedup = self.config.speedup
        emulated = self.config.emulated
        models = [item.spec.model or DEFAULT_MODEL for item in fresh]
        durations: list[float] = []
        iterations: list[float] = []
        cons_by: dict[tuple[str, int], float] = {}  # the perf model's time, once per kind
        for item, model in zip(fresh, models, strict=True):
            spec = item.spec
            cons = cons_by.get((model, spec.gpus), 0.0)
            if not cons:
                cons = cons_by[model, spec.gpus] = self.speed.consolidated_iter_s(model, spec.gpus)
            duration, its = self._work_of(spec, cons)
            durations.append(duration)
            iterations.append(its)
        started = self.started_wall
        jobs = build_jobs(
            job_ids=[item.job_id for item in fresh],
            submit_s=[min((item.submitted_at - started) * speedup, now) for item in fresh],
            num_gpus=[item.spec.gpus for item in fresh],
            duration_s=durations,
            models=models,
            speed=self.speed,
        )
        logs = str(self.store.logs_dir)  # each job's log_path, as text (no Path per job)
        config = self.config
        for job, item, model, its in zip(jobs, fresh, models, iterations, strict=True):
            job.index = len(self.core.jobs)
            job.priority = item.spec.priority
            work = JobWork(
                job_id=item.job_id,
                model=model,
                iterations=job.work_iters if emulated else its,
                emulated=emulated,
                batch_size=config.batch_size,
                image_size=config.image_size,
                lr=config.lr,
                seed=config.seed,
                user=self._user_work(item.job_id, item.spec),
                train=self._train_reference(item.job_id, item.spec),
                log_path=f"{logs}/{item.job_id}.log",
            )
            self.records[item.job_id] = LiveRecord(
                work=work, scale=job.work_iters / work.iterations
            )
            self.core.add_job(job, now)
            self._dirty.add(job.index)
            spec = item.spec
            # What the estimates may know of its run time: the user's estimate, or the work
            # its iterations declare; a duration_s (emulated) stands for what a real job does
            # not say.
            self.declared_s[item.job_id] = (
                spec.expected_duration_s
                if spec.expected_duration_s is not None
                else (job.duration_s if spec.iterations is not None else None)
            )
            self.arrivals.append((job.submit_s, job.num_gpus, model, spec.priority))
        self._changes += 1
        return jobs

    def _train_reference(self, job_id: str, spec: JobSpec) -> str | None:
        """The job's training loop as its executors load it (never this process)."""
        return None if spec.train is None else self._stored_reference(job_id, spec.train)

    def _user_work(self, job_id: str, spec: JobSpec) -> UserWork | None:
        """The job's model, data and loss as its executors load them (never this process)."""
        if spec.model_fn is None:
            return None
        assert spec.data_fn is not None and spec.loss is not None  # the spec's own rule
        return UserWork(
            model_fn=self._stored_reference(job_id, spec.model_fn),
            data_fn=self._stored_reference(job_id, spec.data_fn),
            loss=self._stored_reference(job_id, spec.loss),
        )

    def _stored_reference(self, job_id: str, reference: str) -> str:
        """A reference to a file among the job's stored files, by its path in the store; a
        module's reference (or a built-in loss's name) as it is."""
        file, _, func = reference.rpartition(":")
        if file.endswith(".py"):
            return f"{self.store.code_dir(job_id) / file}:{func}"
        return reference

    def _restore(self, found: dict[str, StoredJob]) -> None:
        """The store's unfinished jobs, added again: a job that was running when the service
        stopped resumes from its last durable checkpoint (a ``requeued`` event says so)."""
        requeued = []
        for stored in found.values():
            if stored.state == "succeeded":
                self._learn_run_time(stored.spec)
        unfinished = [
            stored
            for stored in found.values()
            if stored.state not in ("succeeded", "failed", "cancelled")
        ]
        self._add_many([_Submit(s.id, s.spec, s.submitted_at) for s in unfinished], 0.0)
        for stored in unfinished:
            job = self.core.by_id[stored.id]
            assert self.pool is not None
            held = self.pool.held_iteration(stored.id)
            job.done_iters = held * self.records[stored.id].scale
            # Restarts before this start of the service count on, a requeue after it too.
            self._earlier_restarts[stored.id] = stored.restarts + (stored.state == "running")
            if stored.state == "running":
                requeued.append((stored.id, time.time(), "requeued", "the service restarted"))
            if stored.cancel_requested:
                self.inbox.put(_Cancel(stored.id, ""))
        self.store.record(requeued)

    def _learn_run_time(self, spec: JobSpec) -> None:
        """A job that succeeded before this start of the service: its run time for the
        estimates (its duration at its consolidated placement, as the core counts it)."""
        model = spec.model or DEFAULT_MODEL
        try:
            cons = self.speed.consolidated_iter_s(model, spec.gpus)
        except Exception:  # a model this service's perf model no longer knows
            return
        self.runtimes.add(model, spec.gpus, self._work_of(spec, cons)[0])

    def _work_of(self, spec: JobSpec, cons: float) -> tuple[float, float]:
        """A spec's run seconds at its consolidated placement (the core's duration) and its
        iterations, its model taking ``cons`` seconds an iteration there. Real compute runs
        iterations in wall time: its duration is their wall seconds times the speedup."""
        if spec.duration_s is not None:
            return spec.duration_s, spec.duration_s / cons
        assert spec.iterations is not None  # the spec's own rule: one of the two
        scale = 1.0 if self.config.emulated else self.config.speedup
        return spec.iterations * cons * scale, float(spec.iterations)

    def _on_event(self, event: JobEvent) -> None:
        job = self.core.by_id[event.job_id]
        self._dirty.add(job.index)
        self._changes += 1
        if event.kind == "finished":
            self.runtimes.add(job.model, job.num_gpus, job.duration_s)
        kind = _STORED_KIND.get(event.kind)
        if kind is None:
            return
        detail = event.detail
        if kind == "cancelled":
            detail = self._cancel_by.pop(event.job_id, "")
        at = self.wall(event.time_s)
        if kind in ("gave_up", "cancelled"):
            self._ended_at[event.job_id] = at
        self._pending_events.append((event.job_id, at, kind, detail))

    def _flush(self) -> None:
        """The instant's events to the store, and a line each to their jobs' logs."""
        events, self._pending_events = self._pending_events, []
        self.store.record(events)
        for job_id, at, kind, detail in events:
            self.store.log_event(job_id, at, kind, detail)

    def wall(self, run_s: float) -> float:
        """Wall time (seconds since the epoch) of a time of the core."""
        return self.started_wall + run_s / self.config.speedup

    # --- what the API reads --------------------------------------------------------------------

    def _publish(self) -> None:
        """A new snapshot: the jobs that changed, and the running ones (their progress)."""
        core = self.core
        assert self.driver is not None
        now = self.driver.clock.now()
        for index in (*self._dirty, *core.running):
            job = core.jobs[index]
            self._statuses[job.job_id] = self._status(job, now)
        self._dirty.clear()
        holders: dict[tuple[int, int], str] = {}
        for index, segment in self.driver.segments.items():
            for node_slot in segment.executors:
                holders[node_slot] = core.jobs[index].job_id
        self._explain(now)
        self._forecast(now)
        self.snapshot = Snapshot(
            at=time.time(),
            jobs=dict(self._statuses),
            # Arrival order, higher priorities first: the order arrival-order policies (fifo,
            # first-fit, consolidate) take the queue in.
            queue=tuple(
                job.job_id for job in sorted(core.queued.values(), key=lambda j: -j.priority)
            ),
            free_by_node=tuple(core.cluster.free_by_node),
            lost_nodes=frozenset(core.cluster.down),
            holders=holders,
            reasons=self._reasons,
        )
        self._sample(self.snapshot)

    def _explain(self, now: float) -> None:
        """Why each queued job waits, in the policy's words (sched/reasons.py), at most every
        REASONS_EVERY_S (asked again even when no job changed: a delay timer's time left does)."""
        core = self.core
        if not core.queued:
            self._reasons = {}
            return
        at = time.monotonic()
        if at - self._reasons_at < REASONS_EVERY_S:
            return
        self._reasons_at = at
        self._reasons = wait_reasons(self.policy, core.snapshot(now))

    def _forecast(self, now: float) -> None:
        """Hand the estimator the jobs as they are, when they changed (at most every
        ``period_s``) or every ``refresh_s`` while jobs wait."""
        settings = self.estimate_settings
        at = time.monotonic()
        since = at - self._forecast_at
        if since < max(settings.period_s, settings.spacing * self.estimator.estimates.seconds):
            return
        changed = self._changes != self._forecast_changes
        if not changed and not (self.core.queued and since >= settings.refresh_s):
            return
        self._forecast_at = at
        self._forecast_changes = self._changes
        state = self.forecast_input(now)
        self.last_input = state
        self.estimator.request(state)

    def forecast_input(self, now: float) -> ForecastInput:
        """The jobs as a forecast takes them (run in the scheduler's thread)."""
        core = self.core
        arrivals_window(self.arrivals, now, self.estimate_settings.replay_window_s)
        queued = sorted(core.queued.values(), key=lambda j: (-j.priority, j.index))
        jobs, run_s = capture(
            now_s=now,
            running=core.running.values(),
            queued=queued,
            done_iters=lambda job: estimated_done_iters(job, now),
            declared_s=self.declared_s,
            runtimes=self.runtimes,
            arrivals=self.arrivals,
            settings=self.estimate_settings,
        )
        return ForecastInput(
            now_s=now,
            wall_at_now=self.wall(now),
            speedup=self.config.speedup,
            jobs=tuple(jobs),
            run_s=run_s,
            next_tick_s=core.next_tick_s - now,
        )

    @property
    def estimates(self) -> Estimates:
        return self.estimator.estimates

    def whatif(self, policies: list[Policy]) -> list[Forecast]:
        """Forecasts of the jobs as the scheduler last took them under each of ``policies``
        (fresh ones; the first the serving one), in the caller's thread."""
        state = self.last_input
        if state is None:
            return []
        return [
            self.estimator.run(state, policy, serving=i == 0) for i, policy in enumerate(policies)
        ]

    def _sample(self, snapshot: Snapshot) -> None:
        """The snapshot's GPUs and queue into the history (kept every few seconds)."""
        lost = sum(self.layout.node_gpus[n] for n in snapshot.lost_nodes)
        free = sum(snapshot.free_by_node)
        self.history.observe(
            Sample(
                at=snapshot.at,
                busy=self.layout.total_gpus - free - lost,
                free=free,
                lost=lost,
                queued=len(snapshot.queue),
                running=len(self.core.running),
            )
        )

    def _status(self, job: Job, now: float) -> JobStatus:
        assert self.driver is not None
        record = self.records[job.job_id]
        # Its executors report only when a segment ends: a running job's progress since, at
        # its iteration time (as `unstall live run`'s table shows it).
        done = estimated_done_iters(job, now)
        started = job.first_start_s if job.first_start_s >= 0 else None
        ended = job.finish_s if job.state == JobState.DONE else None
        return JobStatus(
            state=_STATE[job.state],
            placement=placement_text(job.placement) if job.state == JobState.RUNNING else "",
            done_iters=done / record.scale,
            total_iters=job.work_iters / record.scale,
            restarts=job.preemptions
            + job.migrations
            + job.failures
            + self._earlier_restarts.get(job.job_id, 0),
            started_at=self.wall(started) if started is not None else None,
            ended_at=self.wall(ended) if ended is not None else self._ended_at.get(job.job_id),
            error=job.error,
        )
