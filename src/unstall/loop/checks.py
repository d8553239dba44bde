"""The rules a policy's decision must keep, checked before the engine carries any of it out.

A policy (a built-in one or a user's) that breaks one gets a :class:`PolicyError` naming the
policy, the job and the rule; the engine never corrects a decision on its own, because a schedule
quietly repaired would be measured as if the policy had made it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from unstall.config import is_real_number
from unstall.loop.jobs import ClusterState, Job, SimInvariantError
from unstall.sched.base import Decision, Migrate, Placement, Preempt, SetTimer, Start


class PolicyError(SimInvariantError):
    """A policy's decision broke a rule of the Policy protocol; names the policy, job and rule."""

    def __init__(self, policy: str, job_id: str | None, rule: str) -> None:
        self.policy = policy
        self.job_id = job_id
        self.rule = rule
        about = f" with job {job_id!r}" if job_id is not None else ""
        super().__init__(f"policy {policy!r} broke a rule{about}: {rule}")

    def __reduce__(self) -> tuple[object, ...]:
        # Picklable as it was built (see unstall.errors.ConfigError.__reduce__): a policy run in
        # a worker process reports its broken rule, not a failure to unpickle.
        return (type(self), (self.policy, self.job_id, self.rule), self.__dict__)


def check_decision_shape(policy: str, decision: object) -> Decision:
    """``decision`` itself: a :class:`Decision` that names each job at most once per kind."""
    if not isinstance(decision, Decision):
        raise PolicyError(
            policy, None, f"decide() must return a Decision, got {type(decision).__name__}"
        )
    for field, item in _FIELDS:
        _check_items(policy, field, getattr(decision, field), item)
    for field in ("starts", "preemptions", "migrations"):
        for order in getattr(decision, field):
            if type(order.job_id) is not str:  # also keeps a list out of the sets below
                raise PolicyError(
                    policy,
                    None,
                    f"{type(order).__name__}.job_id must be a job's id (a str), "
                    f"got {order.job_id!r} in Decision.{field}",
                )
    for kind, ids in (
        ("starts", (s.job_id for s in decision.starts)),
        ("preempts", (p.job_id for p in decision.preemptions)),
        ("migrates", (m.job_id for m in decision.migrations)),
    ):
        twice = _first_repeat(ids)
        if twice is not None:
            raise PolicyError(policy, twice, f"the decision {kind} it twice")
    for timer in decision.timers:
        if not is_real_number(timer.at_s) or not math.isfinite(timer.at_s):
            # NaN passes every comparison with now, and in the event heap it would keep the
            # clock from ever moving on: the run would loop for ever; infinity would end the
            # run at an infinite time.
            raise PolicyError(
                policy,
                None,
                f"timer {timer.key!r} set for {timer.at_s!r}; at_s must be a finite number",
            )
    telemetry = decision.telemetry
    if not isinstance(telemetry, tuple | list):
        raise PolicyError(
            policy,
            None,
            f"Decision.telemetry must be a tuple of (name, value) pairs, "
            f"got {type(telemetry).__name__}",
        )
    for pair in telemetry:
        if not isinstance(pair, tuple | list) or len(pair) != 2 or type(pair[0]) is not str:
            raise PolicyError(
                policy, None, f"telemetry holds (name, value) pairs, got {pair!r} among them"
            )
    return decision


# Each field of a Decision that holds items, and the type of its items.
_FIELDS: tuple[tuple[str, type], ...] = (
    ("starts", Start),
    ("preemptions", Preempt),
    ("migrations", Migrate),
    ("timers", SetTimer),
)


def _check_items(policy: str, field: str, items: object, item: type) -> None:
    """``items`` is a tuple or list of ``item``: a lone ``Start`` where a tuple of them belongs
    would otherwise fail as a bare TypeError inside the engine."""
    if isinstance(items, tuple | list):
        wrong = [i for i in items if not isinstance(i, item)]
        if not wrong:
            return
        got = f"a {type(wrong[0]).__name__} among them"
    elif isinstance(items, item):
        got = f"one {item.__name__}: write {field}=({item.__name__}(...),)"
    else:
        got = type(items).__name__
    raise PolicyError(
        policy, None, f"Decision.{field} must be a tuple of {item.__name__}, got {got}"
    )


def check_placement(
    policy: str, job: Job, placement: Placement, cluster: ClusterState
) -> Placement:
    """``placement`` is possible for ``job`` now: existing nodes, each once, no more GPUs than a
    node has or has free, and exactly the GPUs the job asks for. Returns it as the engine keeps
    it: a tuple of ``(node, gpus)`` tuples, also when the policy wrote lists."""
    node_gpus = cluster.layout.node_gpus
    # Placements key the speed model's caches and a job's view, so they must be hashable: a
    # policy's lists (``[(0, 4)]``, ``[[0, 4]]``) are converted here, once per start or
    # migration. Built-in policies give tuples, which the exact type test lets through as is.
    if type(placement) is not tuple or not all(
        type(share) is tuple and len(share) == 2 for share in placement
    ):
        placement = _as_pairs(policy, job, placement)
    seen: set[int] = set()
    total = 0
    for node, k in placement:
        if not isinstance(node, int) or isinstance(node, bool) or not 0 <= node < len(node_gpus):
            raise PolicyError(
                policy, job.job_id, f"node {node!r} does not exist (nodes 0..{len(node_gpus) - 1})"
            )
        if node in seen:
            raise PolicyError(policy, job.job_id, f"node {node} appears twice in its placement")
        seen.add(node)
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise PolicyError(
                policy, job.job_id, f"asks {k!r} GPUs of node {node}; must be an integer >= 1"
            )
        if k > node_gpus[node]:
            raise PolicyError(
                policy,
                job.job_id,
                f"asks {k} GPUs of node {node}, which has only {node_gpus[node]}",
            )
        if node in cluster.down:
            raise PolicyError(policy, job.job_id, f"node {node} has left the cluster")
        free = cluster.free_by_node[node]
        if k > free:
            raise PolicyError(
                policy,
                job.job_id,
                f"GPUs taken twice: node {node} has {free} free GPUs, the placement asks {k}",
            )
        total += k
    if total != job.num_gpus:
        raise PolicyError(
            policy,
            job.job_id,
            f"the job needs {job.num_gpus} GPUs, its placement {placement} gives {total}",
        )
    return placement


def _as_pairs(policy: str, job: Job, placement: object) -> Placement:
    """A placement written with lists as the tuple of pairs it stands for."""
    if not isinstance(placement, tuple | list) or not all(
        isinstance(share, tuple | list) and len(share) == 2 for share in placement
    ):
        raise PolicyError(
            policy, job.job_id, f"a placement is (node, GPUs) pairs, got {placement!r}"
        )
    return tuple((node, gpus) for node, gpus in placement)


def _first_repeat(ids: Iterable[str]) -> str | None:
    seen: set[str] = set()
    for job_id in ids:
        if job_id in seen:
            return job_id
        seen.add(job_id)
    return None
