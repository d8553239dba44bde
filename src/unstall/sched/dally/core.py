"""What every part of Dally shares: its settings, its state (:mod:`~unstall.sched.dally.state`),
the steps its settings turn on, and the small tests each step asks (may a job try a kind of
preemption now, is it sensitive, where would it go if not consolidated)."""

from __future__ import annotations

from unstall.sched.base import JobView, Placement, PolicyBase
from unstall.sched.dally.config import ROUND_STEPS, DallyConfig
from unstall.sched.dally.history import RunHistory
from unstall.sched.dally.sensitivity import is_sensitive
from unstall.sched.dally.state import DallyState, Round
from unstall.sched.free import FreeGpus
from unstall.sched.placement import Locality


class DallyBase(PolicyBase):
    """Dally's settings (``config``), the steps they turn on (``steps``: names of
    :data:`~unstall.sched.dally.config.STEPS`) and its state; ``name`` labels the results."""

    def __init__(self, config: DallyConfig | None = None, name: str = "dally") -> None:
        self.config = config or DallyConfig()
        self.name = name
        self.tick_s = self.config.tick_s  # PolicyBase's, from the config
        self.steps = frozenset(self.config.steps)
        self.round_steps = tuple(n for n in self.config.steps if n in ROUND_STEPS)
        self.reset()

    def reset(self) -> None:
        self.reset_from(RunHistory(prior_runtime_s=self.config.prior_runtime_s))

    def reset_from(self, history: RunHistory) -> None:
        """Start a run afresh, from what ``history`` has learnt (a look-ahead's model of the
        policy starts from the policy's)."""
        self.state = DallyState(self.config, history)

    def continue_from(self, other: DallyBase) -> None:
        """Go on with ``other``'s run under this Dally's settings from the next round: its
        state (what it learnt, every job's record, the queue) is handed over and shared. The
        look-ahead switches settings this way (:mod:`unstall.sim.lookahead`)."""
        self.state = other.state
        self.state.switch_to(self.config)

    @property
    def history(self) -> RunHistory:
        """The run times and waits learnt so far."""
        return self.state.history

    def _expected_gpu_s(self, job: JobView, now: float) -> float:
        """GPU-seconds the job is expected to hold still, from finished jobs of its size."""
        return job.num_gpus * self.state.expected.of(job, now)

    def _sensitive(self, job: JobView, congestion: float) -> bool:
        """:func:`is_sensitive` of a waiting job, kept while the congestion stays the same."""
        record = self.state.record(job.job_id)
        known = record.sensitive_at
        if known is None or known[0] != congestion:
            known = (congestion, is_sensitive(job, self.config.insensitive_below, congestion))
            record.sensitive_at = known
        return known[1]

    def _fallback(self, job: JobView, free: FreeGpus) -> Placement | None:
        """The least-bad placement free now: within one rack if possible, else anywhere, but
        over several racks only for a job that no rack can hold, unless ``span_racks``."""
        found = free.at_level(Locality.RACK, job.num_gpus)
        if found is not None or not (
            self.config.span_racks or job.num_gpus > max(free.layout.rack_gpus)
        ):
            return found
        return free.best(job.num_gpus)

    def _may_try_preemption(self, job: JobView, free: FreeGpus, now: float) -> bool:
        """Whether ``job`` may seek a node by preemption for locality now: it fits one node,
        and it is not waiting out a retry after a failed attempt (see ``_preempt_for``)."""
        return (
            "locality-preemption" in self.steps
            and job.num_gpus <= free.layout.gpus_per_node
            and now >= self.state.retry_at(job.job_id, now)
        )

    def _may_try_priority(self, job: JobView, free: FreeGpus, now: float) -> bool:
        """Whether ``job`` may seek GPUs by priority preemption now (see
        :meth:`_preempt_for_priority`; the step is on in the gittins order only): the job is
        larger than a node, and it is not waiting out a retry after a failed attempt. Only jobs
        larger than a node: they need several nodes' GPUs free at once, which the smaller jobs
        behind them keep taking as they free, while a job that fits a node gets one as soon as
        any tenant of it finishes (or, if sensitive, by the preemption for locality); letting
        every job preempt for priority gained nothing more and cost time (BENCHMARKS.md,
        "Dally against the baselines")."""
        return (
            "priority-preemption" in self.steps
            and job.num_gpus > free.layout.gpus_per_node
            and now >= self.state.retry_at(job.job_id, now)
        )

    def _may_try_service(self, job: JobView, free: FreeGpus, now: float) -> bool:
        """Whether ``job`` may seek GPUs by preemption for service now (see
        :mod:`~unstall.sched.dally.service`; the step is on in the orders by service only, and
        ``service-preemption-on-types`` on a cluster of several GPU types): it finds too few
        GPUs free, and it is not waiting out a retry after a failed attempt."""
        steps = self.steps
        return (
            (
                "service-preemption" in steps
                or ("service-preemption-on-types" in steps and not free.layout.one_type)
            )
            and job.num_gpus > free.total
            and now >= self.state.retry_at(job.job_id, now)
        )

    def _preemptions_spent(self, plan: Round) -> bool:
        """Whether this round's preemption budget is spent (moves made, or jobs that sought
        room): each attempt looks at every running job, so the work per round is bounded."""
        c = self.config
        return (
            len(plan.preempts) + len(plan.migrations) >= c.max_preemptions_per_round
            or plan.attempts >= c.max_preemption_attempts_per_round
        )

    def _retry_after_failure(self, job: JobView, now: float) -> None:
        """A failed preemption attempt (of any kind) is tried again after a share of the time
        the job has waited so far (at least ``retry_min_s``): running jobs age (their expected
        remaining time changes), so it may succeed later even if nothing else changes, but a
        job that has waited for hours loses little by trying once an hour, and the work stays
        small."""
        c = self.config
        self.state.retry_later(
            job.job_id, now + max(c.retry_min_s, c.retry_fraction * job.waiting_s(now))
        )
