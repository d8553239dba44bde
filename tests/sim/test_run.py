from __future__ import annotations

import random
from pathlib import Path

import pandas as pd
import pytest

from unstall.errors import ConfigError, UnstallError
from unstall.net import small
from unstall.sched import ClusterSnapshot, Decision, Fifo, make_policy
from unstall.sim import CongestionSchedule, SimResult, congestion_level, simulate
from unstall.traces import Trace, default_trace
from unstall.traces.schema import TraceError
from unstall.workload import JobProfile

REQUIRED = {
    "policy",
    "jobs",
    "jobs_finished",
    "makespan_s",
    "avg_jct_s",
    "p50_jct_s",
    "p95_jct_s",
    "p99_jct_s",
    "avg_queue_s",
    "comm_overhead_s",
    "gpu_util",
    "preemptions",
    "migrations",
    "sim_wall_s",
}


def test_embedded_trace_finishes_under_every_baseline_and_is_reproducible() -> None:
    trace = default_trace()
    medium = congestion_level("medium")
    first = simulate(trace, small(), make_policy("tiresias"), congestion=medium, seed=3)
    again = simulate(trace, small(), make_policy("tiresias"), congestion=medium, seed=3)
    assert first.result.jobs_finished == len(trace)
    assert set(first.result.to_dict()) >= REQUIRED
    # Everything but the wall-clock figures is deterministic.
    a = {k: v for k, v in first.result.to_dict().items() if "wall" not in k and "per_s" not in k}
    b = {k: v for k, v in again.result.to_dict().items() if "wall" not in k and "per_s" not in k}
    assert a == b


def test_congestion_never_helps_and_consolidation_beats_first_fit_on_overhead() -> None:
    trace = default_trace()
    high = congestion_level("high")
    calm = simulate(trace, small(), make_policy("fifo")).result
    busy = simulate(trace, small(), make_policy("fifo"), congestion=high).result
    assert calm.congestion == "none" and busy.congestion == "high"
    assert busy.comm_overhead_s > calm.comm_overhead_s
    assert busy.avg_jct_s > calm.avg_jct_s
    ff = simulate(trace, small(), make_policy("first-fit"), congestion=high).result
    cons = simulate(trace, small(), make_policy("consolidate"), congestion=high).result
    assert cons.comm_overhead_frac < ff.comm_overhead_frac


def test_jobs_larger_than_the_cluster_are_counted_not_simulated() -> None:
    frame = pd.DataFrame(
        {
            "job_id": ["a", "b"],
            "submit_s": [0.0, 1.0],
            "num_gpus": [1, 64],
            "duration_s": [10.0, 5.0],
        }
    )
    run = simulate(Trace.from_frame(frame), small(), make_policy("fifo"))
    assert run.result.jobs == 2
    assert run.result.jobs_finished == 1
    assert run.result.jobs_rejected == 1


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"restore_s": -1.0}, r"simulate\.restore_s"),
        ({"seed": -1}, r"simulate\.seed"),
        ({"tick_s": 0.0}, r"simulate\.tick_s"),
        ({"max_jobs": 0}, r"simulate\.max_jobs"),
        ({"model_mix": {"resnet18": -1.0}}, r"simulate\.model_mix"),
        ({"model_mix": {}}, r"simulate\.model_mix"),
        # Values of the wrong kind: bare TypeErrors from a comparison or from pandas, or (a
        # fractional seed) a run; each is named with what the argument takes.
        ({"seed": 1.5}, r"simulate\.seed: must be a whole number, got 1\.5"),
        ({"max_jobs": "5"}, r"simulate\.max_jobs: must be a whole number, got '5'"),
        ({"max_jobs": 5.5}, r"simulate\.max_jobs: must be a whole number, got 5\.5"),
        ({"restore_s": "60"}, r"simulate\.restore_s: must be a number of seconds, got '60'"),
        ({"tick_s": "5"}, r"simulate\.tick_s: must be a number of seconds, got '5'"),
        ({"model_mix": "resnet50"}, r"simulate\.model_mix: must map model names to shares"),
        ({"job_profiles": "p.json"}, r"simulate\.job_profiles: must be a sequence of JobProfile"),
        ({"job_profiles": ["p.json"]}, r"simulate\.job_profiles: must hold JobProfile objects"),
        ({"duration_gpu": 5}, r"simulate\.duration_gpu: unknown GPU type 5"),
        ({"on_finish": 5}, r"simulate\.on_finish: must be a function"),
    ],
)
def test_bad_settings_name_the_argument(settings: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        simulate(default_trace(), small(), make_policy("fifo"), **settings)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"cluster": "racks.toml"}, "racks.toml: no such file"),
        ({"cluster": "huge"}, "simulate.cluster: 'huge' is neither a preset ["),
        ({"cluster": {"preset": "small"}}, "got dict; topology_from_mapping(mapping) builds one"),
        (
            {"trace": "FRAME"},
            "simulate.trace: takes a Trace, a trace file's path, or None for the embedded default "
            "trace; got DataFrame: Trace.from_frame(df) builds one",
        ),
        ({"trace": "jobs.csv"}, "jobs.csv: no such file"),
        ({"congestion": "extreme"}, "simulate.congestion: 'extreme' is neither a level ["),
        ({"congestion": 0.4}, "fractions=(0.4,))"),
        ({"policy": "greedy"}, "unknown policy 'greedy'; known: ["),
        ({"policy": Fifo}, "got a class, Fifo: instantiate it (Fifo())"),
        ({"policy": object()}, "got object, which lacks name and needs_oracle and decide("),
        ({"policy": "NAMED_3"}, "simulate.policy: its name must be a string, got int"),
    ],
)
def test_a_wrong_name_or_type_where_an_object_belongs_says_what_it_takes(
    arguments: dict[str, object], message: str
) -> None:
    """Each used to fail deep inside the run: an AttributeError ('str' object has no attribute
    'fastest_device'), or a crash blamed on the policy ('reset' missing 'self'). Names are
    taken as the command line takes them (tests/sim/test_request.py)."""
    given: dict[str, object] = {
        "trace": default_trace(),
        "cluster": small(),
        "policy": make_policy("fifo"),
    }
    given.update(arguments)
    if given["trace"] == "FRAME":
        given["trace"] = default_trace().jobs
    if given["policy"] == "NAMED_3":
        given["policy"] = make_policy("fifo")
        given["policy"].name = 3  # type: ignore[attr-defined]
    with pytest.raises(UnstallError) as err:
        simulate(**given, max_jobs=5)  # type: ignore[arg-type]
    assert message in str(err.value)


