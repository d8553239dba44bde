"""Dally with a look-ahead tuner (the policy ``dally``): every tuning period it takes the
cluster as it is (running jobs with their placements and service, the queue), simulates the next
horizon under each candidate setting with this package's own engine as its model, and adopts
the best by the target (average JCT, or makespan).

What the model knows is what a live cluster knows: the snapshots the policy was shown. A job's
remaining run time is drawn from the run times of the jobs that have finished so far (its size
class's, longer than what it has run already; Dally's run history keeps them), never from the trace;
jobs arriving in the horizon are the last horizon's arrivals over again (their sizes, models and
network sensitivity), with run times drawn the same way; a job's speed on a placement is its
network sensitivity from its view (:class:`ViewSpeed`). The draws are the same for every
candidate (common random numbers), seeded by the tuner's seed and the tuning's count, so a run
is deterministic. It lives in ``sim`` because it runs the engine; ``sched`` reaches it through
the registry's factory, which imports this module only when such a policy is built.

``rank_by`` (``LookaheadConfig``) may rank the candidates by a backtest instead, or by both:
each replayed over the recent past with the real arrivals and the real run times of the jobs
that have finished since (:mod:`unstall.sim.lookahead_backtest`). Off by default: on traces like
the embedded one it ranked no better than the forecast, for about twice the simulation
(docs/sim.md, "Dally's look-ahead tuner").
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from unstall.loop.jobs import Job, JobState
from unstall.sched.base import ClusterSnapshot, Decision, PolicyBase, Start
from unstall.sched.dally import Dally, DallyConfig
from unstall.sched.dally.history import RunHistory
from unstall.sched.dally.lookahead_config import CANDIDATES, LookaheadConfig
from unstall.sched.registry import provide_factory
from unstall.sim.congestion import CongestionSchedule
from unstall.sim.engine import Engine, EngineSettings
from unstall.sim.forecast import Pinned
from unstall.sim.lookahead_adopt import ZERO, Outcome, PredictionChecks, choose
from unstall.sim.lookahead_backtest import PastRecord
from unstall.sim.lookahead_plan import Arrival, PlannedJob, plan_jobs
from unstall.sim.lookahead_speed import ViewSpeed

if TYPE_CHECKING:
    import pandas as pd

# A candidate that tied the current setting this many tunings in a row is simulated again only
# every REFRESH_EVERY-th tuning (see ``LookaheadDally._tune``).
TIES_TO_SKIP = 2
REFRESH_EVERY = 4
# A tuning draws another sample only while some candidate beats the current setting by this
# share of the margin (see ``LookaheadDally._tune``).
OPEN_SHARE = 1.0
# Setting a look-ahead up (its jobs, engine and policy) costs about as much as this many of
# its rounds (measured on the 2,000-job trace of benchmarks/dally_speed.py): counted in the
# tuner's cost (``LookaheadConfig.cost_share``).
SIM_OVERHEAD_ROUNDS = 10
# The backtest keeps the cluster's state this many times a window (``LookaheadConfig.backtest_s``):
# a backtest starts from the latest state at least a window back, so its window is at most a
# quarter longer than asked.
BACKTEST_STATES = 4
# A backtest over less of the past than this (the first minutes of a run) is not made.
MIN_BACKTEST_S = 600.0
# The backtest's draws are seeded apart from the forecast's.
BACKTEST_STREAM = 500_000_000


@dataclass(frozen=True, slots=True)
class TuneRecord:
    """One tuning: when, the predicted objective of each candidate, what was chosen, and the
    predicted gain of the choice over the setting it replaced (a share; 0 when kept)."""

    at_s: float
    scores: tuple[tuple[str, float], ...]
    chosen: str
    gain: float
    margin: float = 0.0  # the margin it had to beat (widened to its error and confidence)


def _pinned(inner: Dally, learnt: RunHistory, pinned: list[PlannedJob]) -> Pinned:
    """A candidate Dally in the look-ahead: its first round restarts the running jobs where
    they run (the cluster as it is); its reset starts it from what the real one learnt."""
    return Pinned(
        inner,
        tuple(Start(j.job_id, j.placement) for j in pinned),
        reset=lambda: inner.reset_from(learnt.copy()),
    )


def simulate_outcome(
    jobs: list[PlannedJob],
    config: DallyConfig,
    learnt: RunHistory,
    snapshot: ClusterSnapshot,
    lookahead: LookaheadConfig,
    seed: int,
) -> Outcome:
    """One candidate over one look-ahead: its objective (lower is better: ``jct``, the seconds
    jobs spend in the system within the horizon, jobs there now counted from 0; ``makespan``,
    when the last of them finishes, past the cap the cap plus its work left) and what the
    adoption rule weighs besides (:class:`~unstall.sim.lookahead_adopt.Outcome`)."""
    sim_jobs, rounds, stop = _run_horizon(jobs, config, learnt, snapshot, lookahead, seed)
    present = [(j, p) for j, p in zip(sim_jobs, jobs, strict=True) if p.arrive_s == 0.0]
    return Outcome(
        score=_objective(sim_jobs, jobs, stop, lookahead.target, snapshot.layout.total_gpus),
        present=sum(
            min(j.finish_s if j.state == JobState.DONE else stop, stop) for j, _ in present
        ),
        comm_s=sum(j.comm_overhead_s for j in sim_jobs),
        moves=sum(
            j.preemptions + j.migrations - p.preemptions
            for j, p in zip(sim_jobs, jobs, strict=True)
        ),
        rounds=rounds,
        present_jobs=len(present),
        present_done=sum(1 for j, _ in present if j.state == JobState.DONE),
    )


def _run_horizon(
    jobs: list[PlannedJob],
    config: DallyConfig,
    learnt: RunHistory,
    snapshot: ClusterSnapshot,
    lookahead: LookaheadConfig,
    seed: int,
) -> tuple[list[Job], int, float]:
    """One candidate's simulation over the horizon: its jobs as they ended (or not), the
    rounds it took and the stop time. Running jobs restart where they run; waiting ones arrive
    just after, with their own submit times, service and preemptions (relative to now)."""
    speed = ViewSpeed(snapshot.layout, snapshot.congestion)
    sim_jobs: list[Job] = []
    arrivals: list[float] = []
    for i, plan in enumerate(jobs):
        speed.sensitivities[(plan.model, plan.num_gpus)] = plan.sensitivity
        speed.type_speeds[(plan.model, plan.num_gpus)] = dict(plan.type_speeds)
        arrive = plan.arrive_s if plan.arrive_s > 0 or plan.placement else 1e-6
        job = Job(
            index=i,
            job_id=plan.job_id,
            submit_s=arrive,
            num_gpus=plan.num_gpus,
            duration_s=plan.remaining_s,
            model=plan.model,
            cons_iter_s=1.0,
            sensitivity=plan.sensitivity,
            type_speeds=plan.type_speeds,
        )
        job.attained_gpu_s = plan.attained_gpu_s
        job.preemptions = plan.preemptions
        if not plan.placement:
            job.submit_s = plan.submit_rel_s
            job.changed_s = plan.changed_rel_s
        sim_jobs.append(job)
        arrivals.append(arrive)
    pinned = [p for p in jobs if p.placement]
    stop = lookahead.horizon_s * (4.0 if lookahead.target == "makespan" else 1.0)
    engine = Engine(
        layout=snapshot.layout,
        speed=speed,
        policy=_pinned(Dally(config, name="lookahead"), learnt, pinned),
        jobs=sim_jobs,
        congestion=CongestionSchedule(times_s=(0.0,), fractions=(snapshot.congestion,)),
        settings=EngineSettings(restore_s=config.restore_s, tick_s=None, seed=seed),
        arrivals_s=arrivals,
    )
    return sim_jobs, engine.run(until_s=stop).rounds, stop


def _objective(
    sim_jobs: list[Job], jobs: list[PlannedJob], stop: float, target: str, gpus: int
) -> float:
    if target == "makespan":
        last = 0.0
        left = 0.0
        for job in sim_jobs:
            if job.state == JobState.DONE:
                last = max(last, job.finish_s)
            else:
                left += (job.work_iters - job.done_iters) * job.num_gpus
        return last if left == 0.0 else stop + left / max(gpus, 1)
    total = 0.0
    for job, plan in zip(sim_jobs, jobs, strict=True):
        end = job.finish_s if job.state == JobState.DONE else stop
        total += max(0.0, min(end, stop) - plan.arrive_s)
    return total


class LookaheadDally(PolicyBase):
    """Dally whose settings a look-ahead chooses online (see the module docstring); the
    settings' course is in the run's telemetry: ``tuner.choice`` (the index of the chosen
    candidate in ``config.names``), ``tuner.tunings`` (how many so far), ``tuner.predicted_gain``
    and ``tuner.score.NAME`` (each candidate's predicted objective over the current setting's,
    at the latest tuning); :func:`tuner_course` reads it back."""

    def __init__(
        self,
        config: LookaheadConfig | None = None,
        base: DallyConfig | None = None,
        *,
        name: str = "dally",
    ) -> None:
        self.config = config or LookaheadConfig()
        self.base = base or DallyConfig(restore_s=self.config.restore_s)
        self.name = name
        self.reset()

    def reset(self) -> None:
        # One Dally per candidate setting; the one in use hands its state (what it learnt,
        # every job's record, the queue) to the next when the look-ahead switches.
        self.dallys = {n: Dally(self.settings_of(n), name=self.name) for n in self.config.names}
        self.current = self.config.names[0]
        self.inner = self.dallys[self.current]
        self.tick_s = self.inner.tick_s
        self.history: list[TuneRecord] = []
        self._arrivals: deque[Arrival] = deque()
        self._seen: set[str] = set()
        self._ties: dict[str, int] = {}  # tunings in a row a candidate tied the current one
        # Its cost, in scheduling rounds: the run's own so far, and its look-aheads' (each with
        # its set-up: SIM_OVERHEAD_ROUNDS; a deterministic measure of work, unlike wall time).
        self.rounds = 0
        self.lookahead_rounds = 0
        self._period_s = self.config.period_s
        self._next_tune_s = self.config.period_s
        self._telemetry: tuple[tuple[str, float], ...] = (("tuner.choice", 0.0),)
        self.checks = PredictionChecks(window=self.config.error_window)
        c = self.config
        self._past = PastRecord(c.backtest_s, c.backtest_s / BACKTEST_STATES, c.max_jobs)

    def wait_reasons(self, snapshot: ClusterSnapshot) -> dict[str, str]:
        """The Dally in use's reasons (:meth:`Dally.wait_reasons`)."""
        return self.inner.wait_reasons(snapshot)

    def forecast_policy(self) -> Dally:
        """What a forecast of this policy runs (the service's estimates): Dally with the
        setting in use, without look-aheads of its own."""
        return Dally(self.settings_of(self.current), name=self.name)

    def settings_of(self, candidate: str) -> DallyConfig:
        """The Dally settings of the candidate called ``candidate``."""
        return replace(self.base, **CANDIDATES[candidate])

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        self._note_arrivals(snapshot)
        self.checks.observe(snapshot)
        if self.config.rank_by != "forecast":
            self._past.observe(snapshot)
        self.rounds += 1
        if snapshot.now >= self._next_tune_s and snapshot.queued:
            c = self.config
            if (
                len(self.history) < c.free_tunings
                or self.lookahead_rounds <= c.cost_share * self.rounds
            ):
                self._tune(snapshot)
            else:  # over its budget: the setting stays a period longer
                self._next_tune_s = snapshot.now + self._period_s
        decision = self.inner.decide(snapshot, rng)
        return replace(decision, telemetry=decision.telemetry + self._telemetry)

    def _note_arrivals(self, snapshot: ClusterSnapshot) -> None:
        """Keep the last horizon's arrivals: the jobs new to the queue, from its newest end."""
        fresh: list[tuple[str, Arrival]] = []
        for view in reversed(snapshot.queued):
            if view.job_id in self._seen:
                break
            self._seen.add(view.job_id)
            arrival = Arrival(
                view.submit_s, view.num_gpus, view.model, view.sensitivity, view.type_speeds
            )
            fresh.append((view.job_id, arrival))
        for job_id, arrival in reversed(fresh):
            self._arrivals.append(arrival)
            if self.config.rank_by != "forecast":
                self._past.note_arrival(job_id, arrival)
        oldest = snapshot.now - self.config.horizon_s
        while self._arrivals and self._arrivals[0].submit_s < oldest:
            self._arrivals.popleft()

    def _tune(self, snapshot: ClusterSnapshot) -> None:
        c = self.config
        tuning = len(self.history)
        # Reuse between periods: a candidate that scored exactly as the current setting in
        # the last TIES_TO_SKIP tunings (it makes the same decisions on this trace: the delay
        # factor, say, where no job is held back) is taken to tie again, and simulated only
        # every REFRESH_EVERY-th tuning.
        names = [
            n
            for n in c.names
            if n == self.current
            or self._ties.get(n, 0) < TIES_TO_SKIP
            or tuning % REFRESH_EVERY == 0
        ]
        if names == [self.current]:
            # Every other candidate is taken to tie: nothing to simulate, the setting stays.
            self._keep_unranked(snapshot.now)
            return
        margin = max(c.margin, c.error_weight * self.checks.error)
        totals = dict.fromkeys(c.names, ZERO)
        held = samples = 0
        forecast: dict[str, Outcome] | None = None
        forecast_samples = 0
        if c.rank_by != "backtest":
            forecast, held, samples = self._look_ahead(
                snapshot,
                names,
                margin,
                lambda rng: plan_jobs(snapshot, self.inner.history, list(self._arrivals), c, rng),
                c,
                c.seed * 1_000_003 + tuning * 1_009,
            )
            forecast_samples = samples
            totals = dict(forecast)
        start = self._past.start(snapshot.now) if c.rank_by != "forecast" else None
        if start is not None and snapshot.now - start.at_s >= MIN_BACKTEST_S:
            past, past_held, past_samples = self._look_ahead(
                start.as_snapshot(),
                names,
                margin,
                lambda rng: self._past.plan(start, snapshot, self.inner.history, rng),
                replace(c, horizon_s=snapshot.now - start.at_s),
                c.seed * 1_000_003 + tuning * 1_009 + BACKTEST_STREAM,
            )
            totals = {n: totals[n] + past[n] for n in c.names}
            held += past_held
            samples += past_samples
        if not samples:
            # A backtest with no past to replay yet (the first minutes of a run): no ranking.
            self._keep_unranked(snapshot.now)
            return
        for name in c.names:
            if name not in names:
                totals[name] = totals[self.current]
            elif name != self.current:
                tied = totals[name].score == totals[self.current].score
                self._ties[name] = self._ties.get(name, 0) + 1 if tied else 0
        now_score = totals[self.current].score
        chosen, gain, wide = choose(totals, self.current, held, samples, margin, c)
        if chosen != self.current:
            self.current = chosen
            self._ties = {}
            self.dallys[chosen].continue_from(self.inner)
            self.inner = self.dallys[chosen]
        if forecast is not None:
            # The forecast's prediction for the jobs there now is checked once its horizon
            # has passed (the backtest's needs no check: it replays what happened).
            stop = c.horizon_s * (4.0 if c.target == "makespan" else 1.0)
            present = [v.job_id for v in (*snapshot.running, *list(snapshot.queued)[: c.max_jobs])]
            predicted = forecast[chosen].present / forecast_samples
            self.checks.expect(snapshot.now, snapshot.now + stop, present, predicted)
        scores = tuple((n, totals[n].score / now_score if now_score > 0 else 1.0) for n in c.names)
        self._record(TuneRecord(snapshot.now, scores, chosen, gain, wide))

    def _keep_unranked(self, at_s: float) -> None:
        """A tuning at ``at_s`` that simulated nothing: every candidate scored as the current
        setting, which stays."""
        c = self.config
        scores = tuple((n, 1.0) for n in c.names)
        self._record(TuneRecord(at_s, scores, self.current, 0.0, c.margin))

    def _look_ahead(
        self,
        snapshot: ClusterSnapshot,
        names: list[str],
        margin: float,
        plan: Callable[[random.Random], list[PlannedJob]],
        config: LookaheadConfig,
        stream: int,
    ) -> tuple[dict[str, Outcome], int, int]:
        """Each of ``names`` simulated from ``snapshot`` over ``config``'s horizon on the same
        draws (``plan``'s jobs, seeded by ``stream`` and the draw's count): their summed
        outcomes (the others at zero), the jobs the look-aheads held and the draws made. A
        second draw is made only while the choice is open: some candidate within the bounds
        beats the current setting by OPEN_SHARE of ``margin`` on the draws so far."""
        c = self.config
        totals = dict.fromkeys(c.names, ZERO)
        held = samples = 0
        while samples < c.samples:
            rng = random.Random(stream + samples)
            jobs = plan(rng)
            held += len(jobs)
            for name in names:
                outcome = simulate_outcome(
                    jobs,
                    self.settings_of(name),
                    self.inner.history,
                    snapshot,
                    config,
                    c.seed + samples,
                )
                totals[name] += outcome
                self.lookahead_rounds += outcome.rounds + SIM_OVERHEAD_ROUNDS
            samples += 1
            so_far = {n: totals[n] for n in names}
            if choose(so_far, self.current, held, samples, OPEN_SHARE * margin, c)[0] == (
                self.current
            ):
                break
        return totals, held, samples

    def _record(self, record: TuneRecord) -> None:
        """Keep ``record`` of the tuning just done, set when the next is due (a period that
        keeps the setting doubles: :class:`LookaheadConfig`) and report it as telemetry."""
        c = self.config
        if record.gain > 0.0:  # it switched
            self._period_s = c.period_s
        else:
            self._period_s = min(2 * self._period_s, c.max_period_s)
        self._next_tune_s = record.at_s + self._period_s
        self.history.append(record)
        self._telemetry = (
            ("tuner.tunings", float(len(self.history))),
            ("tuner.choice", float(c.names.index(record.chosen))),
            ("tuner.predicted_gain", record.gain),
            ("tuner.margin", record.margin),
            ("tuner.error", self.checks.error),
            *((f"tuner.score.{n}", s) for n, s in record.scores),
        )


