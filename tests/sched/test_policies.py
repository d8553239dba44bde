"""Each baseline's decision on small hand-made clusters where the right answer is known."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from snapshots import cluster_snapshot, job_view
from unstall.errors import ConfigError
from unstall.sched import (
    POLICIES,
    ClusterLayout,
    ClusterSnapshot,
    Consolidate,
    Dally,
    Decision,
    Fifo,
    FirstFit,
    Gandiva,
    JobView,
    Placement,
    Policy,
    Srtf,
    Tiresias,
    describe_policies,
    make_policy,
    register_policy,
    registry,
)

LAYOUT = ClusterLayout.regular(racks=1, nodes_per_rack=2, gpus_per_node=4)
RNG = random.Random(0)


def job(
    jid: str,
    gpus: int,
    *,
    submit: float = 0.0,
    placement: Placement = (),
    attained: float = 0.0,
    changed: float = 0.0,
    remaining: float | None = None,
    model: str = "resnet50",
) -> JobView:
    return job_view(
        jid,
        gpus,
        submit_s=submit,
        model=model,
        attained=attained,
        changed_s=changed,
        placement=placement,
        oracle_remaining_s=remaining,
        oracle_rate=1.0,
        oracle_resume_s=changed,
    )


def snapshot(
    free: tuple[int, ...], queued: list[JobView], running: list[JobView], now: float = 100.0
) -> ClusterSnapshot:
    return cluster_snapshot(LAYOUT, free, queued, running, now)


def started(decision: object) -> dict[str, Placement]:
    return {s.job_id: s.placement for s in decision.starts}  # type: ignore[attr-defined]


def test_registry_builds_every_policy_by_name() -> None:
    for name in POLICIES:
        assert make_policy(name).name == name


def test_fifo_blocks_behind_a_head_that_does_not_fit() -> None:
    d = Fifo().decide(snapshot((2, 2), [job("a", 8), job("b", 1)], []), RNG)
    assert d.starts == ()


def test_fifo_spreads_when_it_must_and_prefers_one_node() -> None:
    d = Fifo().decide(snapshot((2, 3), [job("a", 3), job("b", 2)], []), RNG)
    assert started(d) == {"a": ((1, 3),), "b": ((0, 2),)}
    d = Fifo().decide(snapshot((2, 2), [job("a", 3)], []), RNG)
    assert started(d) == {"a": ((0, 2), (1, 1))}


def test_first_fit_ignores_locality() -> None:
    d = FirstFit().decide(snapshot((1, 4), [job("a", 2)], []), RNG)
    assert started(d) == {"a": ((0, 1), (1, 1))}


def test_consolidate_waits_for_one_node_and_backfills() -> None:
    d = Consolidate().decide(snapshot((2, 2), [job("a", 3), job("b", 2)], []), RNG)
    assert started(d) == {"b": ((0, 2),)}


def test_srtf_preempts_a_much_longer_job_but_not_a_similar_one() -> None:
    long = job("r1", 8, placement=((0, 4), (1, 4)), remaining=10_000.0)
    d = Srtf().decide(snapshot((0, 0), [job("q1", 2, remaining=100.0)], [long]), RNG)
    assert [p.job_id for p in d.preemptions] == ["r1"]
    assert "q1" in started(d)
    similar = job("r1", 8, placement=((0, 4), (1, 4)), remaining=150.0)
    d = Srtf().decide(snapshot((0, 0), [job("q1", 2, remaining=100.0)], [similar]), RNG)
    assert d.preemptions == () and d.starts == ()


def test_tiresias_preempts_a_lower_priority_job_only() -> None:
    # r1 has run 2 h on 4 GPUs: well past the first threshold (1 GPU-hour). q1 has had nothing.
    r1 = job("r1", 4, placement=((0, 4),), attained=0.0, changed=-7200.0, submit=-7200.0)
    full = ((1, 4),)
    r2 = job("r2", 4, placement=full, attained=0.0, changed=50.0, submit=50.0)
    d = Tiresias().decide(snapshot((0, 0), [job("q1", 4, submit=90.0)], [r1, r2]), RNG)
    assert [p.job_id for p in d.preemptions] == ["r1"]
    assert started(d) == {"q1": ((0, 4),)}
    # Against a job of the same level nothing happens.
    d = Tiresias().decide(snapshot((0, 4), [job("q1", 8, submit=90.0)], [r2]), RNG)
    assert d.preemptions == () and d.starts == ()


def test_tiresias_promotes_a_starving_job() -> None:
    policy = Tiresias()
    # Ran 1000 s on 8 GPUs (8000 GPU-s: level 1), then waited 10,000 s > 8 x 1000 s.
    starving = job("q1", 8, attained=8000.0, changed=0.0)
    assert policy.level(starving, now=10_000.0) == 0
    assert policy.level(starving, now=5_000.0) == 1


def test_tiresias_consolidates_only_skewed_models() -> None:
    q = [job("q1", 4, model="vgg16"), job("q2", 4, model="resnet50")]
    d = Tiresias().decide(snapshot((2, 3), q, []), RNG)
    assert "q1" not in started(d)
    assert started(d)["q2"] == ((0, 1), (1, 3))


def test_gandiva_migrates_small_jobs_to_make_a_node_whole() -> None:
    layout_free = (2, 2)  # node 0 holds r1 (2 GPUs), node 1 holds r2 and r3 (1 GPU each)
    r1 = job("r1", 2, placement=((0, 2),))
    r2 = job("r2", 1, placement=((1, 1),))
    r3 = job("r3", 1, placement=((1, 1),))
    d = Gandiva().decide(snapshot(layout_free, [job("q1", 4)], [r1, r2, r3]), RNG)
    moved = {m.job_id: m.placement for m in d.migrations}
    # Node 0 (the lowest-numbered of the emptiest) is cleared: r1 moves into node 1's free room.
    assert moved == {"r1": ((1, 2),)}
    assert started(d) == {"q1": ((0, 4),)}


def test_gandiva_reconsolidates_a_spread_job_when_a_node_frees() -> None:
    spread = job("r1", 4, placement=((0, 2), (1, 2)))
    d = Gandiva().decide(snapshot((2, 2), [], [spread]), RNG)
    # With its own GPUs given back, node 0 (or 1) is whole again: move it there.
    assert [m.job_id for m in d.migrations] == ["r1"]
    assert len(d.migrations[0].placement) == 1


def test_gandiva_leaves_the_free_count_intact_when_defragmenting_fails() -> None:
    # Node 0 has 4 free GPUs and two tenants: r4 (1 GPU) could move to node 1, r5 (3 GPUs) fits
    # nowhere else, so node 0 cannot be cleared for an 8-GPU job. The job then starts spread,
    # and must not be given more GPUs of a node than are free.
    layout = ClusterLayout.regular(racks=1, nodes_per_rack=3, gpus_per_node=8)
    free = (4, 2, 2)
    running = (
        job("r4", 1, placement=((0, 1),)),
        job("r5", 3, placement=((0, 3),)),
        job("r1", 6, placement=((1, 6),)),
        job("r2", 6, placement=((2, 6),)),
    )
    snap = ClusterSnapshot(
        now=100.0,
        layout=layout,
        free_by_node=free,
        free_by_rack=(sum(free),),
        queued=(job("q1", 8),),
        running=running,
    )
    d = Gandiva().decide(snap, RNG)
    assert d.migrations == ()
    (start,) = d.starts
    assert all(k <= free[node] for node, k in start.placement), start


def test_policy_options_reach_the_policy_config() -> None:
    policy = make_policy("dally-fixed", order="las", preemption=False, wait_factor=4.0)
    assert isinstance(policy, Dally)
    assert policy.config.order == "las"
    assert policy.config.preemption is False
    assert policy.config.wait_factor == 4.0
    thresholds = make_policy("dally-fixed", las_thresholds_gpu_s=(10.0, 20.0))
    assert isinstance(thresholds, Dally)
    assert thresholds.config.las_thresholds_gpu_s == (10.0, 20.0)


@pytest.mark.parametrize(
    ("name", "options", "named"),
    [
        ("dally-fixed", {"no_such_knob": 1}, "DallyConfig.no_such_knob"),
        ("dally-fixed", {"order": "random"}, "DallyConfig.order"),
        ("dally-fixed", {"wait_factor": -1.0}, "DallyConfig.wait_factor"),
        ("fifo", {"order": "las"}, "policy.options"),
        ("nope", {}, "unknown policy 'nope'"),
        ("dally-tuned", {}, "unknown policy 'dally-tuned'; its look-ahead tuner is on in 'dally'"),
    ],
)
def test_bad_policy_options_name_the_field(
    name: str, options: dict[str, object], named: str
) -> None:
    with pytest.raises(ConfigError) as err:
        make_policy(name, **options)
    assert named in str(err.value)


class _Idle:
    """Starts nothing."""

    name = "idle"
    needs_oracle = False

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        return Decision()

    def reset(self) -> None:
        pass


def test_registered_policies_are_built_by_name_and_names_are_not_taken_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(registry, "POLICIES", dict(registry.POLICIES))
    register_policy("idle", _Idle, description="starts nothing")
    assert isinstance(make_policy("idle"), _Idle)
    assert describe_policies()["idle"] == "starts nothing"
    with pytest.raises(ConfigError, match="'idle' is already registered"):
        register_policy("idle", _Idle, description="again")
    with pytest.raises(ConfigError, match="'fifo' is already registered"):
        register_policy("fifo", _Idle, description="a second fifo")
    with pytest.raises(ConfigError, match="a colon names user code"):
        register_policy("my.py:Idle", _Idle, description="not a name")
    with pytest.raises(ConfigError, match="not a dataclass"):
        register_policy("knobs", _Idle, description="bad options", options=dict)


@dataclass
class _Labelled:
    """A user policy whose options include its own ``name``, as docs/policy.md's example has."""

    patience_s: float = 60.0
    name: str = "labelled"
    needs_oracle: bool = False
    max_wait_s: float | None = None

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        return Decision()

    def reset(self) -> None:
        pass


