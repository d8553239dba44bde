"""Why a queued job waits, in words a user reads: the optional ``wait_reasons`` member of a policy.

A policy may define ``wait_reasons(snapshot) -> Mapping[str, str]``: for waiting jobs of
``snapshot.queued`` (by id), why its rules leave them waiting now, e.g. "held for a consolidated
placement: delay timer, 4 min left" or "behind 3 jobs of higher priority". A backend calls it
between rounds, on a snapshot of its own (not the one ``decide`` was shown), so it must not
change the policy's state. Jobs it leaves out get :func:`generic_reason`'s words. The service
shows them as each pending job's ``reason`` (docs/policy.md, "Why a job waits").

The helpers here word the usual cases the same way for every policy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol, runtime_checkable

from unstall.sched.base import ClusterSnapshot, JobView


@runtime_checkable
class ExplainsWaits(Protocol):
    """A policy that says why its waiting jobs wait (see the module docstring)."""

    def wait_reasons(self, snapshot: ClusterSnapshot) -> Mapping[str, str]: ...


def duration_words(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3.5 h``: a duration in the unit that reads at its size."""
    if abs(seconds) < 120:
        return f"{seconds:.0f} s"
    if abs(seconds) < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def too_few(gpus: int, free: int) -> str | None:
    """``waiting for GPUs: needs 4, 2 free`` where ``free`` GPUs cannot hold ``gpus``."""
    return f"waiting for GPUs: needs {gpus}, {free} free" if gpus > free else None


def shortfall(job: JobView, snapshot: ClusterSnapshot) -> str | None:
    """:func:`too_few` for ``job`` with the snapshot's free GPUs."""
    return too_few(job.num_gpus, snapshot.free_gpus)


def behind(count: int, what: str) -> str:
    """``behind 3 earlier jobs`` (``what``: "earlier jobs", "jobs of higher priority", ...)."""
    return f"behind {count} {what if count != 1 else what.replace('jobs', 'job', 1)}"


def in_order_reasons(
    ordered: Iterable[JobView],
    snapshot: ClusterSnapshot,
    *,
    order: str,
    blocking: bool,
    room: Callable[[JobView, ClusterSnapshot], str | None] = shortfall,
) -> dict[str, str]:
    """Reasons for a queue taken in ``ordered`` order (``order`` says which, e.g. "arrival
    order"): a job with no room (``room``: its words, None when it has room) waits for it; where
    the first such job blocks the rest (``blocking``: head-of-line), every job behind it waits
    behind the jobs ahead of it."""
    reasons: dict[str, str] = {}
    head: tuple[JobView, str] | None = None
    # The free GPUs are the same for every job: so is the room for jobs of one size and model.
    rooms: dict[tuple[int, str], str | None] = {}
    for index, job in enumerate(ordered):
        if head is not None and blocking:
            first, why = head
            reasons[job.job_id] = (
                f"{behind(index, 'jobs')} in {order}; the first, {first.job_id}, is {why}"
            )
            continue
        key = (job.num_gpus, job.model)
        if key not in rooms:
            rooms[key] = room(job, snapshot)
        short = rooms[key]
        if short is not None:
            reasons[job.job_id] = short
            if head is None:
                head = (job, short)
    return reasons


def generic_reason(gpus: int, free: int, position: int, policy: str) -> str:
    """What can be said under any policy of a job of ``gpus`` GPUs with ``free`` GPUs free:
    too few GPUs free, else the jobs ahead of it, else the policy has not placed it yet
    (``position``: 1 for the first in the queue)."""
    short = too_few(gpus, free)
    if short is not None:
        return short
    if position > 1:
        return f"{behind(position - 1, 'queued jobs')} under {policy}"
    return f"enough GPUs free: {policy} has not placed it yet"


def wait_reasons(policy: object, snapshot: ClusterSnapshot) -> dict[str, str]:
    """Every waiting job's reason: the policy's own (``wait_reasons``, where it has one; a job
    it leaves out has room by its rules), the generic words otherwise. A policy's reasons that
    fail are not the service's failure: the generic words stand in."""
    own: Mapping[str, str] | None = None
    explain = getattr(policy, "wait_reasons", None)
    if callable(explain):
        try:
            found = explain(snapshot)
            own = found if isinstance(found, Mapping) else None
        except Exception:  # a user's policy: its words are optional, its failure ours to hide
            own = None
    name = str(getattr(policy, "name", type(policy).__name__))
    reasons: dict[str, str] = {}
    free = snapshot.free_gpus
    for position, job in enumerate(snapshot.queued, 1):
        if own is None:
            reasons[job.job_id] = generic_reason(job.num_gpus, free, position, name)
        else:
            text = own.get(job.job_id)
            reasons[job.job_id] = (
                str(text) if text else f"room for it now: {name} starts it at its next round"
            )
    return reasons
