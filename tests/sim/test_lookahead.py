"""Dally's look-ahead tuner (``dally``): it picks what a planted scenario makes best, it
never reads true durations, its course is in the telemetry, it is deterministic, and it needs
nothing a live backend does not give (plain snapshots through ``decide``)."""

from __future__ import annotations

import dataclasses
import random
import subprocess
import sys

import pytest

from snapshots import job_view
from unstall.errors import ConfigError
from unstall.sched import make_policy, resolve_policy
from unstall.sched.base import ClusterLayout, ClusterSnapshot, JobView, Sensitivity
from unstall.sched.dally import Dally, DallyConfig
from unstall.sched.dally.lookahead_config import LookaheadConfig
from unstall.sched.options import missing_policy_members
from unstall.sim import simulate
from unstall.sim.lookahead import LookaheadDally, simulate_outcome, tuner_course
from unstall.sim.lookahead_plan import draw_remaining_s, plan_jobs
from unstall.traces import SyntheticTraceConfig, generate

LAYOUT = ClusterLayout.regular(racks=1, nodes_per_rack=1, gpus_per_node=4)
FLAT = Sensitivity.flat(1.0, 1.0)


def view(jid: str, gpus: int, *, running: bool, attained: float = 0.0, **extra: float) -> JobView:
    return job_view(
        jid,
        gpus,
        sensitivity=FLAT,
        attained=attained,
        changed_s=100_000.0 if running else 90_000.0,  # the running one: just seen
        placement=((0, gpus),) if running else (),
        **extra,
    )


def long_job_holds_the_cluster(now: float = 100_000.0, **extra: float) -> ClusterSnapshot:
    """One 4-GPU job has held the whole cluster for a day; eight 1-GPU jobs wait."""
    running = (view("j0", 4, running=True, attained=4 * 90_000.0, **extra),)
    queued = tuple(view(f"j{i}", 1, running=False, **extra) for i in range(1, 9))
    return ClusterSnapshot(
        now=now,
        layout=LAYOUT,
        free_by_node=(0,),
        free_by_rack=(0,),
        queued=queued,
        running=running,
    )


def taught(policy: LookaheadDally) -> LookaheadDally:
    """What finished jobs taught it: 1-GPU jobs run a minute, 4-GPU ones about two days."""
    for _ in range(20):
        policy.inner.history.observe_finish(60.0, 1)
    for hours in (40, 45, 50, 55):
        policy.inner.history.observe_finish(hours * 3600.0, 4)
    return policy


# Started from Dally's own defaults (``default`` first), where a switch is to be seen; a run
# starts from ``gittins-service`` by default (test_a_run_starts_from_preemption_for_service).
FROM_DEFAULT = "default,eager,las-service,gittins-service"


def test_it_picks_preemption_for_service_where_it_clearly_pays() -> None:
    policy = taught(LookaheadDally(LookaheadConfig(horizon_s=3600.0, candidates=FROM_DEFAULT)))
    decision = policy.decide(long_job_holds_the_cluster(), random.Random(0))
    (record,) = policy.history
    assert record.chosen in ("las-service", "gittins-service")
    assert record.gain > 0.5  # eight one-minute jobs instead of waiting a day
    # It acts on it in the same round: the long job yields to the short ones.
    assert [p.job_id for p in decision.preemptions] == ["j0"]
    assert policy.inner.config.service_preemption
    # A switch hands the run's state to the Dally of the chosen setting: what the one of the
    # first setting learnt is the chosen one's now, not a copy; the first keeps its settings.
    assert policy.inner is policy.dallys[record.chosen]
    assert policy.inner.state is policy.dallys["default"].state
    assert policy.inner.history.runtimes_for(4) == [h * 3600.0 for h in (40, 45, 50, 55)]
    assert not policy.dallys["default"].config.service_preemption


def test_it_keeps_the_setting_where_none_is_better() -> None:
    """The running job has run 100 s of the 130 s such jobs are learnt to run: no candidate
    preempts it, none does better, and the setting stays."""
    policy = LookaheadDally(LookaheadConfig(horizon_s=3600.0, candidates=FROM_DEFAULT))
    for _ in range(20):
        policy.inner.history.observe_finish(60.0, 1)
        policy.inner.history.observe_finish(130.0, 4)
    snap = long_job_holds_the_cluster()
    running = (dataclasses.replace(snap.running[0], attained_gpu_s_at_change=400.0),)
    decision = policy.decide(dataclasses.replace(snap, running=running), random.Random(0))
    assert policy.history[0].chosen == "default"
    assert policy.history[0].gain == 0.0
    assert not decision.preemptions


