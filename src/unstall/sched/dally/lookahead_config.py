"""The knobs of Dally's look-ahead tuner (the policy ``dally``; ``dally-fixed`` is Dally without
it), and its candidate settings. Plain data: the tuner itself simulates, so it lives above ``sched``
(:mod:`unstall.sim.lookahead`); the registry reaches it through a factory that imports it only
when such a policy is built."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from unstall.config import check, check_positive
from unstall.sched.dally.config import DallyConfig

# Each candidate: DallyConfig options over the defaults. "default" is Dally as it is; the
# others move one knob the issue names (#39): the delay factor, the queue order, preemption
# for service (Tiresias-like).
CANDIDATES: dict[str, dict[str, Any]] = {
    "default": {},
    "eager": {"wait_factor": 1.0},
    "patient": {"wait_factor": 30.0},
    "las-service": {"order": "las", "service_preemption": True},
    # The order named, not left to the base setting's: the name says which order it is.
    "gittins-service": {"order": "gittins", "service_preemption": True},
}
TARGETS = ("jct", "makespan")
# What ranks the candidates at a tuning: the forward look-ahead, the backtest over the recent
# past, or both summed (``LookaheadConfig.rank_by``).
RANKINGS = ("forecast", "backtest", "both")


@dataclass(frozen=True, kw_only=True)
class LookaheadConfig:
    """The look-ahead tuner's options (part of ``make_policy("dally", ...)``'s): every
    ``period_s`` (trace seconds) the tuner simulates the next ``horizon_s`` from the cluster as
    it is under each of ``candidates`` (names of :data:`CANDIDATES`) with run times drawn from
    finished jobs (``samples`` draws, the same for every candidate), and adopts the best by
    ``target`` (``jct``: the time jobs spend in the system over the horizon, what average JCT
    sums; ``makespan``: when the jobs there now are all done) when it beats the current setting
    by ``margin`` (a share, widened to its measured prediction error and to the share of the
    jobs there now that it sees finish within the horizon: ``confidence``) without raising the
    communication overhead or the moves beyond ``comm_bound`` and ``churn_bound``. A period
    that keeps the setting doubles the next (up to ``max_period_s``): the look-ahead is redone
    less often while its answer holds.
    ``max_jobs``: waiting jobs beyond this many (the newest) are left out of the look-ahead."""

    # Comma-separated names of CANDIDATES (text, so that a command line can name them); the
    # first is the setting a run starts with: gittins-service, the fixed setting best on the
    # most traces like the embedded one and better than Dally's defaults on every heavy
    # Gavel-like trace, where a look-ahead's switch is least to be trusted (it started from
    # "default" before 2026-11-29). "patient" and "eager" are left out by default: "patient"
    # won no trace that "default" did not, and the tuner chose "eager" in none of 145 runs (40
    # traces like the embedded one, the regime map, the heavy traces), where leaving it out
    # made the same choices for about a fifth less simulation (benchmarks/BENCHMARKS.md,
    # "Dally's look-ahead tuner"). The other defaults were chosen there against variants (fewer
    # samples, a longer horizon with more jobs: no closer to the best fixed setting, and
    # dearer).
    candidates: str = "gittins-service,default,las-service"
    target: str = "jct"
    period_s: float = 3600.0
    max_period_s: float = 16 * 3600.0
    horizon_s: float = 2 * 3600.0
    samples: int = 2
    margin: float = 0.02
    max_jobs: int = 150
    seed: int = 0
    # Cost cap: past its first ``free_tunings`` tunings, a tuning that falls due is skipped (the
    # setting stays a period longer) while the rounds simulated by the look-aheads so far
    # exceed ``cost_share`` times the run's own rounds (rounds measure simulation work
    # deterministically, wall time does not). A tuning costs about as much on a short trace as
    # on a long one, so the free tunings are a small share of a long run, while a shorter one
    # is tuned in full. They must outlast a trace's idle start: tunings where every candidate
    # ties (the cluster has room) count too, and too few free ones left a tuner capped before
    # its queue built up. Measured: BENCHMARKS.md, "Dally's look-ahead tuner".
    cost_share: float = 0.1
    free_tunings: int = 30
    # Passed to every candidate's Dally (and so the same as the simulator's restore_s).
    restore_s: float = 60.0
    # What Dally is for bounds what the look-ahead adopts (issue 49; sim/lookahead_adopt.py): a
    # candidate's predicted communication overhead at most ``comm_bound`` (a share) over the
    # current setting's, its moves at most ``churn_bound`` a job (and one a sample) over
    # the current setting's.
    comm_bound: float = 0.02
    churn_bound: float = 0.05
    # ... plus this many moves a job for each unit of relative gain predicted.
    churn_per_gain: float = 5.0
    # The margin is widened to ``error_weight`` times the look-ahead's own prediction error,
    # measured against what then happened in the run (mean of the last ``error_window``
    # checks); 0 keeps it at ``margin``. The error measured is of the time in system itself
    # (30-70% early in a trace, 1-2% on long queues), most of which the candidates share
    # (common random numbers): weighed whole, it kept the tuner from nearly every switch that
    # paid on traces like the embedded one (BENCHMARKS.md, "Dally's look-ahead tuner").
    error_weight: float = 0.1
    error_window: int = 8
    # The margin is widened to the look-ahead's confidence: divided by the share of the jobs
    # there now that it sees finish within the horizon (the larger under the current setting
    # or the candidate; sim/lookahead_adopt.py). Where jobs run for days, a 2 h look-ahead
    # sees few finish (7% on the heavy Gavel-like traces) and its gain is a reshuffle of
    # waits that did not pay; on traces like the embedded one it sees 30-100% finish.
    confidence: bool = True
    # What ranks the candidates: ``forecast``, the forward look-ahead above; ``backtest``, each
    # candidate replayed over the last ``backtest_s`` of the run (from the cluster as it was
    # then, with the real arrivals since and the real run times of the jobs that have finished
    # since: sim/lookahead_backtest.py); ``both``, the two outcomes summed. ``forecast`` by
    # default: over 120 runs of traces like the embedded one (40 traces, 3 draws of their
    # congestion) a 4 h backtest scored 0.995 ± 0.087 of the forecast's average JCT run by run
    # (a standard error of 0.008), ``both`` the same, for about twice the simulation; a 12 h
    # one 0.990 (40 runs) for four times it (benchmarks/BENCHMARKS.md, "Dally's look-ahead
    # tuner").
    rank_by: str = "forecast"
    backtest_s: float = 2 * 3600.0

    def __post_init__(self) -> None:
        check(isinstance(self.candidates, str), self, "candidates", "comma-separated names")
        check(bool(self.names), self, "candidates", "name at least one")
        check(len(set(self.names)) == len(self.names), self, "candidates", "named twice")
        unknown = [c for c in self.names if c not in CANDIDATES]
        check(not unknown, self, "candidates", f"unknown {unknown}; known: {list(CANDIDATES)}")
        check(self.target in TARGETS, self, "target", f"must be one of {TARGETS}")
        check_positive(
            self,
            period_s=self.period_s,
            horizon_s=self.horizon_s,
            samples=self.samples,
            max_jobs=self.max_jobs,
        )
        check(self.cost_share >= 0, self, "cost_share", "must be >= 0")
        check(self.free_tunings >= 0, self, "free_tunings", "must be >= 0")
        check(self.max_period_s >= self.period_s, self, "max_period_s", "must be >= period_s")
        check(self.margin >= 0, self, "margin", "must be >= 0")
        check(self.restore_s >= 0, self, "restore_s", "must be >= 0")
        check(self.comm_bound >= 0, self, "comm_bound", "must be >= 0")
        check(self.churn_bound >= 0, self, "churn_bound", "must be >= 0")
        check(self.churn_per_gain >= 0, self, "churn_per_gain", "must be >= 0")
        check(self.error_weight >= 0, self, "error_weight", "must be >= 0")
        check(self.error_window >= 1, self, "error_window", "must be >= 1")
        check(self.rank_by in RANKINGS, self, "rank_by", f"must be one of {RANKINGS}")
        check(
            self.rank_by == "forecast" or self.target == "jct",
            self,
            "rank_by",
            "a backtest ranks by the time in system (target jct) only",
        )
        check_positive(self, backtest_s=self.backtest_s)

    @property
    def names(self) -> tuple[str, ...]:
        """The candidates' names, in the order given."""
        return tuple(n.strip() for n in self.candidates.split(",") if n.strip())


@dataclass(frozen=True, kw_only=True)
class DallyOptions(LookaheadConfig, DallyConfig):
    """Options of ``make_policy("dally", ...)``: Dally's own (:class:`DallyConfig`), the base
    setting whose knobs each candidate of the look-ahead tuner moves (``default`` is the base as
    given), and the tuner's (:class:`LookaheadConfig`). ``restore_s`` is both's, with one
    meaning: what a restore from a checkpoint costs, to Dally's decisions and to the
    look-ahead's engine. Dally without the tuner, the base setting throughout, is the policy
    ``dally-fixed`` (options: :class:`DallyConfig`)."""

    def __post_init__(self) -> None:
        DallyConfig.__post_init__(self)
        LookaheadConfig.__post_init__(self)

    def split(self) -> tuple[LookaheadConfig, DallyConfig]:
        """The tuner's options and the base Dally setting."""
        return (
            LookaheadConfig(**{f.name: getattr(self, f.name) for f in fields(LookaheadConfig)}),
            DallyConfig(**{f.name: getattr(self, f.name) for f in fields(DallyConfig)}),
        )
