"""The printer of `unstall live run` that says what a look-ahead tuner (``dally``'s) chose,
live and in the simulator's prediction, fed simulated telemetry; a live run of ``dally`` that
tunes and prints it is tests/live/test_live_cluster.py's."""

from __future__ import annotations

import pytest

from unstall.sched import make_policy
from unstall.sim import simulate
from unstall.sim.lookahead import LookaheadDally, tuner_course


def test_a_live_run_says_what_its_tuner_chose_live_and_simulated(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`unstall live run` prints the tuner's course of the live run and of the simulator's
    prediction (they may differ: the choice is made on the cluster as it is); nothing for a
    policy without a tuner."""
    from types import SimpleNamespace

    from unstall.cli.live import _print_tuner_course
    from unstall.traces import default_trace

    tuned = simulate(default_trace(), "small", LookaheadDally(), max_jobs=120)
    plain = simulate(default_trace(), "small", make_policy("dally-fixed"), max_jobs=20)
    run = SimpleNamespace(telemetry=tuned.telemetry, prediction=plain)
    _print_tuner_course(run)  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert "tuner live: " in out and "tuner simulated" not in out
    _print_tuner_course(SimpleNamespace(telemetry=tuned.telemetry, prediction=tuned))  # type: ignore[arg-type]
    out = capsys.readouterr().out
    course = tuner_course(tuned.telemetry)
    assert course is not None
    # The console wraps long lines: compare word by word.
    assert " ".join(f"tuner live: {course.describe()}".split()) in " ".join(out.split())
    assert "tuner simulated: " in out
    _print_tuner_course(SimpleNamespace(telemetry=plain.telemetry, prediction=None))  # type: ignore[arg-type]
    assert capsys.readouterr().out == ""