def test_the_look_ahead_reads_no_oracle_figures() -> None:
    """Job views that carry (wrong) oracle figures give the same look-ahead as views without:
    lengths come from what finished jobs taught it only."""
    config = LookaheadConfig(horizon_s=3600.0)
    policy = taught(LookaheadDally(config))
    plain = long_job_holds_the_cluster()
    oracle = long_job_holds_the_cluster(oracle_remaining_s=1.0, oracle_rate=1.0)
    a = plan_jobs(plain, policy.inner.history, [], config, random.Random(5))
    b = plan_jobs(oracle, policy.inner.history, [], config, random.Random(5))
    assert a == b
    assert not LookaheadDally().needs_oracle


def test_remaining_lengths_are_drawn_from_learnt_run_times_longer_than_the_service() -> None:
    rng = random.Random(1)
    runtimes = [10.0, 100.0, 1000.0]
    draws = {draw_remaining_s(runtimes, 50.0, 3600.0, rng) for _ in range(200)}
    assert draws == {50.0, 950.0}


def _trace():  # type: ignore[no-untyped-def]
    return generate(
        SyntheticTraceConfig(
            jobs=80, seed=4, load=0.9, cluster_gpus=32, multi_gpu_share=0.3, max_gpus=8
        )
    )


def _tuned_run(trace, seed: int = 0):  # type: ignore[no-untyped-def]
    policy = LookaheadDally(LookaheadConfig(period_s=1800.0, horizon_s=3600.0, seed=seed))
    return policy, simulate(trace, "small", policy, seed=seed)


def test_telemetry_and_determinism() -> None:
    trace = _trace()
    policy, run = _tuned_run(trace)
    names = set(run.telemetry["name"])
    assert {"tuner.choice", "tuner.predicted_gain", "tuner.score.las-service"} <= names
    assert policy.history, "it tuned at least once"
    again_policy, again = _tuned_run(trace)
    assert again_policy.history == policy.history
    assert again.jobs.equals(run.jobs)
    assert run.result.jobs_finished == len(run.jobs)


def test_the_course_read_back_from_telemetry_is_the_policys_history() -> None:
    """What ``sim run``/``sim compare`` and ``make demo`` print: the tunings, and each switch
    with its time, candidate and predicted gain, as the policy recorded them (on the embedded
    trace, where it switches once its margin is not widened, to its error or its confidence,
    and its bound on churn is loose)."""
    from unstall.traces import default_trace

    policy = LookaheadDally(
        LookaheadConfig(
            error_weight=0.0, churn_bound=1.0, confidence=False, candidates=FROM_DEFAULT
        )
    )
    run = simulate(default_trace(), "small", policy)
    course = tuner_course(run.telemetry)
    assert course is not None
    assert course.tunings == len(policy.history)
    switched = [(h.at_s, h.chosen, h.gain) for h in policy.history if h.gain > 0]
    assert course.switches == tuple(switched)
    assert switched, "the planted trace makes it switch"
    assert course.final == policy.current
    text = course.describe()
    assert text.startswith(f"{len(policy.history)} tunings, started default, switched to ")
    assert f"{switched[0][1]} at {switched[0][0] / 3600:.1f} h" in text
    # A run without the tuner has no course.
    plain = simulate(_trace(), "small", make_policy("dally-fixed"))
    assert tuner_course(plain.telemetry) is None


def test_it_never_reads_true_durations() -> None:
    """Jobs not finished at the first tuning run 10 times longer in a second trace: up to that
    tuning both runs are the same, so a tuner that read no duration tunes the same there (and
    runs the changed trace to the end)."""
    trace = _trace()
    policy, run = _tuned_run(trace)
    first = policy.history[0]
    later = run.jobs.set_index("job_id")["finish_s"] > first.at_s
    frame = trace.jobs.copy()
    longer = frame["job_id"].map(later).fillna(False).astype(bool)
    assert longer.any()
    frame.loc[longer, "duration_s"] *= 10
    changed_policy, changed = _tuned_run(dataclasses.replace(trace, jobs=frame))
    assert changed_policy.history[0] == first
    assert changed.result.jobs_finished == len(changed.jobs)


