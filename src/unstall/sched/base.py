"""The contract between a scheduling policy and whatever runs its decisions.

A policy is a pure function of a frozen :class:`ClusterSnapshot` returning a :class:`Decision`:
no clock, no I/O, no global random state (randomness comes in as an explicit ``random.Random``).
The simulator is one backend that builds snapshots and carries decisions out; a live cluster can be
another, so nothing here knows about simulated time beyond ``snapshot.now``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

# (node index, number of GPUs on that node); a placement is a tuple of these, nodes ascending.
NodeShare = tuple[int, int]
Placement = tuple[NodeShare, ...]

# Background congestion levels at which a job's network sensitivity is tabulated.
CONGESTION_GRID: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 0.9, 0.95)


@dataclass(frozen=True, slots=True)
class Sensitivity:
    """A job's network sensitivity: its iteration time spread over several nodes of one rack
    (``node``) or over racks (``rack``) divided by its consolidated iteration time, at each
    congestion of :data:`CONGESTION_GRID` (linear in between). Communication hidden behind
    compute on idle links can surface under congestion, so one figure would not do.
    ``consolidated`` is the consolidated placement's own iteration time at each congestion over
    its time on idle links (1 for a job on one node, which crosses no network link)."""

    node: tuple[float, ...]
    rack: tuple[float, ...]
    consolidated: tuple[float, ...] = ()

    @classmethod
    def flat(cls, node: float, rack: float) -> Sensitivity:
        """The same slowdowns at every congestion (hand-made jobs in tests)."""
        n = len(CONGESTION_GRID)
        return cls(node=(node,) * n, rack=(rack,) * n, consolidated=(1.0,) * n)

    def at(self, across_racks: bool, congestion: float = 0.0) -> float:
        return self._interpolate(self.rack if across_racks else self.node, congestion)

    def consolidated_at(self, congestion: float) -> float:
        """The consolidated placement's iteration time at ``congestion`` over its time on idle
        links (1 for a job on one node, and where the table is not given)."""
        return self._interpolate(self.consolidated, congestion) if self.consolidated else 1.0

    def spread_slowdown(self, across_racks: bool, congestion: float, sharing: int) -> float:
        """Slowdown vs consolidated (at ``congestion``) of a spread placement whose busiest NIC
        already carries ``sharing`` other spread jobs: a fair share of what congestion leaves
        is ``1/(sharing+1)`` of it, which acts as a higher congestion on this job's links."""
        effective = 1.0 - (1.0 - congestion) / (1 + sharing)
        cons = self.consolidated or (1.0,) * len(CONGESTION_GRID)
        own = self._interpolate(cons, effective) / self._interpolate(cons, congestion)
        return self.at(across_racks, effective) * own

    @staticmethod
    def _interpolate(table: tuple[float, ...], congestion: float) -> float:
        grid = CONGESTION_GRID
        if congestion <= grid[0]:
            return table[0]
        for i in range(1, len(grid)):
            if congestion <= grid[i]:
                w = (congestion - grid[i - 1]) / (grid[i] - grid[i - 1])
                return table[i - 1] + w * (table[i] - table[i - 1])
        return table[-1]