def test_an_option_called_name_reaches_the_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "POLICIES", dict(registry.POLICIES))
    register_policy("labelled", _Labelled, description="starts nothing", options=_Labelled)
    policy = make_policy("labelled", name="labelled-2", patience_s=5)
    assert isinstance(policy, _Labelled) and policy.name == "labelled-2"
    assert policy.patience_s == 5
    unlimited = make_policy("labelled", max_wait_s=None)
    assert isinstance(unlimited, _Labelled) and unlimited.max_wait_s is None
    with pytest.raises(ConfigError, match=r"_Labelled\.name: must be a string, got 3"):
        make_policy("labelled", name=3)
    with pytest.raises(ConfigError, match=r"_Labelled\.max_wait_s: must be a number or None"):
        make_policy("labelled", max_wait_s="soon")


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        # Each was taken, and failed (or built no policy) only when make_policy called it.
        (
            {"factory": _Idle()},
            "register_policy.factory: must be callable (a class or function), got a built "
            "policy; pass its class (_Idle) or a function that builds a fresh one",
        ),
        ({"factory": "_Idle"}, "register_policy.factory: must be callable (a class or function)"),
        ({"description": 5}, "register_policy.description: must be a string (one line), got 5"),
        (
            {"options": _Labelled()},
            "register_policy.options: must be the dataclass itself, got an instance: pass "
            "_Labelled",
        ),
        ({"name": 5}, "register_policy.name: 5: want a plain name"),
    ],
)
def test_register_policy_names_an_argument_of_the_wrong_kind(
    monkeypatch: pytest.MonkeyPatch, arguments: dict[str, object], named: str
) -> None:
    monkeypatch.setattr(registry, "POLICIES", dict(registry.POLICIES))
    given: dict[str, object] = {"name": "idle", "factory": _Idle, "description": "starts nothing"}
    with pytest.raises(ConfigError) as err:
        register_policy(**{**given, **arguments})  # type: ignore[arg-type]
    assert str(err.value).startswith(named)
    assert "idle" not in registry.POLICIES


