"""The scheduling core shared by the simulator, the live backend and the service.

What this part offers:

- :class:`SchedulingCore`: one run's jobs and rounds under one policy. The only writer of a
  job's lifecycle (arrive, start, preempt, migrate, finish, fail, requeue, cancel, with their
  guards); it builds each round's snapshot, wraps the policy's crashes, checks and applies its
  decisions, keeps its timers, ticks and telemetry, and emits each transition as a
  :class:`JobEvent`. ``run(until_s=...)`` runs instants up to a stop time; ``step()`` runs one.
- :class:`Driver`: what a driver supplies, a clock (``next_instant``, ``now``) and an executor
  (``collect``, ``launch``, ``stopping``, ``stop``); :class:`StopOutcome` and :class:`Collected`
  are its answers. The simulator (:mod:`unstall.sim.engine`), the live backend
  (:mod:`unstall.live.driver`) and the service are drivers.
- :class:`Job` (a job's facts, lifecycle and progress), :class:`JobState`, :class:`ClusterState`
  (free GPUs by node and rack, lost nodes), :class:`RunOutcome` (what the metrics read),
  :class:`Timeline`, :class:`RoundRecord`.
- The errors: :class:`SimInvariantError` (a state that must never exist), :class:`PolicyError`
  (a decision broke a rule of the Policy protocol), :class:`PolicyCrashError` (a policy raised).
"""

from unstall.loop.checks import PolicyError, check_decision_shape, check_placement
from unstall.loop.core import (
    MAX_ROUNDS_AT_ONE_INSTANT,
    CoreSettings,
    RunOutcome,
    SchedulingCore,
    placement_text,
)
from unstall.loop.driver import NOTHING, Collected, Driver, StopOutcome
from unstall.loop.events import EVENT_KINDS, JobEvent, RoundRecord
from unstall.loop.failures import PolicyCrashError, describe_failure, policy_crash
from unstall.loop.jobs import STATE_WORDS, ClusterState, Job, JobState, SimInvariantError
from unstall.loop.timeline import Timeline

__all__ = [
    "EVENT_KINDS",
    "MAX_ROUNDS_AT_ONE_INSTANT",
    "NOTHING",
    "STATE_WORDS",
    "ClusterState",
    "Collected",
    "CoreSettings",
    "Driver",
    "Job",
    "JobEvent",
    "JobState",
    "PolicyCrashError",
    "PolicyError",
    "RoundRecord",
    "RunOutcome",
    "SchedulingCore",
    "SimInvariantError",
    "StopOutcome",
    "Timeline",
    "check_decision_shape",
    "check_placement",
    "describe_failure",
    "placement_text",
    "policy_crash",
]
