"""What the look-ahead (:mod:`unstall.sim.lookahead`) adopts, and how far it trusts itself.

A candidate setting replaces the current one only when its predicted objective is better by
more than the margin, without raising what Dally is for beyond a bound: its predicted
communication overhead (time lost to spread placements) at most ``comm_bound`` over the current
setting's, its moves (preemptions and migrations) at most ``churn_bound`` a job more than the
current setting's (and one a sample), plus ``churn_per_gain`` a job for each unit of the
relative gain it predicts: churn must buy its gain. (On heavy traces the candidates that then
lost to ``dally-fixed`` added 0.36-0.47 moves a job for 2-4% predicted; on traces like the
embedded one, those that won added 0.01-0.25 for 5-30%: BENCHMARKS.md, "Dally's look-ahead tuner".)

The margin is the configured one, widened to the look-ahead's own prediction error: each
tuning's prediction for the jobs there at that instant (the time they spend in the system over
the next horizon, under the setting then adopted) is checked against what then happened in the
run, and the margin is at least ``error_weight`` times the mean relative error of the last
``error_window`` checks.

It is then widened to the look-ahead's confidence (``confidence``, on by default): divided by
the share of the jobs there at the instant that finish within the horizon in the look-ahead
(the larger of the current setting's and the candidate's, at least ``MIN_SEEN_SHARE``). A
look-ahead sees what a setting does to a job only when the job finishes within it: where jobs
run for days, a horizon of hours sees mostly waits (7% of the present jobs finished on the
heavy Gavel-like traces), and the 2-4% it predicted for a switch turned into losses of up to
9%; on traces like the embedded one it sees 30-100% finish, and a switch that predicts 5% still
passes a margin of 2-7%. The candidate's share counts too: a setting that frees a cluster held
by a long job for the short ones waiting sees them finish, though the current setting sees
none. (The error, a figure of the absolute time in system that the candidates mostly share,
could not tell the two kinds of trace apart: BENCHMARKS.md, "Dally's look-ahead tuner".)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from unstall.sched.base import ClusterSnapshot
from unstall.sched.dally.lookahead_config import LookaheadConfig


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """One candidate's simulated horizon: its objective (``score``), the part of the ``jct``
    objective of the jobs there at the tuning instant (``present``), the communication overhead
    (seconds lost to spread placements, all jobs), the moves it made (preemptions and
    migrations) and the scheduling rounds it took."""

    score: float
    present: float
    comm_s: float
    moves: int
    rounds: int
    present_jobs: int = 0
    present_done: int = 0

    def __add__(self, other: Outcome) -> Outcome:
        return Outcome(
            score=self.score + other.score,
            present=self.present + other.present,
            comm_s=self.comm_s + other.comm_s,
            moves=self.moves + other.moves,
            rounds=self.rounds + other.rounds,
            present_jobs=self.present_jobs + other.present_jobs,
            present_done=self.present_done + other.present_done,
        )


ZERO = Outcome(score=0.0, present=0.0, comm_s=0.0, moves=0, rounds=0)

# The least share of the present jobs a look-ahead is taken to see finish (``confident_margin``):
# a look-ahead that sees none finish widens its margin 20 times, not without bound.
MIN_SEEN_SHARE = 0.05


def within_bounds(
    candidate: Outcome, current: Outcome, jobs: int, samples: int, config: LookaheadConfig
) -> bool:
    """Whether ``candidate`` raises neither the communication overhead nor the churn beyond
    the bounds over ``current`` (``jobs``: how many the look-ahead held, summed over its
    ``samples``; one move more a sample is always allowed, or no small look-ahead could ever
    preempt)."""
    comm_ok = candidate.comm_s <= (1.0 + config.comm_bound) * current.comm_s + 1e-9
    gain = max(0.0, 1.0 - candidate.score / current.score) if current.score > 0 else 0.0
    allowed = (config.churn_bound + config.churn_per_gain * gain) * jobs + samples
    churn_ok = candidate.moves - current.moves <= allowed
    return comm_ok and churn_ok


def seen_share(outcome: Outcome) -> float:
    """The share of the jobs there at the tuning instant that finished within the horizon in
    ``outcome``'s look-ahead (1 when it held none)."""
    return outcome.present_done / outcome.present_jobs if outcome.present_jobs else 1.0


def confident_margin(
    margin: float, current: Outcome, candidate: Outcome, config: LookaheadConfig
) -> float:
    """The margin ``candidate`` must beat ``current`` by: ``margin`` over the larger share of
    the jobs there now that finish within the horizon under either (at least
    ``MIN_SEEN_SHARE``), with ``config.confidence``; else ``margin`` itself."""
    if not config.confidence:
        return margin
    return margin / max(seen_share(current), seen_share(candidate), MIN_SEEN_SHARE)


def choose(
    outcomes: Mapping[str, Outcome],
    current: str,
    jobs: int,
    samples: int,
    margin: float,
    config: LookaheadConfig,
) -> tuple[str, float, float]:
    """The setting to run next, its predicted gain over ``current`` (0 when kept) and the
    margin the best candidate had to beat: the best score among the candidates within the
    bounds, when it beats ``current``'s by more than ``margin`` (a share) widened to the
    look-ahead's confidence (:func:`confident_margin`)."""
    now = outcomes[current]
    allowed = [
        n
        for n, o in outcomes.items()
        if n == current or within_bounds(o, now, jobs, samples, config)
    ]
    best = min(allowed, key=lambda n: (outcomes[n].score, n != current))
    gain = (now.score - outcomes[best].score) / now.score if now.score > 0 else 0.0
    wide = confident_margin(margin, now, outcomes[best], config)
    if best == current or gain <= wide:
        return current, 0.0, wide
    return best, gain, wide


@dataclass
class _Check:
    at_s: float
    until_s: float
    job_ids: frozenset[str]
    predicted: float


@dataclass
class PredictionChecks:
    """The look-ahead's past predictions, checked against what then happened: each is the time
    the jobs there at a tuning spend in the system over the horizon after it; once the horizon
    has passed, the run's own figure (from the finishes the snapshots reported) is compared."""

    window: int
    _pending: deque[_Check] = field(default_factory=deque)
    _finished_at: dict[str, float] = field(default_factory=dict)
    errors: deque[float] = field(default_factory=deque)

    def expect(self, at_s: float, until_s: float, job_ids: Iterable[str], predicted: float) -> None:
        """Record a prediction made at ``at_s`` for ``job_ids`` up to ``until_s``."""
        if predicted > 0.0:
            self._pending.append(_Check(at_s, until_s, frozenset(job_ids), predicted))

    def observe(self, snapshot: ClusterSnapshot) -> None:
        """Note the finishes ``snapshot`` reports; check every prediction whose horizon has
        passed."""
        if not self._pending:
            return
        for view in snapshot.finished:
            self._finished_at[view.job_id] = snapshot.now
        while self._pending and self._pending[0].until_s <= snapshot.now:
            check = self._pending.popleft()
            until = check.until_s
            happened = sum(
                min(self._finished_at.get(j, until), until) - check.at_s for j in check.job_ids
            )
            if happened > 0.0:
                self.errors.append(abs(happened - check.predicted) / happened)
                while len(self.errors) > self.window:
                    self.errors.popleft()
        if not self._pending:
            self._finished_at.clear()

    @property
    def error(self) -> float:
        """The mean relative error of the last checks (0 before any)."""
        return sum(self.errors) / len(self.errors) if self.errors else 0.0
