"""What a driver hands the scheduling core: a clock and an executor, as one small protocol.

The simulator, the live backend and the service are three drivers of one core
(:class:`~unstall.loop.core.SchedulingCore`). The core owns the jobs' lifecycle and the rounds;
a driver owns time and progress:

- the clock: :meth:`Driver.next_instant` (when the next thing happens: the simulator jumps to it,
  a wall clock waits for it) and :meth:`Driver.now` (the time a decision takes effect);
- the executor: :meth:`Driver.collect` (what ended by itself at an instant: finishes, failures,
  congestion changes; the driver reports each to the core's transitions),
  :meth:`Driver.launch` (a job's new segment begins on a placement), :meth:`Driver.stop` (a
  running job is stopped for a preemption, a migration or a cancel, and says how it ended) and
  :meth:`Driver.stopping` (the stops of one decision, announced together so that a real cluster
  checkpoints them in parallel).

A driver never writes a job's lifecycle (state, placement, queueing, moves); it writes only its
progress (iterations done, iteration time, pauses), through :class:`~unstall.loop.jobs.Job`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from unstall.loop.jobs import Job
from unstall.sched.base import Placement

StopKind = Literal["stopped", "finished", "failed"]
StopVerb = Literal["preempt", "migrate", "cancel"]


@dataclass(frozen=True, slots=True)
class StopOutcome:
    """How a segment ended: ``stopped`` (as asked: its state is saved), ``finished`` (its work
    was done before the stop reached it) or ``failed`` (a process or its node died). ``at_s``:
    when that was seen (run seconds). For a failure: ``reason``, whether the job gained a
    checkpoint in the segment (``progressed``) and whether the failure was its own (``own``:
    not a node that left), which together decide when a job is given up."""

    kind: StopKind
    at_s: float
    reason: str = ""
    progressed: bool = False
    own: bool = True


@dataclass(frozen=True, slots=True)
class Collected:
    """What a driver found at an instant: ``wake`` (something calls for a round: a finish, a
    failure), ``changed`` (its own state changed without calling for one: congestion) and how
    many events it handled (counted in the run's ``events``)."""

    wake: bool = False
    changed: bool = False
    events: int = 0


NOTHING = Collected()


class Driver(Protocol):
    """The clock and the executor of a run (see the module docstring)."""

    def next_instant(self, due_s: float, until_s: float) -> float:
        """When the next instant is (run seconds), given the core's next due time ``due_s``
        (an arrival, a timer, a tick; ``inf``: none): a simulated clock returns the earliest of
        that and its own next event, a wall clock waits until then (or until something ends)
        and returns the time it woke. ``inf``: the run is over."""
        ...

    def now(self) -> float:
        """The current time (run seconds): the instant being handled, or the wall clock's."""
        ...

    def collect(self, now: float) -> Collected:
        """Handle what ended by itself by ``now``, reporting each job's end to the core."""
        ...

    def close_instant(self, now: float) -> None:
        """After the round of ``now`` (re-share links, drop superseded events)."""
        ...

    def before_round(self, now: float) -> None:
        """Just before a snapshot is built (a wall clock refreshes an oracle's views)."""
        ...

    def congestion(self) -> float:
        """The background congestion policies see (0 where there is none)."""
        ...

    def launch(self, job: Job, placement: Placement, now: float, *, migrating: bool) -> None:
        """Begin the job's segment on ``placement`` (its GPUs are already allocated). A driver
        that cannot begin it reports the failure to the core (``core.fail``) before returning."""
        ...

    def stopping(self, jobs: Sequence[Job]) -> None:
        """The jobs that the decision being applied will stop, before :meth:`stop` is called for
        each in turn."""
        ...

    def stop(self, job: Job, now: float, verb: StopVerb) -> StopOutcome:
        """Stop the job's running segment and say how it ended."""
        ...
