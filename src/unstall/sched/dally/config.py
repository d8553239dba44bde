"""Dally's knobs, validated; the ablation switches turn single mechanisms off (or on)."""

from __future__ import annotations

from dataclasses import dataclass

from unstall.config import check, check_non_negative, check_positive

ORDERS = ("fifo", "las", "gittins")


# The named steps of Dally's decision, in the manner of the Kubernetes scheduler framework's
# extension points. Each round runs the round steps in this order: ``retype`` (several GPU
# types: running jobs move to a faster type or a consolidated block), ``pass`` (the waiting
# jobs in priority order, each placed if it may start), ``reconsolidate`` (one GPU type: spread
# running jobs move to a consolidated block). Within ``pass`` a job that finds no consolidated
# placement free tries the placement steps: ``locality-preemption`` (a sensitive job that fits
# a node clears one), ``priority-preemption``, ``service-preemption`` and ``delay`` (it holds
# out for a better level; off, it takes the best free one at once). On a cluster of several GPU
# types only, ``service-preemption-on-types`` runs as ``service-preemption`` does (see
# ``DallyConfig.service_preemption_on_types``).
ROUND_STEPS = ("retype", "pass", "reconsolidate")
PLACE_STEPS = (
    "locality-preemption",
    "priority-preemption",
    "service-preemption",
    "service-preemption-on-types",
    "delay",
)
STEPS = ROUND_STEPS + PLACE_STEPS