def test_it_needs_only_what_a_live_backend_gives() -> None:
    """The live backend builds snapshots of plain tuples of fresh views each round and calls
    ``decide``; the policy declares nothing it must be given beyond that."""
    policy, twin = make_policy("dally", horizon_s=3600.0), make_policy("dally", horizon_s=3600.0)
    assert not missing_policy_members(policy)
    taught(policy)  # type: ignore[arg-type]
    taught(twin)  # type: ignore[arg-type]
    snap = long_job_holds_the_cluster()
    # Fresh view objects (and plain tuples), as a live backend builds them every round: the
    # same decision as from the engine's snapshot.
    again = dataclasses.replace(
        snap,
        queued=tuple(dataclasses.replace(v) for v in snap.queued),
        running=tuple(dataclasses.replace(v) for v in snap.running),
    )
    decided = policy.decide(snap, random.Random(0))
    assert [p.job_id for p in decided.preemptions] == ["j0"]
    assert twin.decide(again, random.Random(0)) == decided


def test_dally_is_tuned_by_default_and_dally_fixed_is_not() -> None:
    """The registry's ``dally`` has the tuner on with its defaults; ``dally-fixed`` is Dally
    without it, taking Dally's own knobs only (its base setting throughout, where ``dally``
    starts from ``gittins-service``)."""
    tuned, fixed = make_policy("dally"), make_policy("dally-fixed")
    assert isinstance(tuned, LookaheadDally) and tuned.config == LookaheadConfig()
    assert tuned.base == DallyConfig() and tuned.name == "dally"
    assert isinstance(fixed, Dally) and fixed.config == DallyConfig()
    assert fixed.name == "dally-fixed"
    with pytest.raises(ConfigError, match=r"DallyConfig\.horizon_s"):
        make_policy("dally-fixed", horizon_s=600.0)


def test_selected_by_name_with_text_options() -> None:
    policy = resolve_policy(
        "dally", (("candidates", "default,las-service"), ("target", "makespan"))
    )
    assert isinstance(policy, LookaheadDally)
    assert policy.config.names == ("default", "las-service")
    with pytest.raises(ConfigError, match="candidates"):
        make_policy("dally", candidates="default,nope")


def test_dallys_own_knobs_set_the_base_that_each_candidate_moves_one_knob_of() -> None:
    policy = resolve_policy(
        "dally",
        (
            ("wait_factor", "4"),
            ("max_moves_per_job", "5"),
            ("horizon_s", "1800"),
            ("restore_s", "30"),
        ),
    )
    assert isinstance(policy, LookaheadDally)
    assert policy.base.wait_factor == 4.0 and policy.base.max_moves_per_job == 5
    assert policy.config.horizon_s == 1800.0
    assert policy.base.restore_s == policy.config.restore_s == 30.0  # one meaning, both sides
    assert policy.settings_of("default") == policy.base
    eager = policy.settings_of("eager")
    assert eager.wait_factor == 1.0 and eager.max_moves_per_job == 5
    # It starts on the first candidate, gittins-service: the base setting's with preemption
    # for service.
    assert policy.inner.config == dataclasses.replace(policy.base, service_preemption=True)
    las = resolve_policy("dally", (("order", "las"),))
    assert las.settings_of("gittins-service").order == "gittins"  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"DallyOptions\.order"):
        make_policy("dally", order="nope")


