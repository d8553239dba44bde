"""What the scheduling core reports as a run goes: each job's transitions and each round's cost."""

from __future__ import annotations

from dataclasses import dataclass

# The transitions a JobEvent names: ``arrived`` (queued), ``started`` (detail: the placement),
# ``migrated`` (detail: the new placement), ``preempted``, ``finished``, ``failed`` (detail: the
# reason; the job is queued again), ``gave_up`` (failed too often in a row: out of the run),
# ``cancelled``.
EVENT_KINDS = (
    "arrived",
    "started",
    "migrated",
    "preempted",
    "finished",
    "failed",
    "gave_up",
    "cancelled",
)


@dataclass(frozen=True, slots=True)
class JobEvent:
    """One transition of one job at ``time_s`` (run seconds)."""

    time_s: float
    job_id: str
    kind: str
    detail: str = ""


@dataclass(frozen=True)
class RoundRecord:
    """One scheduling round: when (run seconds), the wall time ``decide`` took and the wall time
    carrying its decision out took, and what it decided."""

    time_s: float
    decide_wall_s: float
    apply_wall_s: float
    starts: int
    preemptions: int
    migrations: int
