"""What :func:`unstall.sim.simulate` checks of the objects it is handed, before anything runs.

The front door takes objects, never names or files: a name where an object belongs would
otherwise fail deep inside the run (``'str' object has no attribute 'fastest_device'``), or, for
a policy, as a crash of the policy itself. These checks run once per call, never per round, and
each error names the argument and the call that builds what it wants from what was given.
"""

from __future__ import annotations

from collections.abc import Mapping
from os import PathLike

from unstall.errors import ConfigError
from unstall.net.topology import TOPOLOGY_PRESETS, TopologyConfig
from unstall.sched.registry import POLICIES
from unstall.sim.congestion import CONGESTION_LEVELS
from unstall.traces.schema import Trace, is_data_frame

OWNER = "simulate"

# The Policy protocol's members as an error names them, and whether each must be callable.
_POLICY_MEMBERS = (
    ("name", "name", False),
    ("needs_oracle", "needs_oracle", False),
    ("decide", "decide(snapshot, rng)", True),
    ("reset", "reset()", True),
)
_POLICY_WANTED = "must be a policy object (name, needs_oracle, decide(snapshot, rng), reset())"


def check_arguments(trace: object, cluster: object, policy: object, congestion: object) -> None:
    """Raise :class:`ConfigError` naming the first of these that is not what simulate takes."""
    _check_trace(trace)
    _check_cluster(cluster)
    _check_policy(policy)
    _check_congestion(congestion)


def _got(value: object) -> str:
    return type(value).__name__


def _check_trace(trace: object) -> None:
    if isinstance(trace, Trace):
        return
    wanted = "must be a Trace"
    if is_data_frame(trace):
        hint = "Trace.from_frame(df) builds one (unstall.traces.Trace)"
    elif isinstance(trace, str | PathLike):
        hint = "unstall.traces.read_trace(path) reads a trace file"
    else:
        hint = "unstall.traces: read_trace(path), Trace.from_frame(df) or default_trace()"
    raise ConfigError(OWNER, "trace", f"{wanted}; got {_got(trace)}: {hint}")


def _check_cluster(cluster: object) -> None:
    if isinstance(cluster, TopologyConfig):
        return
    wanted = (
        'must be a cluster topology (e.g. unstall.net.topology_preset("small"), '
        "load_topology(path) or topology_from_mapping({...}), a TopologyConfig)"
    )
    if isinstance(cluster, str) and cluster in TOPOLOGY_PRESETS:
        hint = f'use topology_preset("{cluster}")'
    elif isinstance(cluster, str | PathLike):
        hint = f"load_topology(path) reads a file; presets: {sorted(TOPOLOGY_PRESETS)}"
    elif isinstance(cluster, Mapping):
        hint = "topology_from_mapping(mapping) builds one"
    else:
        hint = ""
    raise ConfigError(
        OWNER, "cluster", f"{wanted}; got {_got(cluster)}" + (f": {hint}" if hint else "")
    )


def _check_policy(policy: object) -> None:
    if isinstance(policy, type):
        # A class has its methods as plain functions: decide would be called without ``self``.
        name = policy.__name__
        raise ConfigError(
            OWNER, "policy", f"{_POLICY_WANTED}; got a class, {name}: instantiate it ({name}())"
        )
    if isinstance(policy, str):
        hint = (
            f'use make_policy("{policy}")'
            if policy in POLICIES
            else f"make_policy(name) builds a registered one (known: {sorted(POLICIES)})"
        )
        raise ConfigError(OWNER, "policy", f"{_POLICY_WANTED}; got str: {hint}")
    missing = missing_policy_members(policy)
    if missing:
        raise ConfigError(
            OWNER,
            "policy",
            f"{_POLICY_WANTED}; got {_got(policy)}, which lacks {' and '.join(missing)}",
        )
    label = getattr(policy, "name", None)
    if not isinstance(label, str):
        raise ConfigError(OWNER, "policy", f"its name must be a string, got {_got(label)}")


def missing_policy_members(policy: object) -> list[str]:
    """The members of the Policy protocol that ``policy`` lacks (its methods must be callable),
    as an error names them: only what is missing, so a user fixes what is wrong."""
    return [
        shown
        for attr, shown, call in _POLICY_MEMBERS
        if not hasattr(policy, attr) or (call and not callable(getattr(policy, attr)))
    ]


def _check_congestion(congestion: object) -> None:
    if callable(getattr(congestion, "schedule", None)) and hasattr(congestion, "name"):
        return
    wanted = 'must be a congestion (e.g. congestion_level("medium"), or a CongestionSchedule)'
    if isinstance(congestion, str):
        hint = (
            f'use congestion_level("{congestion}")'
            if congestion in CONGESTION_LEVELS
            else f"congestion_level(name) builds a level (known: {sorted(CONGESTION_LEVELS)})"
        )
    elif isinstance(congestion, int | float) and not isinstance(congestion, bool):
        hint = (
            f"a constant share is CongestionSchedule(times_s=(0.0,), fractions=({congestion!r},))"
        )
    else:
        hint = ""
    raise ConfigError(
        OWNER, "congestion", f"{wanted}; got {_got(congestion)}" + (f": {hint}" if hint else "")
    )