def test_sched_does_not_import_sim_and_sim_provides_dally() -> None:
    """``sched`` loads no ``sim`` module, building ``dally`` included: without the simulator it
    says how to get it; importing ``unstall.sim`` hands the registry the look-ahead's builder."""
    code = (
        "import sys, unstall.sched\n"
        "from unstall.errors import ConfigError\n"
        "from unstall.sched import make_policy\n"
        "make_policy('dally-fixed')\n"
        "try:\n"
        "    make_policy('dally')\n"
        "    raise SystemExit('built without the simulator')\n"
        "except ConfigError as exc:\n"
        "    assert 'import unstall.sim' in str(exc), exc\n"
        "assert not [m for m in sys.modules if m.startswith('unstall.sim')]\n"
        "import unstall.sim\n"
        "assert type(make_policy('dally')).__name__ == 'LookaheadDally'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_run_starts_from_preemption_for_service() -> None:
    """``gittins-service`` is the first candidate by default: a run of ``dally`` starts with
    preemption for service in Dally's own (gittins) order, the fixed setting that won the
    most traces like the embedded one and beat Dally's defaults on every heavy Gavel-like
    trace (BENCHMARKS.md, "Dally's look-ahead tuner"); the cluster held by a day-long job
    frees GPUs for the short ones in the first round, before any tuning."""
    policy = taught(LookaheadDally(LookaheadConfig(horizon_s=3600.0)))
    assert policy.current == "gittins-service"
    assert policy.inner.config.service_preemption and policy.inner.config.order == "gittins"
    snap = dataclasses.replace(long_job_holds_the_cluster(), now=1800.0)  # before any tuning
    assert [p.job_id for p in policy.decide(snap, random.Random(0)).preemptions] == ["j0"]
    assert not policy.history


def test_the_look_ahead_counts_the_present_jobs_it_sees_finish() -> None:
    """What the confidence of a look-ahead rests on: of the nine jobs there now, none finishes
    within the hour while the day-long job holds the cluster (``default``); all eight short
    ones do when it is preempted for them (``las-service``)."""
    config = LookaheadConfig(horizon_s=3600.0, candidates=FROM_DEFAULT)
    policy = taught(LookaheadDally(config))
    snap = long_job_holds_the_cluster()
    jobs = plan_jobs(snap, policy.inner.history, [], config, random.Random(5))
    history = policy.inner.history
    held = simulate_outcome(jobs, policy.settings_of("default"), history, snap, config, 0)
    freed = simulate_outcome(jobs, policy.settings_of("las-service"), history, snap, config, 0)
    assert (held.present_jobs, held.present_done) == (9, 0)
    assert (freed.present_jobs, freed.present_done) == (9, 8)


def test_service_preemption_is_what_makes_the_difference() -> None:
    """Dally itself: with las order and preemption for service, a new short job preempts a
    long-running one (Tiresias-like); without it (the default), it waits."""
    snap = long_job_holds_the_cluster()
    on = Dally(DallyConfig(order="las", service_preemption=True))
    off = Dally(DallyConfig(order="las"))
    assert [p.job_id for p in on.decide(snap, random.Random(0)).preemptions] == ["j0"]
    assert not off.decide(snap, random.Random(0)).preemptions


def test_the_cap_on_moves_spares_a_job_from_preemption_for_service_too() -> None:
    """``cap_all_moves`` (on by default): a job moved ``max_moves_per_job`` times is not
    preempted for service either; off, rank alone decides, as in Tiresias."""
    snap = long_job_holds_the_cluster()
    for cap, preempted in ((True, []), (False, ["j0"])):
        policy = Dally(DallyConfig(order="las", service_preemption=True, cap_all_moves=cap))
        policy.state.record("j0").moves = policy.config.max_moves_per_job
        assert [p.job_id for p in policy.decide(snap, random.Random(0)).preemptions] == preempted


def test_on_several_gpu_types_the_look_ahead_runs_a_job_at_its_slowest_types_speed() -> None:
    """As the simulator does: a job's iteration on a placement takes its consolidated time over
    its speed on the slowest GPU type there (``JobView.type_speeds``), times the network
    slowdown when spread; on one GPU type the types change nothing."""
    from unstall.sim.lookahead import ViewSpeed

    mixed = ClusterLayout.from_nodes(
        node_rack=(0, 0, 1), node_gpus=(4, 4, 4), node_type=("v100", "v100", "k80")
    )
    speed = ViewSpeed(mixed, 0.0)
    speed.type_speeds[("m", 2)] = {"v100": 1.0, "k80": 0.25}
    speed.sensitivities[("m", 2)] = Sensitivity.flat(1.5, 2.0)
    assert speed.heterogeneous
    assert speed.iter_s("m", 2, ((0, 2),), None) == 1.0
    assert speed.iter_s("m", 2, ((2, 2),), None) == 4.0
    assert speed.iter_s("m", 2, ((0, 1), (1, 1)), None) == 1.5  # spread in a rack
    assert speed.iter_s("m", 2, ((0, 1), (2, 1)), None) == 4.0 * 2.0  # over racks, on a K80
    assert speed.iter_s("other", 1, ((2, 1),), None) == 1.0  # speeds unknown: 1.0
    one_type = ViewSpeed(ClusterLayout.regular(racks=1, nodes_per_rack=2, gpus_per_node=4), 0.0)
    one_type.type_speeds[("m", 2)] = {"v100": 0.5}
    assert not one_type.heterogeneous
    assert one_type.iter_s("m", 2, ((0, 2),), None) == 1.0