@dataclass(frozen=True, kw_only=True)
class DallyConfig:
    """Dally's knobs (the keyword options of ``make_policy("dally", ...)``). The switches turn
    its steps on and off (:attr:`steps`): ``delay``; ``preemption`` (every step that moves a
    running job); ``priority_preemption`` and ``service_preemption`` (one kind each);
    ``autotune`` (off by default) lets the delay factor move."""

    # Base order of the queue: arrival (fifo), least attained service (las, Tiresias-like), or
    # least expected remaining GPU-time given the service attained (gittins), learnt from the
    # run times of jobs that finished so far (never from the job's own duration).
    order: str = "gittins"
    # gittins: a job may preempt one expected to hold its GPUs this many times longer.
    preempt_ratio: float = 8.0
    # Priority preemption (gittins order; ``preemption`` off turns it off too): a waiting job
    # larger than a node that finds too few GPUs free may preempt running jobs expected to hold
    # their GPUs ``priority_ratio`` times longer than it (the longest-holding first) when the
    # wait it saves beats what they lose by ``gain_margin``, and only to start where it is not
    # slowed (by ``insensitive_below``). Without it, jobs larger than a node only waited while
    # smaller ones took the GPUs as they freed (BENCHMARKS.md, "Dally's settings, measured").
    priority_preemption: bool = True
    # 2 rather than ``preempt_ratio``'s 8: with run times capped at hours a running job is
    # rarely expected to need 8 times a new one's GPU-time.
    priority_ratio: float = 2.0
    # Preemption for service (Tiresias-like, off by default): a waiting job that finds too few
    # GPUs free preempts running jobs ranked strictly below it by ``order`` (las: a higher
    # service level; gittins: as ``preempt_ratio``), without weighing their cost
    # (sched/dally/service.py). The look-ahead (``dally``) turns it on per trace.
    service_preemption: bool = False
    # The same on a cluster of several GPU types only (a cluster of one type never runs it),
    # where it is on by default: there the fast type is the scarce resource, and a job that
    # finds no room on any type it may take would otherwise wait behind jobs that hold the fast
    # GPUs for a day (Gavel time-shares them in rounds instead). A waiting job that finds too
    # few GPUs free on its types preempts running jobs ranked below it (as above, at most
    # ``max_moves_per_job`` moves a victim); BENCHMARKS.md, "Heterogeneous clusters".
    service_preemption_on_types: bool = True
    # Preemption cost counts the wait that preempted jobs were seen to pay before running again
    # (else the mean wait of all starts).
    learn_requeue: bool = True
    las_thresholds_gpu_s: tuple[float, ...] = (3600.0, 36000.0)
    # gittins: the order ages. A group of waiting jobs (one size and service) ranks by its
    # expected GPU-time over ``1 + age_weight x wait / expected run time`` of its oldest job, so
    # a large job that smaller ones kept passing comes first once it has waited a few dozen
    # times what a job of its size is expected to run: without it, the one large job that
    # happens to run long sets the makespan (BENCHMARKS.md, "Dally's settings, measured").
    # 0 turns aging off.
    age_weight: float = 30.0
    # The mechanisms (ablations switch one: delay or preemption off, the auto-tuning on).
    delay: bool = True
    preemption: bool = True
    # Off by default: with long queues every wait looks dear to it, and it talks the factor
    # down until sensitive jobs start spread by the thousand (BENCHMARKS.md, as above).
    autotune: bool = False
    # Delay timers: a job holds out for a better locality level for up to
    # ``wait_factor x (slowdown at the level it would accept - 1) x expected run time`` seconds
    # (sched/dally/delay.py). 10 rather than 1-2 because a job's own account understates what
    # its spread start costs the others (BENCHMARKS.md, as above).
    wait_factor: float = 10.0
    # A cap on that wait (None: none); a cap started sensitive jobs spread by the thousand once
    # queues grew (BENCHMARKS.md, as above).
    max_wait_s: float | None = None
    # Whether a job that fits one rack may be started over several racks when no rack has room.
    # Off: a ring over racks crosses uplinks every such job shares, a cost the sensitivity
    # figures (measured alone) do not see (BENCHMARKS.md, as above).
    span_racks: bool = False
    # A job whose spread slowdown is below this is insensitive: it never waits.
    insensitive_below: float = 1.05
    # What the policy assumes a preemption or migration costs (seconds of lost progress); the
    # simulator's ``restore_s`` (simulate's) should match.
    restore_s: float = 60.0
    # Act only when the predicted gain is this many times the predicted cost (hysteresis).
    gain_margin: float = 2.0
    max_preemptions_per_round: int = 4
    max_preemption_attempts_per_round: int = 8
    max_migrations_per_round: int = 4
    # Churn: each move costs a job more than the last (its restore times its moves so far plus
    # one), and a job preempted or migrated this many times is never moved again to make room
    # for another (re-consolidation, for its own speed, is only made dearer).
    max_moves_per_job: int = 3
    # The cap for every move (issue 49): on, ``max_moves_per_job`` spares a job from preemption
    # for service too, and a job's own moves (re-consolidation, a faster type) stop one past
    # it, so no job is moved more than ``max_moves_per_job + 1`` times in any setting. Off: as
    # before, service preemption and a job's own moves were uncapped (1,811 preemptions and 13
    # moves of one job on heavy traces; its JCT cost: BENCHMARKS.md, "Dally's look-ahead tuner").
    cap_all_moves: bool = True
    # Running single-node jobs may be migrated to another node to clear room (else only
    # preempted, when outranked).
    move_victims: bool = True
    # Before any job has finished, the expected run time of a job (then the mean residual run
    # time of finished jobs of its size: sched/dally/history.py).
    prior_runtime_s: float = 3600.0
    # Auto-tuning of the delay factor: adjusted after this many starts; step; bounds.
    tune_every: int = 20
    tune_step: float = 1.5
    tune_min: float = 0.02
    tune_max: float = 20.0
    # Extra scheduling rounds this often while jobs wait (None: rounds only on events). Dally's
    # decisions change only with events, but for a failed preemption retry, which almost never
    # succeeds (BENCHMARKS.md, as above).
    tick_s: float | None = None
    # A job whose preemption attempt failed tries again after this share of the time it has
    # waited (at least ``retry_min_s``): running jobs age, so time alone can make a preemption
    # worth it, but a job that has waited for hours loses little by trying once an hour.
    retry_fraction: float = 0.25
    retry_min_s: float = 300.0

    @property
    def steps(self) -> tuple[str, ...]:
        """The names of the steps (:data:`STEPS`) these settings turn on, in their order."""
        gittins = self.order == "gittins"
        on = {
            "retype": self.preemption,
            "pass": True,
            "reconsolidate": self.preemption,
            "locality-preemption": self.preemption,
            "priority-preemption": self.preemption and self.priority_preemption and gittins,
            "service-preemption": (
                self.preemption and self.service_preemption and self.order != "fifo"
            ),
            "service-preemption-on-types": (
                self.preemption and self.service_preemption_on_types and self.order != "fifo"
            ),
            "delay": self.delay,
        }
        return tuple(name for name in STEPS if on[name])

    def __post_init__(self) -> None:
        check(self.order in ORDERS, self, "order", f"must be one of {ORDERS}")
        check_positive(
            self,
            gain_margin=self.gain_margin,
            preempt_ratio=self.preempt_ratio,
            priority_ratio=self.priority_ratio,
            prior_runtime_s=self.prior_runtime_s,
            tune_every=self.tune_every,
            tune_min=self.tune_min,
            retry_min_s=self.retry_min_s,
        )
        check(self.tick_s is None or self.tick_s > 0, self, "tick_s", "must be > 0 (or None)")
        check(
            self.max_wait_s is None or self.max_wait_s > 0,
            self,
            "max_wait_s",
            "must be > 0 (or None)",
        )
        check_non_negative(
            self,
            retry_fraction=self.retry_fraction,
            age_weight=self.age_weight,
            wait_factor=self.wait_factor,
            restore_s=self.restore_s,
            max_preemptions_per_round=self.max_preemptions_per_round,
            max_migrations_per_round=self.max_migrations_per_round,
            max_moves_per_job=self.max_moves_per_job,
        )
        check(self.insensitive_below >= 1.0, self, "insensitive_below", "must be >= 1")
        check(self.tune_step > 1.0, self, "tune_step", "must be > 1")
        check(self.tune_max >= self.tune_min, self, "tune_max", "must be >= tune_min")
