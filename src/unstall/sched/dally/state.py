"""What Dally keeps between rounds: one :class:`JobRecord` per job, made at the first round that
needs it and dropped when the job finishes, and the rest of its memory of the run
(:class:`DallyState`: what it has learnt, the queue as it knows it, the tenancy's version).

The state is apart from the settings (:class:`~unstall.sched.dally.config.DallyConfig`) so
that the look-ahead (:mod:`unstall.sim.lookahead`) can hand it from a Dally of one setting to
a Dally of another: a switch keeps what was learnt and every job's record.
"""

from __future__ import annotations

import bisect
import functools
import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

from unstall.sched.base import ClusterLayout, JobView, Migrate, Preempt, SetTimer, Start
from unstall.sched.dally.config import DallyConfig
from unstall.sched.dally.delay import DelayFactor
from unstall.sched.dally.expected_runtimes import ExpectedRemaining
from unstall.sched.dally.history import RunHistory
from unstall.sched.dally.queue_index import Group, QueueIndex
from unstall.sched.dally.victim_figures import VictimFigures
from unstall.sched.placement import TypeClaims

# A spread running job's slowdown where it runs, with what it was worked out from: its view,
# the cluster, the congestion and the spread jobs by node (see ``Moves._slowdown_where_running``).
SlowdownWhere = tuple[JobView, ClusterLayout, float, tuple[int, ...], float]


@dataclass
class Held:
    """A job the delay mechanism is holding back: since when, and what it turned down."""

    since_s: float
    turned_down: float  # slowdown of the worst level it refused


@dataclass
class JobRecord:
    """What Dally remembers of one job. The first four fields are of a waiting job and are
    cleared when it starts (:meth:`started`); the others last until it finishes."""

    held: Held | None = None  # held back for locality
    timers_set: set[float] = field(default_factory=set)  # wake-up times asked for
    sensitive_at: tuple[float, bool] | None = None  # (congestion, whether sensitive then)
    retry_at: float | None = None  # earliest next preemption attempt, after a failed one
    moves: int = 0  # preemptions and migrations this policy made of it
    consolidated_since: float | None = None  # its ``changed_s`` when found consolidated
    no_block: int | None = None  # tenancy version when no consolidated block was free for it
    slowdown_where: SlowdownWhere | None = None

    def started(self) -> None:
        """Forget what was kept of it while it waited."""
        self.held = None
        self.timers_set = set()
        self.sensitive_at = None
        self.retry_at = None


@dataclass
class Round:
    """One round's decisions as they are made, and what the round has used up."""

    fresh: list[JobView] = field(default_factory=list)  # jobs new to the queue
    due: list[JobView] = field(default_factory=list)  # waiting jobs due to retry preemption
    starts: list[Start] = field(default_factory=list)
    preempts: list[Preempt] = field(default_factory=list)
    migrations: list[Migrate] = field(default_factory=list)
    timers: list[SetTimer] = field(default_factory=list)
    taken: set[str] = field(default_factory=set)  # running jobs preempted or moved this round
    attempts: int = 0  # jobs for which a node was sought by preemption this round
    # Groups (size, service) for which priority preemption failed this round.
    priority_failed: set[Group] = field(default_factory=set)
    # Several GPU types: which waiting jobs the fast GPUs are kept for (``Dally._place_typed``).
    claims: TypeClaims | None = None


