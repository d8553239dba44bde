"""The service: the store, the scheduler and who may do what, behind the HTTP API.

Users are who their token says (``--token-file``: ``TOKEN`` for an admin, ``TOKEN USER`` for a
user); without a token file (loopback only) a request names its user. A job's user is fixed when
it is submitted; only that user or an admin may cancel it.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from unstall.errors import UnstallError
from unstall.live.cluster import LiveCluster
from unstall.sched.reasons import generic_reason
from unstall.sched.registry import make_policy, policy_entry
from unstall.service.estimates import Estimates, forecast_policy
from unstall.service.group_commit import GroupCommit
from unstall.service.models import (
    ClusterNode,
    ClusterRecord,
    JobDetail,
    JobRecord,
    JobSpec,
    WhatIf,
    WhatIfPolicy,
)
from unstall.service.scheduler import JobStatus, Scheduler, Snapshot
from unstall.service.store import JobStore, StoredJob
from unstall.sim.forecast import Forecast

# Policies one what-if may compare besides the serving one, at most (each is a simulation).
MAX_WHATIF_POLICIES = 8

# Bytes of a job's log one request returns at most.
LOG_CHUNK = 256 * 1024


class ServiceError(UnstallError):
    """A request the service refuses: ``status`` is the HTTP status, the message says why."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


@dataclass(frozen=True)
class Caller:
    """Who sent a request: a user, an admin, or anyone (no tokens: loopback)."""

    user: str
    admin: bool


def read_tokens(path: Path) -> dict[str, Caller]:
    """``TOKEN`` (an admin) or ``TOKEN USER`` per line; ``#`` starts a comment."""
    tokens: dict[str, Caller] = {}
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise UnstallError(f"{path}: cannot read the token file ({exc.strerror})") from exc
    for number, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) > 2 or len(words[0]) < 16:
            raise UnstallError(
                f"{path}:{number}: a line is TOKEN or TOKEN USER, tokens of 16 characters or more"
            )
        tokens[words[0]] = Caller(
            user=words[1] if len(words) == 2 else "admin", admin=len(words) == 1
        )
    if not tokens:
        raise UnstallError(f"{path}: no token in the token file")
    return tokens