@dataclass(frozen=True, slots=True)
class TunerCourse:
    """What a run's look-ahead tuner did, from its telemetry: how many tunings, each switch
    (trace seconds, the candidate chosen, the predicted gain of the switch) and the setting it
    started with."""

    tunings: int
    first: str
    switches: tuple[tuple[float, str, float], ...]

    @property
    def final(self) -> str:
        """The setting the run ended with."""
        return self.switches[-1][1] if self.switches else self.first

    def describe(self) -> str:
        """One line: what the tuner chose, and when."""
        count = f"{self.tunings} tuning{'' if self.tunings == 1 else 's'}"
        if not self.switches:
            return f"{count}, kept {self.first} (no candidate predicted better by the margin)"
        moves = ", ".join(
            f"{name} at {at_s / 3600:.1f} h (predicted {gain:.1%} better)"
            for at_s, name, gain in self.switches
        )
        return f"{count}, started {self.first}, switched to {moves}"


def tuner_course(telemetry: pd.DataFrame) -> TunerCourse | None:
    """The tuner's course in a run's telemetry (``time_s, name, value`` rows, the engine's step
    functions); None when the run had no look-ahead tuner. The candidates' names come from the
    ``tuner.score.NAME`` rows, in the order the tuner reports them (its ``names``)."""
    if not len(telemetry) or not (telemetry["name"] == "tuner.choice").any():
        return None
    names = list(
        dict.fromkeys(
            str(n).removeprefix("tuner.score.")
            for n in telemetry["name"]
            if str(n).startswith("tuner.score.")
        )
    )
    candidates = names or list(CANDIDATES)

    def name_of(value: float) -> str:
        index = int(value)
        return candidates[index] if 0 <= index < len(candidates) else str(index)

    choices = telemetry[telemetry["name"] == "tuner.choice"]
    gains = telemetry[telemetry["name"] == "tuner.predicted_gain"]
    tunings = telemetry.loc[telemetry["name"] == "tuner.tunings", "value"]
    switches = []
    for at_s, value in zip(choices["time_s"].iloc[1:], choices["value"].iloc[1:], strict=True):
        gain = gains.loc[gains["time_s"] <= at_s, "value"]  # the gain of the latest tuning
        switches.append((float(at_s), name_of(value), float(gain.iloc[-1]) if len(gain) else 0.0))
    return TunerCourse(
        tunings=int(tunings.max()) if len(tunings) else 0,
        first=name_of(choices["value"].iloc[0]),
        switches=tuple(switches),
    )


# ``dally`` in the policy registry is Dally with this look-ahead: ``sim`` provides its builder
# (``sched`` never imports ``sim``).
provide_factory("dally", LookaheadDally)
