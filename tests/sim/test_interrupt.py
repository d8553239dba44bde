"""A Ctrl-C inside :func:`unstall.sim.simulate`: a KeyboardInterrupt that says how far the run
got (the CLI's message on an interrupted `sim run` is made of it)."""

from __future__ import annotations

import pytest

from unstall.net import small
from unstall.sched import make_policy
from unstall.sim import simulate
from unstall.traces import default_trace


class _StopsAfter:
    """fifo's decisions until round ``rounds``, where a Ctrl-C arrives."""

    name = "stops"
    needs_oracle = False

    def __init__(self, rounds: int) -> None:
        self.inner = make_policy("fifo")
        self.rounds = rounds

    def reset(self) -> None:
        self.inner.reset()

    def decide(self, snapshot, rng):  # type: ignore[no-untyped-def]
        self.rounds -= 1
        if self.rounds == 0:
            raise KeyboardInterrupt
        return self.inner.decide(snapshot, rng)


def test_an_interrupted_simulation_says_how_far_it_got() -> None:
    from unstall.sim import SimInterrupted

    full = simulate(default_trace(), small(), make_policy("fifo"), max_jobs=100)
    with pytest.raises(SimInterrupted) as caught:
        simulate(default_trace(), small(), _StopsAfter(80), max_jobs=100)
    stop = caught.value
    assert isinstance(stop, KeyboardInterrupt)
    assert stop.jobs_total == 100
    assert 0 < stop.jobs_finished < 100
    # Round 80 of fifo's run: before its end, after its first finishes.
    assert 0 < stop.simulated_s < full.result.makespan_s
    assert stop.progress() == (
        f"simulated time {stop.simulated_s / 3600:.3g} h, {stop.jobs_finished} of 100 jobs finished"
    )