def test_make_policy_names_a_factory_that_builds_no_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "POLICIES", dict(registry.POLICIES))
    register_policy("dict", dict, description="not a policy")
    with pytest.raises(ConfigError, match=r"^make_policy.name: the factory registered as 'dict' "):
        make_policy("dict")


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"age_weight": "high"}, "DallyConfig.age_weight: must be a number, got 'high'"),
        ({"preemption": "no"}, "DallyConfig.preemption: must be True or False, got 'no'"),
        ({"age_weight": True}, "DallyConfig.age_weight: must be a number, got True"),
        ({"tune_every": 2.5}, "DallyConfig.tune_every: must be a whole number, got 2.5"),
        ({"order": 1}, "DallyConfig.order: must be a string, got 1"),
        ({"max_wait_s": "1h"}, "DallyConfig.max_wait_s: must be a number or None, got '1h'"),
    ],
)
def test_an_option_of_the_wrong_type_names_the_options_class_and_field(
    options: dict[str, object], named: str
) -> None:
    with pytest.raises(ConfigError) as err:
        make_policy("dally-fixed", **options)
    assert str(err.value) == named


def test_options_of_the_right_type_pass_as_given() -> None:
    dally = make_policy("dally-fixed", age_weight=0, max_wait_s=60, tune_every=5, preemption=False)
    assert isinstance(dally, Dally)
    assert (dally.config.age_weight, dally.config.max_wait_s) == (0, 60)
    assert (dally.config.tune_every, dally.config.preemption) == (5, False)


def test_every_policy_is_described_and_satisfies_the_protocol() -> None:
    assert list(describe_policies()) == list(POLICIES)
    for name in POLICIES:
        assert isinstance(make_policy(name), Policy)


def test_dally_is_described_as_its_defaults_run_it() -> None:
    """The timer tuner is off unless asked for: the listing says so, and how to turn it on."""
    from unstall.sched import DallyConfig

    assert DallyConfig().autotune is False
    described = describe_policies()["dally-fixed"]
    assert "auto-tuned" not in described
    assert "fixed factor" in described and "autotune=on" in described


@pytest.mark.parametrize("name", ["fifo", "first-fit", "consolidate"])
def test_arrival_order_policies_take_higher_priorities_first(name: str) -> None:
    """Where jobs have priorities (the service's), a later job of higher priority starts
    before earlier ones; among equal priorities arrival order holds."""
    queued = [
        job_view("j1", 4, submit_s=1.0),
        job_view("j2", 4, submit_s=2.0, priority=5),
        job_view("j3", 4, submit_s=3.0, priority=5),
    ]
    snapshot = cluster_snapshot(LAYOUT, (4, 0), queued)
    decision = make_policy(name).decide(snapshot, random.Random(0))
    assert [s.job_id for s in decision.starts] == ["j2"]
    plain = cluster_snapshot(LAYOUT, (4, 0), [job_view("j1", 4), job_view("j2", 4, submit_s=2.0)])
    assert [s.job_id for s in make_policy(name).decide(plain, random.Random(0)).starts] == ["j1"]