class DallyState:
    """Dally's memory of a run under ``config`` (its first setting), learning into
    ``history``."""

    def __init__(self, config: DallyConfig, history: RunHistory) -> None:
        self.history = history
        self.delay = DelayFactor(
            value=config.wait_factor,
            enabled=config.autotune,
            adjust_every=config.tune_every,
            step=config.tune_step,
            min_value=config.tune_min,
            max_value=config.tune_max,
        )
        self.jobs: dict[str, JobRecord] = {}
        self.expected = ExpectedRemaining(history)  # memoised expected run times
        # Incremental rounds (see ``Dally.decide``): the tenancy's version and what it was, and
        # the version under which the whole queue was last gone through.
        self.version = 0
        self.tenancy: tuple[tuple[int, ...], int, float] = ((), -1, -1.0)
        self.waiting_version = -1
        self.acted = False
        # The queue as the policy knows it, kept in step with the snapshot's.
        self.queue = QueueIndex(queue_rank(config))
        # Preemption retries: a heap of (earliest time, job) (each job's is in its record).
        self.retry_due: list[tuple[float, str]] = []
        self.victims = VictimFigures(history)  # running jobs as preemption candidates
        self.gave_up = 0  # sensitive jobs started below their best level so far

    def record(self, job_id: str) -> JobRecord:
        """``job_id``'s record, made if it has none."""
        found = self.jobs.get(job_id)
        if found is None:
            found = self.jobs[job_id] = JobRecord()
        return found

    def moves(self, job_id: str) -> int:
        """Preemptions and migrations made of ``job_id`` so far."""
        found = self.jobs.get(job_id)
        return 0 if found is None else found.moves

    def count_move(self, job_id: str) -> None:
        self.record(job_id).moves += 1

    def retry_at(self, job_id: str, default: float) -> float:
        """When ``job_id`` may try preemption again (``default`` when it may now)."""
        found = self.jobs.get(job_id)
        return default if found is None or found.retry_at is None else found.retry_at

    def retry_later(self, job_id: str, at_s: float) -> None:
        self.record(job_id).retry_at = at_s
        heapq.heappush(self.retry_due, (at_s, job_id))

    def due_retries(self, now: float) -> list[JobView]:
        """Waiting jobs whose next preemption attempt is due (see ``_preempt_for``)."""
        due: list[JobView] = []
        heap = self.retry_due
        while heap and heap[0][0] <= now:
            at, job_id = heapq.heappop(heap)
            view = self.queue.by_id.get(job_id)
            if view is not None and self.retry_at(job_id, -1.0) == at:
                due.append(view)
        return due

    def finished(self, view: JobView, now: float) -> None:
        """``view``'s job finished: its record goes, its run time is learnt."""
        self.jobs.pop(view.job_id, None)
        self.history.observe_finish(view.attained_gpu_s(now) / view.num_gpus, view.num_gpus)

    def switch_to(self, config: DallyConfig) -> None:
        """Go on under ``config`` from the next round: the delay factor restarts at its
        ``wait_factor``, the queue is ranked by its order, and the whole queue is gone through
        again."""
        self.delay.restart(config.wait_factor, config.autotune)
        self.version += 1
        self.expected = ExpectedRemaining(self.history)
        self.queue.rank_by(queue_rank(config))


def las_level(thresholds: tuple[float, ...], attained_gpu_s: float) -> int:
    """The las order's level of a job with ``attained_gpu_s`` of service: how many of the
    ``thresholds`` (ascending) it has reached."""
    return bisect.bisect_right(thresholds, attained_gpu_s)


def _las_waiting_level(thresholds: tuple[float, ...], job: JobView) -> int:
    """:func:`las_level` of a waiting job (its service is fixed while it waits)."""
    return las_level(thresholds, job.attained_gpu_s_at_change)


def queue_rank(config: DallyConfig) -> Callable[[JobView], int] | None:
    """What the queue index keeps the waiting jobs by besides their groups: the level in the
    fifo and las orders (a waiting job's service, so its level, is fixed while it waits: the
    index keeps each level's jobs in arrival order, which is the priority order, and a pass
    over the queue needs no sort); nothing in gittins (it ranks groups). The thresholds are
    bound now: a job leaves the index under the rank it joined it with (a switch of settings
    brings in new ones)."""
    if config.order == "gittins":
        return None
    if config.order == "fifo":
        return lambda job: 0
    return functools.partial(_las_waiting_level, config.las_thresholds_gpu_s)