class Service:
    """What the API calls (see the module docstring)."""

    def __init__(
        self, *, store: JobStore, scheduler: Scheduler, tokens: dict[str, Caller] | None
    ) -> None:
        self.store = store
        self.scheduler = scheduler
        self.tokens = tokens
        self.stored: dict[str, StoredJob] = {}
        # Submissions share the store's transactions (an answered one is durable: see
        # group_commit); the lock keeps the store's order, ``stored``'s and the inbox's one.
        self.submissions: GroupCommit[JobSpec, JobRecord] = GroupCommit(
            self.submit_many, name="unstall-submissions"
        )
        self._intake = threading.Lock()
        # Pending stored jobs the scheduler has not taken in yet (as of the latest snapshot
        # read), in the order it takes them in: their places follow its queue's.
        self._not_taken_in: collections.deque[str] = collections.deque()

    def load(self) -> None:
        """The store's jobs, as the API answers for them until the scheduler has them."""
        self.stored = self.store.load()
        self._not_taken_in = collections.deque(
            job_id for job_id, stored in self.stored.items() if stored.state == "pending"
        )

    def start(self, cluster: LiveCluster) -> None:
        """The scheduler on ``cluster``, with the jobs the store held."""
        self.scheduler.start(dict(self.stored), cluster)

    def caller(self, token: str | None, user: str | None) -> Caller:
        """Who this request is from: its token's user, or (no tokens) the user it names."""
        if self.tokens is None:
            return Caller(user=user or "anonymous", admin=False)
        if token is None or token not in self.tokens:
            raise ServiceError(401, "a valid token is needed: Authorization: Bearer TOKEN")
        return self.tokens[token]

    # --- jobs ----------------------------------------------------------------------------------

    def submit(self, spec: JobSpec, caller: Caller) -> JobRecord:
        """Store ``spec`` (sharing a transaction with the submissions that come with it) and
        hand it to the scheduler; its record, once it is durable."""
        return self.submissions.submit(self.prepare(spec, caller))

    async def submit_async(self, spec: JobSpec, caller: Caller) -> JobRecord:
        """:meth:`submit`, waiting in the running event loop."""
        return await self.submissions.submit_async(self.prepare(spec, caller))

    def prepare(self, spec: JobSpec, caller: Caller) -> JobSpec:
        """The spec as it is stored: its user (the token's, or the caller's where it names
        none) and name; a ServiceError (422) where the cluster can never run it."""
        if self.tokens is not None and not caller.admin:
            spec = spec.model_copy(update={"user": caller.user})  # fixed by the token
        elif not spec.user:
            spec = spec.model_copy(update={"user": caller.user})
        if not spec.name:
            spec = spec.model_copy(update={"name": spec.model or spec.train or spec.model_fn or ""})
        why = self.scheduler.check_spec(spec)
        if why is not None:
            raise ServiceError(422, why)
        return spec

    def submit_many(self, specs: Sequence[JobSpec]) -> list[JobRecord]:
        """Prepared specs stored in one transaction, then handed to the scheduler; their
        records. Each new job's place is the scheduler's queue and the submissions it has not
        taken in before it (as of the snapshot read before they reach it): no walk over the
        stored jobs."""
        with self._intake:
            snapshot = self.scheduler.snapshot
            at = time.time()
            ids = self.store.submit_many([(spec, at) for spec in specs])
            new = [
                StoredJob(seq=0, id=job_id, spec=spec, submitted_at=at)
                for job_id, spec in zip(ids, specs, strict=True)
            ]
            ahead = len(snapshot.queue) + len(self._untaken(snapshot))
            for stored in new:
                self.stored[stored.id] = stored
                self._not_taken_in.append(stored.id)
            self.scheduler.submit_many([(s.id, s.spec, at) for s in new])
        positions = {stored.id: ahead + i for i, stored in enumerate(new, 1)}
        return [self._record(stored, snapshot, positions) for stored in new]

    def close(self) -> None:
        """Write the submissions waiting, and stop taking more."""
        self.submissions.close()

    def jobs(self, *, state: str | None = None, user: str | None = None) -> list[JobRecord]:
        snapshot = self.scheduler.snapshot
        estimates = self.scheduler.estimates
        positions = self._positions(snapshot)
        records = []
        for stored in list(self.stored.values()):
            if user is not None and stored.spec.user != user:
                continue
            record = self._record(stored, snapshot, positions, estimates)
            if state is None or record.state == state:
                records.append(record)
        return records

    def job(self, job_id: str) -> JobDetail:
        stored = self._stored(job_id)
        record = self._record(stored, self.scheduler.snapshot)
        return JobDetail(**record.model_dump(), spec=stored.spec, events=self.store.events(job_id))

    def cancel(self, job_id: str, caller: Caller) -> JobRecord:
        stored = self._stored(job_id)
        if not caller.admin and caller.user != stored.spec.user:
            raise ServiceError(
                403, f"job {job_id} is {stored.spec.user}'s: only they or an admin may cancel it"
            )
        record = self._record(stored, self.scheduler.snapshot)
        if record.state in ("succeeded", "failed", "cancelled"):
            raise ServiceError(409, f"job {job_id} has ended ({record.state}): nothing to cancel")
        self.store.record([(job_id, time.time(), "cancel_requested", caller.user)])
        self.scheduler.cancel(job_id, caller.user)
        return record

    def logs(self, job_id: str, offset: int = 0) -> tuple[str, int]:
        """The job's log from byte ``offset`` (at most LOG_CHUNK bytes), and the next offset."""
        self._stored(job_id)
        path = self.store.log_path(job_id)
        if not path.exists():
            return "", offset
        with open(path, "rb") as log:
            log.seek(offset)
            data = log.read(LOG_CHUNK)
        return data.decode(errors="replace"), offset + len(data)

    def cluster(self) -> ClusterRecord:
        snapshot = self.scheduler.snapshot
        layout = self.scheduler.layout
        nodes = []
        for node in range(layout.num_nodes):
            gpus = layout.node_gpus[node]
            nodes.append(
                ClusterNode(
                    index=node,
                    rack=layout.node_rack[node],
                    gpus=gpus,
                    gpu_type=layout.node_type[node],
                    lost=node in snapshot.lost_nodes,
                    jobs=[snapshot.holders.get((node, slot), "") for slot in range(gpus)],
                )
            )
        lost = sum(layout.node_gpus[n] for n in snapshot.lost_nodes)
        free = sum(snapshot.free_by_node)
        states = [status.state for status in snapshot.jobs.values()]
        return ClusterRecord(
            policy=self.scheduler.policy.name,
            total_gpus=layout.total_gpus,
            busy_gpus=layout.total_gpus - free - lost,
            free_gpus=free,
            lost_gpus=lost,
            pending=len(self.stored) - len(states) + states.count("pending"),
            running=states.count("running"),
            nodes=nodes,
        )

    def stats(self) -> dict[str, object]:
        """How the scheduler is doing: its rounds and what the latest ones cost."""
        scheduler = self.scheduler
        costs = sorted(cost for cost, _ in scheduler.round_costs)
        queued = [q for _, q in scheduler.round_costs]

        def quantile(q: float) -> float | None:
            return 1000 * costs[min(len(costs) - 1, int(q * len(costs)))] if costs else None

        return {
            "ready": scheduler.ready.is_set(),
            "policy": scheduler.policy.name,
            "jobs": len(self.stored),
            "rounds": scheduler.core.rounds,
            "recent_rounds": len(costs),
            "round_ms_p50": quantile(0.5),
            "round_ms_p99": quantile(0.99),
            "round_ms_max": 1000 * costs[-1] if costs else None,
            "queued_max": max(queued) if queued else 0,
        }

    # --- records -------------------------------------------------------------------------------

    def _stored(self, job_id: str) -> StoredJob:
        stored = self.stored.get(job_id)
        if stored is None:
            raise ServiceError(404, f"no job {job_id!r}")
        return stored

    def _record(
        self,
        stored: StoredJob,
        snapshot: Snapshot,
        positions: dict[str, int] | None = None,
        estimates: Estimates | None = None,
    ) -> JobRecord:
        spec = stored.spec
        status = snapshot.jobs.get(stored.id)
        if status is None:  # not yet taken in by the scheduler, or ended before this start
            status = _from_store(stored)
        estimates = estimates if estimates is not None else self.scheduler.estimates
        position = None
        reason = ""
        start = end = None
        if status.state == "pending":
            positions = positions if positions is not None else self._positions(snapshot)
            position = positions.get(stored.id, len(positions) + 1)
            reason = snapshot.reasons.get(stored.id) or self._reason(spec, snapshot, position)
            start = estimates.starts.get(stored.id)
            if start is not None:  # an estimate made before now, of a start not yet made
                start = max(start, snapshot.at)
        if status.state in ("pending", "running"):
            end = estimates.ends.get(stored.id)
            if end is not None:
                end = max(end, start or snapshot.at)
        total = status.total_iters
        return JobRecord(
            id=stored.id,
            name=spec.name,
            user=spec.user,
            state=status.state,  # type: ignore[arg-type]
            gpus=spec.gpus,
            priority=spec.priority,
            model=spec.model or spec.train or spec.model_fn or "",
            placement=status.placement,
            position=position,
            reason=reason,
            progress=min(1.0, status.done_iters / total) if total > 0 else 0.0,
            iterations_done=status.done_iters,
            iterations_total=total,
            restarts=status.restarts,
            submitted_at=stored.submitted_at,
            started_at=status.started_at,
            ended_at=status.ended_at,
            error=status.error,
            estimated_start=start,
            estimated_end=end,
            estimated_run_s=estimates.run_s.get(stored.id),
            estimated_start_at_submit=self.scheduler.estimator.first_starts.get(stored.id),
        )

    def _positions(self, snapshot: Snapshot) -> dict[str, int]:
        """Each pending job's place: the scheduler's queue, then the submissions it has not
        taken in yet, in the order they came."""
        positions = {job_id: i for i, job_id in enumerate(snapshot.queue, 1)}
        with self._intake:
            untaken = list(self._untaken(snapshot))
        for job_id in untaken:
            positions.setdefault(job_id, len(positions) + 1)
        return positions

    def _untaken(self, snapshot: Snapshot) -> collections.deque[str]:
        """The pending stored jobs not in ``snapshot``, in order (the caller holds the intake
        lock). The scheduler takes jobs in in the order they were stored and a snapshot's jobs
        only grow, so the ones it has taken in are dropped from the front, each once."""
        waiting = self._not_taken_in
        while waiting and waiting[0] in snapshot.jobs:
            waiting.popleft()
        return waiting

    def _reason(self, spec: JobSpec, snapshot: Snapshot, position: int) -> str:
        """Why a job the policy has not been asked about yet waits (just submitted)."""
        if not self.scheduler.ready.is_set():
            return "the cluster's executors are coming up"
        return generic_reason(
            spec.gpus, sum(snapshot.free_by_node), position, self.scheduler.policy.name
        )

    # --- what-if -------------------------------------------------------------------------------

    def whatif(self, policies: list[str]) -> WhatIf:
        """The queue as the scheduler last took it, forecast under the serving policy and
        each of ``policies`` (registered names: the service never loads code for a request)."""
        if len(policies) > MAX_WHATIF_POLICIES:
            raise ServiceError(
                422, f"policy: at most {MAX_WHATIF_POLICIES} policies, {len(policies)} given"
            )
        fresh = []
        for name in policies:
            try:
                policy_entry(name)
            except UnstallError as exc:
                raise ServiceError(422, f"policy: {str(exc).split(': ', 1)[-1]}") from exc
            made = make_policy(name)
            fresh.append(forecast_policy(made, made))
        scheduler = self.scheduler
        state = scheduler.last_input
        if not scheduler.ready.is_set() or state is None:
            raise ServiceError(503, "the scheduler is starting: no state to forecast yet")
        try:
            serving = forecast_policy(scheduler.policy, scheduler.estimator.template)
        except Exception as exc:  # a policy of the user's own that cannot be copied
            raise ServiceError(422, f"policy: {exc}") from exc
        forecasts = scheduler.whatif([serving, *fresh])

        def span(seconds: float) -> float | None:
            return seconds / state.speedup if math.isfinite(seconds) else None

        def answer(forecast: Forecast, is_serving: bool) -> WhatIfPolicy:
            return WhatIfPolicy(
                policy=forecast.policy if not is_serving else scheduler.policy.name,
                serving=is_serving,
                avg_jct_s=span(forecast.avg_jct_s),
                avg_wait_s=span(forecast.avg_wait_s),
                makespan=state.wall(forecast.makespan_s),
                moves=forecast.moves,
                starts=state.walls(forecast.starts),
                ends=state.walls(forecast.ends),
            )

        return WhatIf(
            at=state.wall_at_now,
            running=sum(1 for j in state.jobs if j.placement),
            waiting=[j.job_id for j in state.jobs if j.waiting],
            policies=[answer(f, i == 0) for i, f in enumerate(forecasts)],
        )


def _from_store(stored: StoredJob) -> JobStatus:
    spec = stored.spec
    total = float(spec.iterations) if spec.iterations is not None else 0.0
    return JobStatus(
        state=stored.state,
        placement=stored.placement,
        done_iters=total if stored.state == "succeeded" else 0.0,
        total_iters=total,
        restarts=stored.restarts,
        started_at=stored.started_at,
        ended_at=stored.ended_at,
        error=stored.error,
    )
