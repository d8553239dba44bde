"""A live job's segments: its run on one placement, what its processes returned, and what only
a live run records of the job (set-up times, placements, how far it fell behind)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError

from unstall.live.pool import NodeSlot
from unstall.live.training import JobWork, SegmentOutcome
from unstall.loop import Job
from unstall.sched.base import Placement

# Wall seconds the other processes of a job get to notice that one of them failed.
FAILED_PEER_GRACE_S = 10.0


@dataclass
class Segment:
    """A job's run on one placement: its executors (rank order), their calls, when it began."""

    job: Job
    placement: Placement
    executors: list[NodeSlot]  # (node, slot) of each rank
    refs: list[Any]
    began_wall: float
    start_iteration: float
    segment_id: str = ""  # unique in the run: the executors' name for this segment
    iteration_s: float = 0.0  # emulated: trace seconds an iteration takes on this placement
    began_s: float = 0.0  # trace seconds: the instant the core started it


@dataclass
class JobRecord:
    """What only a live run knows of a job: measured set-up times (trace seconds), its
    placements over time, how far its processes fell behind."""

    startup_s: float = math.nan  # first segment: joining the group, building the model
    restore_s: list[float] = field(default_factory=list)  # later segments: join + restore
    # Every measured set-up in order: (placement, wall seconds, whether it restored, when the
    # segment began in trace seconds): what a start-up model is fitted on (``unstall live
    # calibrate``), in wall seconds because a set-up takes the machine's time whatever the
    # speedup.
    setups: list[tuple[Placement, float, bool, float]] = field(default_factory=list)
    checkpoint_s: list[float] = field(default_factory=list)  # stops: the final checkpoint
    placements: list[str] = field(default_factory=list)
    start_progress: list[float] = field(default_factory=list)  # share of the work done at each
    behind_s: float = 0.0  # emulated: trace seconds its processes fell behind the perf model
    work: JobWork | None = None
    scale: float = 1.0  # trace iterations per executor iteration


@dataclass
class Ended:
    """What a segment's processes returned: their outcomes, or the failure and its processes."""

    outcomes: list[SegmentOutcome]
    error: BaseException | None = None
    dead: list[NodeSlot] = field(default_factory=list)
    gone: set[int] = field(default_factory=set)  # nodes whose death Ray reported


def gather(segment: Segment, join_timeout_s: float) -> Ended:
    """What each process of the segment returned."""
    ended = Ended(outcomes=[])
    for node_slot, ref in zip(segment.executors, segment.refs, strict=True):
        # Once one process has failed the others are waiting in a collective that will
        # not complete: they get a short grace to notice, then they are replaced.
        grace = join_timeout_s if ended.error is None else FAILED_PEER_GRACE_S
        try:
            ended.outcomes.append(ray.get(ref, timeout=grace))
        except RayActorError as exc:
            ended.dead.append(node_slot)
            ended.error = ended.error or exc
            if node_died(exc):
                ended.gone.add(node_slot[0])
        except (RayError, GetTimeoutError) as exc:
            # A process that lost its peer reports that; the one that failed first says why.
            if ended.error is None or peer_gone(ended.error):
                ended.error = exc
            if isinstance(exc, GetTimeoutError):
                ended.dead.append(node_slot)  # stuck: it is replaced
    return ended


def any_failed(refs: list[Any]) -> bool:
    for ref in refs:
        try:
            ray.get(ref, timeout=0)
        except RayError:
            return True
    return False


def peer_gone(exc: BaseException) -> bool:
    """Whether a process failed only because another process of its job had gone."""
    text = str(exc)
    return "Connection closed by peer" in text or "Connection reset by peer" in text


def node_died(exc: BaseException) -> bool:
    """Whether Ray gave a node's death as the reason an executor died, or its process cannot
    be reached at all (a node that has gone, before Ray's heartbeats notice)."""
    text = str(exc)
    return any(
        sign in text
        for sign in ("node has died", "node was terminated", "failed to connect to all addresses")
    )
