"""What :func:`unstall.sim.simulate` makes of the trace, cluster, policy and congestion it is
handed, before anything runs.

Each is an object or its name, as a command line gives it: a trace file's path, a cluster preset
or topology file, a registered policy or ``FILE.py:Class``, a congestion level or schedule file;
each part resolves its own names (:func:`unstall.traces.resolve_trace`,
:func:`unstall.net.resolve_cluster`, :func:`unstall.sched.resolve_policy`,
:func:`unstall.sim.congestion.resolve_congestion`). A value of another type would otherwise fail
deep inside the run (``'DataFrame' object has no attribute 'arrays'``), or, for a policy, as a
crash of the policy itself: it raises :class:`~unstall.errors.ArgumentTypeError` (a TypeError)
naming the argument and what it takes. These checks run once per call, never per round.
"""

from __future__ import annotations

from typing import Any

from unstall.errors import ArgumentTypeError
from unstall.net.topology import TopologyConfig
from unstall.net.topology_files import resolve_cluster
from unstall.sched.base import Policy
from unstall.sched.resolve import resolve_policy
from unstall.sim.congestion import Congestion, resolve_congestion
from unstall.traces.resolve import resolve_trace
from unstall.traces.schema import Trace

OWNER = "simulate"


def resolve_arguments(
    trace: Any, cluster: Any, policy: Any, congestion: Any
) -> tuple[Trace, TopologyConfig, Policy, Congestion]:
    """The objects ``simulate`` runs on; the first argument of a type it does not take raises
    :class:`ArgumentTypeError` naming it."""
    if trace is None:  # resolve_trace's embedded trace; simulate's is never implied
        raise ArgumentTypeError(
            OWNER,
            "trace",
            "takes a Trace or a trace file's path; got None: unstall.traces.default_trace() is "
            "the embedded one",
        )
    resolved_trace = resolve_trace(trace, owner=OWNER, field="trace")
    resolved_cluster = resolve_cluster(cluster, owner=OWNER, field="cluster")
    resolved_policy = resolve_policy(policy, owner=OWNER, field="policy")
    label = getattr(resolved_policy, "name", None)
    if not isinstance(label, str):
        raise ArgumentTypeError(
            OWNER, "policy", f"its name must be a string, got {type(label).__name__}"
        )
    resolved_congestion = resolve_congestion(congestion, owner=OWNER, field="congestion")
    return resolved_trace, resolved_cluster, resolved_policy, resolved_congestion
