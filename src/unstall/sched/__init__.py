"""Scheduling policies: the Policy protocol, its decisions, the registry, the built-in policies.

What this part offers:

- :class:`Policy`: a scheduling policy is a pure function of a frozen :class:`ClusterSnapshot`
  (free GPUs by node and rack, queued and running jobs as :class:`JobView`, the time, background
  congestion) and an explicit ``random.Random``, returning a :class:`Decision`: jobs to
  :class:`Start` on a :class:`Placement` (``((node, gpus), ...)``), to :class:`Preempt` or to
  :class:`Migrate`, and timers to set (:class:`SetTimer`). No clock, no I/O, no global random
  state, so the same object can drive the simulator or a live cluster. :class:`PolicyBase`
  holds the protocol's defaults for a policy class to inherit (``needs_oracle`` False,
  ``tick_s`` None, a ``reset`` with nothing to forget); ``policy_capabilities(policy)`` reads
  those members of any policy, inheriting or not, as a backend does.
- :class:`ClusterLayout` (racks of nodes, each with its GPU count and GPU type) and
  :class:`Sensitivity` (a job's slowdown when spread, by congestion), which snapshots carry.
- :class:`FreeGpus` and :class:`Locality`: a policy's scratch copy of the free GPUs, with the
  placement rules the built-in policies use (best locality, consolidated only, first fit).
- The built-in policies :class:`Fifo`, :class:`FirstFit`, :class:`Consolidate`, :class:`Srtf`,
  :class:`Tiresias`, :class:`Gandiva` and :class:`Dally` (network-sensitive, knobs in
  :class:`DallyConfig`; registered as ``dally-fixed``, while ``dally`` adds the look-ahead tuner
  of :mod:`unstall.sim.lookahead`, its knobs and Dally's in ``DallyOptions``).
- The registry: :data:`POLICIES` (name -> :class:`PolicyEntry`), ``make_policy(name, **options)``
  (a registered name, or a policy class in user code, ``FILE.py:Class`` or
  ``package.module:Class``), ``register_policy(name, factory, description=...)`` and
  ``describe_policies()``.
- ``resolve_policy(policy, options=())``: a policy object as it is, or the policy a name or
  ``FILE.py:Class`` names, with ``(key, text)`` options typed by its options dataclass
  (``policy_options_class(name)``, ``policy_text_options(name, pairs)``); what every front door
  and command that takes a policy calls. ``labelled_policy("nodelay=dally-fixed")`` splits a
  comparison's entry that names a policy under a label of its own.

Example: the fifo policy starts the job at the head of the queue on one node.

>>> import random
>>> from unstall.sched import (
...     ClusterLayout, ClusterSnapshot, JobView, Policy, Sensitivity, make_policy,
... )
>>> layout = ClusterLayout.regular(racks=1, nodes_per_rack=2, gpus_per_node=4)
>>> job = JobView(
...     job_id="a", index=0, num_gpus=4, submit_s=0.0, model="resnet50",
...     sensitivity=Sensitivity.flat(1.5, 2.0), attained_gpu_s_at_change=0.0, changed_s=0.0,
...     running=False,
... )
>>> snapshot = ClusterSnapshot(
...     now=0.0, layout=layout, free_by_node=(2, 4), free_by_rack=(6,), queued=(job,), running=(),
... )
>>> make_policy("fifo").decide(snapshot, random.Random(0)).starts
(Start(job_id='a', placement=((1, 4),)),)
>>> dally = make_policy("dally-fixed", order="las", preemption=False)
>>> isinstance(dally, Policy), dally.config.order
(True, 'las')
"""

from unstall.sched.base import (
    CONGESTION_GRID,
    NO_DECISION,
    ClusterLayout,
    ClusterSnapshot,
    Decision,
    JobView,
    Migrate,
    NodeShare,
    Placement,
    Policy,
    PolicyBase,
    PolicyCapabilities,
    Preempt,
    Sensitivity,
    SetTimer,
    Start,
    policy_capabilities,
)
from unstall.sched.dally import Dally, DallyConfig
from unstall.sched.fifo import Consolidate, Fifo, FirstFit
from unstall.sched.free import FreeGpus
from unstall.sched.gandiva import Gandiva
from unstall.sched.placement import Locality
from unstall.sched.registry import (
    POLICIES,
    PolicyEntry,
    describe_policies,
    make_policy,
    policy_entry,
    policy_options_class,
    register_policy,
)
from unstall.sched.resolve import labelled_policy, policy_text_options, resolve_policy
from unstall.sched.srtf import Srtf
from unstall.sched.tiresias import Tiresias

__all__ = [
    "CONGESTION_GRID",
    "NO_DECISION",
    "POLICIES",
    "ClusterLayout",
    "ClusterSnapshot",
    "Consolidate",
    "Dally",
    "DallyConfig",
    "Decision",
    "Fifo",
    "FirstFit",
    "FreeGpus",
    "Gandiva",
    "JobView",
    "Locality",
    "Migrate",
    "NodeShare",
    "Placement",
    "Policy",
    "PolicyBase",
    "PolicyCapabilities",
    "PolicyEntry",
    "Preempt",
    "Sensitivity",
    "SetTimer",
    "Srtf",
    "Start",
    "Tiresias",
    "describe_policies",
    "labelled_policy",
    "make_policy",
    "policy_capabilities",
    "policy_entry",
    "policy_options_class",
    "policy_text_options",
    "register_policy",
    "resolve_policy",
]