def test_a_policy_and_a_congestion_of_ones_own_classes_still_run() -> None:
    """The checks ask for the protocols, not for unstall's own classes."""

    class Calm:
        name = "calm"

        def schedule(self, horizon_s: float, seed: int) -> CongestionSchedule:
            return CongestionSchedule(times_s=(0.0,), fractions=(0.0,), name=self.name)

    class Mine:
        name = "mine"
        needs_oracle = False

        def __init__(self) -> None:
            self.inner = Fifo()

        def reset(self) -> None:
            self.inner.reset()

        def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
            return self.inner.decide(snapshot, rng)

    run = simulate(default_trace(), small(), Mine(), congestion=Calm(), max_jobs=5)
    result = run.result
    assert (result.policy, result.congestion, result.jobs_finished) == ("mine", "calm", 5)


def _my_net(gradient_bytes: int) -> JobProfile:
    return JobProfile(
        model="my-net",
        device="v100",
        compute_s=0.05,
        local_batch=32,
        gradient_bytes=gradient_bytes,
        gradient_tensors=40,
        layers=20,
    )


def _profile(tmp_path: Path, name: str, gradient_bytes: int) -> Path:
    return _my_net(gradient_bytes).save(tmp_path / f"{name}.json")


def _my_net_trace(jobs: int) -> Trace:
    frame = default_trace().jobs.head(jobs).copy()
    frame["model"] = "my-net"
    return Trace.from_frame(frame)


def test_job_profiles_give_their_model_the_measured_figures() -> None:
    trace = _my_net_trace(80)
    high = congestion_level("high")
    light, heavy = _my_net(1_000_000), _my_net(400_000_000)

    def run(*profiles: JobProfile) -> SimResult:
        policy = make_policy("first-fit")
        return simulate(trace, small(), policy, congestion=high, job_profiles=profiles).result

    runs = {"light": run(light), "heavy": run(heavy)}
    # The same placements cost far more time on the network with 400x the gradient bytes.
    assert runs["heavy"].comm_overhead_s > 10 * runs["light"].comm_overhead_s > 0
    with pytest.raises(TraceError, match="names an unknown model 'my-net' \\(as do 79 more jobs"):
        run()
    with pytest.raises(
        ConfigError, match=r"simulate\.job_profiles: a second profile of model 'my-net'"
    ):
        run(light, heavy)


def test_a_trace_without_jobs_gives_an_empty_result_not_a_crash() -> None:
    from unstall.traces.schema import REQUIRED_COLUMNS, Trace

    empty = Trace.from_frame(pd.DataFrame({c: [] for c in REQUIRED_COLUMNS}))
    run = simulate(empty, small(), make_policy("dally"))
    assert run.result.jobs == 0 and run.result.jobs_finished == 0
    assert run.jobs.empty and run.result.makespan_s == 0.0


def test_the_summary_counts_moved_jobs_and_the_most_moves_of_one_job() -> None:
    run = simulate(default_trace(), "small", "tiresias")
    moves = run.jobs["preemptions"] + run.jobs["migrations"]
    assert run.result.preemptions > 0  # tiresias preempts on this trace
    assert run.result.jobs_moved == int((moves > 0).sum()) > 0
    assert run.result.max_moves_per_job == int(moves.max()) >= 1
