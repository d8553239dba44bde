"""The demo says where dally stands on its trace against the best other policy, per metric."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, cast

from unstall.cli.common import console
from unstall.cli.demo import (
    _dally_over_like_traces,
    _simulate_like_traces,
    _tuner_over_like_traces,
)
from unstall.cli.sim_run import dally_in_context
from unstall.traces import default_trace

if TYPE_CHECKING:
    from unstall.sim import SimResult


def result(policy: str, jct: float, makespan: float, comm: float) -> SimResult:
    """A stand-in with the fields the context reads."""
    return cast(
        "SimResult",
        SimpleNamespace(
            policy=policy,
            avg_jct_s=jct,
            makespan_s=makespan,
            comm_overhead_frac=comm,
            total_gpus=32,
        ),
    )


def test_the_demo_names_the_best_other_policy_and_dallys_change_per_metric() -> None:
    results = [
        result("consolidate", 100.0, 1000.0, 0.30),
        result("tiresias", 120.0, 900.0, 0.20),
        result("dally", 90.0, 990.0, 0.25),
    ]
    with console.capture() as captured:
        dally_in_context(results, default_trace())
    text = " ".join(captured.get().split())
    assert "average JCT -10.0% vs consolidate" in text
    assert "makespan +10.0% vs tiresias" in text
    assert "comm overhead +25.0% vs tiresias" in text
    assert "400 jobs" in text and "multi-GPU jobs on 32 GPUs" in text


def test_a_comm_overhead_of_nothing_is_level_not_a_ratio() -> None:
    results = [result("consolidate", 100.0, 1000.0, 0.0), result("dally", 90.0, 990.0, 0.0)]
    with console.capture() as captured:
        dally_in_context(results, default_trace())
    assert "comm overhead level at 0 vs consolidate" in " ".join(captured.get().split())


def test_sim_compare_on_the_embedded_trace_says_what_kind_of_trace_it_is(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from unstall.cli.app import app

    args = ["sim", "compare", "--policies", "consolidate,dally", "--out", str(tmp_path), "-q"]
    res = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "dally against the best other policy on each metric: average JCT" in text
    assert "`unstall demo` sets it against traces generated like this one" in text
    trace = tmp_path / "t.csv"  # a user's own trace: their comparison, no commentary
    trace.write_text("job_id,submit_s,num_gpus,duration_s\na,0,1,60\nb,0,2,60\n")
    res = CliRunner().invoke(app, [*args, "--trace", str(trace)], env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    assert "dally against the best other policy" not in res.output


def test_nothing_is_said_without_dally() -> None:
    with console.capture() as captured:
        dally_in_context([result("fifo", 1.0, 1.0, 0.1)], default_trace())
    assert captured.get() == ""


def test_over_like_traces_dally_is_set_against_each_traces_best_other_policy() -> None:
    per_trace = [
        [
            result("consolidate", 100.0, 1000.0, 0.30),
            result("srtf", 80.0, 1100.0, 0.40),
            result("dally", 90.0, 990.0, 0.30),
        ],
        [
            result("consolidate", 100.0, 1000.0, 0.20),
            result("srtf", 120.0, 900.0, 0.10),
            result("dally", 110.0, 990.0, 0.25),
        ],
    ]
    with console.capture() as captured:
        _dally_over_like_traces(per_trace, oracles={"srtf"})
    text = " ".join(captured.get().split())
    # JCT: 90/80 = 1.125 and 110/100 = 1.1; makespan: 990/1000 and 990/900; comm: 1 and 2.5.
    assert "on 2 traces generated like it (generator seeds 1000-1001" in text
    assert (
        "average JCT 1.113 ± 0.018 (range 1.100-1.125; best other: srtf (oracle) 1, consolidate 1)"
        in text
    )
    assert "makespan 1.045 ± 0.078 (range 0.990-1.100" in text
    assert (
        "comm overhead 1.750 ± 1.061 (range 1.000-2.500; "
        "best other: consolidate 1, srtf (oracle) 1)" in text
    )


def test_over_like_traces_says_nothing_without_dally_or_traces() -> None:
    with console.capture() as captured:
        _dally_over_like_traces([])
        _dally_over_like_traces([[result("fifo", 1.0, 1.0, 0.1)]])
    assert captured.get() == ""


def test_like_traces_are_generated_like_the_embedded_one_with_other_seeds() -> None:
    per_trace = _simulate_like_traces(["consolidate", "dally-fixed"], "none", quiet=True, traces=2)
    assert [[r.policy for r in results] for results in per_trace] == [
        ["consolidate", "dally-fixed"],
        ["consolidate", "dally-fixed"],
    ]
    embedded = default_trace()
    for results in per_trace:
        assert all(r.jobs_finished == len(embedded) for r in results)
    # Other seeds: other traces, so other outcomes.
    assert per_trace[0][0].makespan_s != per_trace[1][0].makespan_s


def test_over_like_traces_says_why_when_tiresias_has_the_lower_average_jct() -> None:
    per_trace = [[result("tiresias", 80.0, 1000.0, 0.3), result("dally", 90.0, 990.0, 0.3)]]
    with console.capture() as captured:
        _dally_over_like_traces(per_trace)
    text = " ".join(captured.get().split())
    assert "best other: tiresias 1)" in text
    assert "Tiresias preempts running jobs to start every new one" in text
    per_trace = [[result("consolidate", 80.0, 1000.0, 0.3), result("dally", 90.0, 990.0, 0.3)]]
    with console.capture() as captured:
        _dally_over_like_traces(per_trace)
    assert "Tiresias preempts" not in captured.get()


def test_over_like_traces_fixed_dally_gets_its_line_and_the_tuner_its_choices() -> None:
    courses: list[object] = []
    per_trace = _simulate_like_traces(
        ["consolidate", "dally", "dally-fixed"], "medium", quiet=True, traces=2, courses=courses
    )
    assert len(courses) == 2  # one course a trace, from the tuned runs only
    with console.capture() as captured:
        _dally_over_like_traces(per_trace, policy="dally-fixed")
        _tuner_over_like_traces(courses)
    text = " ".join(captured.get().split())
    assert text.startswith("dally-fixed on the same traces: average JCT ")
    assert "Tiresias preempts" not in text  # dally's own line says that
    tunings = [c.tunings for c in courses]  # type: ignore[attr-defined]
    switched = sum(1 for c in courses if c.switches)  # type: ignore[attr-defined]
    assert f"its tuner there: {min(tunings)}-{max(tunings)} tunings a run; " in text
    assert f"switched on {switched} of 2 traces" in text
    first = courses[0].first  # type: ignore[attr-defined]
    assert first == "gittins-service"
    assert f"kept its first setting ({first}) on {2 - switched}." in text