@dataclass(frozen=True, slots=True, kw_only=True)
class JobView:
    """What a policy may know of one job, fixed from the moment the job last changed state.

    Running jobs' service grows with time; use :meth:`attained_gpu_s` with the snapshot's ``now``.
    ``sensitivity`` is the job's network sensitivity (see :class:`Sensitivity`).
    """

    job_id: str
    index: int  # dense index used by the backend; stable for the job's life
    num_gpus: int
    submit_s: float
    model: str
    sensitivity: Sensitivity
    attained_gpu_s_at_change: float
    changed_s: float
    running: bool
    placement: Placement = ()
    preemptions: int = 0
    # Its user's priority (higher first), where jobs have one (the service's): 0 for a trace's.
    priority: int = 0
    # The job's speed on each GPU type of the cluster, ``(type, speed)`` pairs: the work it
    # does in a second on a consolidated placement of that type, over the work it does in a
    # second on the GPU type its duration was measured on (so 1.0 there; a K80 might give a
    # ResNet-50 0.16). Filled by the simulator from its speed model; empty when the backend
    # does not know (read it with :meth:`speed_on`, which then says 1.0).
    type_speeds: tuple[tuple[str, float], ...] = ()
    # Only for policies that declare ``needs_oracle`` (SRTF is an oracle baseline): the seconds
    # of work left at the consolidated speed at ``changed_s``, and how many of those seconds each
    # second of running removes (1 on the consolidated placement, less when slowed down) from
    # ``resume_s`` on (a restarted job first restores its checkpoint). None for fair policies.
    oracle_remaining_s: float | None = None
    oracle_rate: float = 0.0
    oracle_resume_s: float = 0.0

    def attained_gpu_s(self, now: float) -> float:
        """GPU-seconds of service received up to ``now``."""
        if self.running:
            return self.attained_gpu_s_at_change + (now - self.changed_s) * self.num_gpus
        return self.attained_gpu_s_at_change

    def remaining_oracle_s(self, now: float) -> float:
        """Seconds of work left at ``now`` at the consolidated speed (oracle policies only)."""
        if self.oracle_remaining_s is None:
            raise ValueError(f"job {self.job_id}: no oracle figures (policy lacks needs_oracle)")
        if not self.running or now <= self.oracle_resume_s:
            return self.oracle_remaining_s
        return max(0.0, self.oracle_remaining_s - (now - self.oracle_resume_s) * self.oracle_rate)

    def speed_on(self, gpu_type: str, default: float = 1.0) -> float:
        """The job's speed on ``gpu_type`` (see ``type_speeds``), ``default`` when unknown."""
        for kind, speed in self.type_speeds:
            if kind == gpu_type:
                return speed
        return default

    def waiting_s(self, now: float) -> float:
        """Seconds since the job last entered the queue (0 when running)."""
        return 0.0 if self.running else now - self.changed_s

    @property
    def nodes(self) -> int:
        return len(self.placement)

    @property
    def slowdown_node_spread(self) -> float:
        """Slowdown spread over nodes of one rack, on idle links."""
        return self.sensitivity.node[0]

    @property
    def slowdown_rack_spread(self) -> float:
        """Slowdown spread over racks, on idle links."""
        return self.sensitivity.rack[0]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterLayout:
    """The fixed shape of the cluster: racks of nodes, each node with its GPU count
    (``node_gpus``) and GPU type (``node_type``).

    ``gpus_per_node`` is the largest node's GPU count (every node's, on a regular cluster): a job
    of at most that many GPUs may fit on one node. Left empty, ``node_gpus`` is
    ``gpus_per_node`` for every node and ``node_type`` is "" (one unnamed type).
    """

    gpus_per_node: int
    node_rack: tuple[int, ...]  # rack of each node
    rack_nodes: tuple[tuple[int, ...], ...]  # nodes of each rack, ascending
    node_gpus: tuple[int, ...] = ()
    node_type: tuple[str, ...] = ()
    # Derived: whether every node has the same GPU count, and the same GPU type; GPUs per rack.
    uniform: bool = field(default=True, init=False)
    one_type: bool = field(default=True, init=False)
    rack_gpus: tuple[int, ...] = field(default=(), init=False)

    def __post_init__(self) -> None:
        n = len(self.node_rack)
        gpus = self.node_gpus or (self.gpus_per_node,) * n
        types = self.node_type or ("",) * n
        if len(gpus) != n or len(types) != n:
            raise ValueError("ClusterLayout: node_gpus and node_type need one entry per node")
        object.__setattr__(self, "node_gpus", gpus)
        object.__setattr__(self, "node_type", types)
        object.__setattr__(self, "uniform", len(set(gpus)) <= 1)
        object.__setattr__(self, "one_type", len(set(types)) <= 1)
        rack_gpus = tuple(sum(gpus[node] for node in nodes) for nodes in self.rack_nodes)
        object.__setattr__(self, "rack_gpus", rack_gpus)

    @classmethod
    def regular(cls, *, racks: int, nodes_per_rack: int, gpus_per_node: int) -> ClusterLayout:
        node_rack = tuple(r for r in range(racks) for _ in range(nodes_per_rack))
        return cls.from_node_rack(node_rack, gpus_per_node)

    @classmethod
    def from_node_rack(cls, node_rack: tuple[int, ...], gpus_per_node: int) -> ClusterLayout:
        return cls(
            gpus_per_node=gpus_per_node, node_rack=node_rack, rack_nodes=_rack_nodes(node_rack)
        )

    @classmethod
    def from_nodes(
        cls, *, node_rack: tuple[int, ...], node_gpus: tuple[int, ...], node_type: tuple[str, ...]
    ) -> ClusterLayout:
        """Nodes of their own GPU count and type (a heterogeneous cluster)."""
        return cls(
            gpus_per_node=max(node_gpus, default=0),
            node_rack=node_rack,
            rack_nodes=_rack_nodes(node_rack),
            node_gpus=node_gpus,
            node_type=node_type,
        )

    @property
    def num_nodes(self) -> int:
        return len(self.node_rack)

    @property
    def num_racks(self) -> int:
        return len(self.rack_nodes)

    @property
    def total_gpus(self) -> int:
        return sum(self.node_gpus)

    @property
    def types(self) -> tuple[str, ...]:
        """The GPU types, in node order of first appearance."""
        return tuple(dict.fromkeys(self.node_type))

    def min_nodes(self, num_gpus: int) -> int:
        """The fewest nodes that can hold ``num_gpus`` GPUs."""
        if self.uniform:
            return -(-num_gpus // self.gpus_per_node)
        count = 0
        for gpus in sorted(self.node_gpus, reverse=True):
            if num_gpus <= 0:
                break
            num_gpus -= gpus
            count += 1
        return count + (1 if num_gpus > 0 else 0)


def _rack_nodes(node_rack: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """Each rack's nodes, in node order: one pass over the nodes (a pass per rack was quadratic,
    a minute at 100,000 nodes)."""
    racks = max(node_rack) + 1 if node_rack else 0
    members: list[list[int]] = [[] for _ in range(racks)]
    for node, rack in enumerate(node_rack):
        members[rack].append(node)
    return tuple(tuple(nodes) for nodes in members)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSnapshot:
    """The cluster as a policy sees it at one instant; built fresh per round.

    ``queued``, ``running`` and ``spread_running`` may be live read-only views of the backend's
    own collections (the simulator passes dict views: copying thousands of views every round
    would be a large share of a run's time). They hold still while ``decide`` runs and change once
    its decision is carried out, so a policy must not keep them past the round. They index and
    slice as tuples do.
    """

    now: float
    layout: ClusterLayout
    free_by_node: tuple[int, ...]
    free_by_rack: tuple[int, ...]
    queued: Sequence[JobView]  # in arrival order (policies reorder as they see fit)
    running: Sequence[JobView]
    # Fraction of bandwidth that background traffic takes on node NICs and rack uplinks now.
    congestion: float = 0.0
    # How many running jobs spread over several nodes use each node (and so its NIC), and those
    # jobs themselves (a subset of ``running``).
    spread_jobs_by_node: tuple[int, ...] = ()
    spread_running: Sequence[JobView] = ()
    # Jobs that finished since the previous round, as they were last seen running: what a
    # policy may learn from (run times), without scanning every running job each round.
    finished: tuple[JobView, ...] = ()
    # Timers the policy set earlier that fired at this instant (keys as the policy gave them).
    fired_timers: tuple[str, ...] = ()

    @property
    def free_gpus(self) -> int:
        return sum(self.free_by_rack)


@dataclass(frozen=True, slots=True)
class Start:
    """Start (or restart) a queued job on exactly these GPUs."""

    job_id: str
    placement: Placement


@dataclass(frozen=True, slots=True)
class Preempt:
    """Stop a running job and put it back in the queue (it pays the checkpoint/restore cost)."""

    job_id: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Migrate:
    """Move a running job to other GPUs (pays the checkpoint/restore cost, keeps its progress)."""

    job_id: str
    placement: Placement
    reason: str = ""


@dataclass(frozen=True, slots=True)
class SetTimer:
    """Ask to be called again at ``at_s`` even if nothing else happens then."""

    at_s: float
    key: str


@dataclass(frozen=True, slots=True)
class Decision:
    """What a policy wants done now. The backend applies preemptions, then migrations, then starts.

    Resources freed by preemptions and migrations in the same decision may be used by its starts.
    """

    starts: tuple[Start, ...] = ()
    preemptions: tuple[Preempt, ...] = ()
    migrations: tuple[Migrate, ...] = ()
    timers: tuple[SetTimer, ...] = ()
    # Named numbers the policy wants recorded over time (e.g. Dally's tuned delay timers).
    telemetry: tuple[tuple[str, float], ...] = field(default=())

    @property
    def empty(self) -> bool:
        return not (self.starts or self.preemptions or self.migrations or self.timers)


NO_DECISION = Decision()


@runtime_checkable
class Policy(Protocol):
    """A scheduling policy. ``decide`` must be a pure function of its inputs and own state.

    A policy may keep state between calls built only from snapshots it was shown (never from the
    future), e.g. Dally's run history; ``reset`` returns it to its initial state.

    Optional members, which a backend reads through :func:`policy_capabilities` (a policy
    without them gets the defaults; :class:`PolicyBase` declares them for a class to inherit):

    - ``tick_s: float | None``, default None: extra scheduling rounds this often (seconds)
      while jobs wait; None: rounds only on events (arrivals, finishes, congestion changes,
      the policy's own timers).

    ``needs_oracle`` (required here) is read the same way, default False.
    """

    name: str
    needs_oracle: bool

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision: ...

    def reset(self) -> None: ...


class PolicyBase:
    """The Policy protocol's defaults, for a policy class to inherit (the built-in policies
    do): no oracle figures, rounds only on events, nothing to reset. A subclass sets ``name``
    and defines ``decide``; it overrides any default it needs otherwise. A policy need not
    inherit this: a backend reads the same defaults for it (:func:`policy_capabilities`)."""

    # Whether the policy reads the oracle figures of job views (what is left of each job's
    # work): a backend fills them only then. Only oracle baselines (SRTF) do.
    needs_oracle: bool = False
    # Extra scheduling rounds this often (seconds) while jobs wait; None: only on events.
    tick_s: float | None = None

    def reset(self) -> None:
        """Return to the initial state: a policy that keeps state between rounds overrides it."""


@dataclass(frozen=True, slots=True)
class PolicyCapabilities:
    """What a backend needs to know of a policy beyond ``decide`` and ``reset`` (see
    :class:`PolicyBase` for each member's meaning and default)."""

    needs_oracle: bool
    tick_s: float | None


def policy_capabilities(policy: object) -> PolicyCapabilities:
    """``policy``'s optional members, with :class:`PolicyBase`'s defaults for those it lacks
    (a user's policy may implement only ``name``, ``needs_oracle``, ``decide`` and ``reset``)."""
    return PolicyCapabilities(
        needs_oracle=bool(getattr(policy, "needs_oracle", PolicyBase.needs_oracle)),
        tick_s=getattr(policy, "tick_s", PolicyBase.tick_s),
    )
