"""The rules a policy's decision must keep, checked before the engine carries any of it out.

A policy (a built-in one or a user's) that breaks one gets a :class:`PolicyError` naming the
policy, the job and the rule; the engine never corrects a decision on its own, because a schedule
quietly repaired would be measured as if the policy had made it.
"""

from __future__ import annotations

from collections.abc import Iterable

from unstall.sched.base import Decision, Placement
from unstall.sim.state import ClusterState, SimInvariantError, SimJob


class PolicyError(SimInvariantError):
    """A policy's decision broke a rule of the Policy protocol; names the policy, job and rule."""

    def __init__(self, policy: str, job_id: str | None, rule: str) -> None:
        self.policy = policy
        self.job_id = job_id
        self.rule = rule
        about = f" with job {job_id!r}" if job_id is not None else ""
        super().__init__(f"policy {policy!r} broke a rule{about}: {rule}")


def check_decision_shape(policy: str, decision: object) -> Decision:
    """``decision`` itself: a :class:`Decision` that names each job at most once per kind."""
    if not isinstance(decision, Decision):
        raise PolicyError(
            policy, None, f"decide() must return a Decision, got {type(decision).__name__}"
        )
    for kind, ids in (
        ("starts", (s.job_id for s in decision.starts)),
        ("preempts", (p.job_id for p in decision.preemptions)),
        ("migrates", (m.job_id for m in decision.migrations)),
    ):
        twice = _first_repeat(ids)
        if twice is not None:
            raise PolicyError(policy, twice, f"the decision {kind} it twice")
    return decision


def check_placement(policy: str, job: SimJob, placement: Placement, cluster: ClusterState) -> None:
    """``placement`` is possible for ``job`` now: existing nodes, each once, no more GPUs than a
    node has or has free, and exactly the GPUs the job asks for."""
    node_gpus = cluster.layout.node_gpus
    if not isinstance(placement, tuple | list) or not all(
        isinstance(share, tuple | list) and len(share) == 2 for share in placement
    ):
        raise PolicyError(
            policy, job.job_id, f"a placement is (node, GPUs) pairs, got {placement!r}"
        )
    seen: set[int] = set()
    total = 0
    for node, k in placement:
        if not isinstance(node, int) or not 0 <= node < len(node_gpus):
            raise PolicyError(
                policy, job.job_id, f"node {node!r} does not exist (nodes 0..{len(node_gpus) - 1})"
            )
        if node in seen:
            raise PolicyError(policy, job.job_id, f"node {node} appears twice in its placement")
        seen.add(node)
        if not isinstance(k, int) or k < 1:
            raise PolicyError(policy, job.job_id, f"asks {k!r} GPUs of node {node}; must be >= 1")
        if k > node_gpus[node]:
            raise PolicyError(
                policy,
                job.job_id,
                f"asks {k} GPUs of node {node}, which has only {node_gpus[node]}",
            )
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


def _first_repeat(ids: Iterable[str]) -> str | None:
    seen: set[str] = set()
    for job_id in ids:
        if job_id in seen:
            return job_id
        seen.add(job_id)
    return None
