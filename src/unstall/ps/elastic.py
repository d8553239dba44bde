"""PSLD's elastic scaling module: carries the controller's decisions out while training goes on.

A strategy may hand a run a :class:`Controller`, which the run calls at every iteration
boundary with the cluster and the iteration's telemetry (and, if it is a :class:`WarmStarter`,
once before the first iteration to place the chunks). :class:`ElasticPSLD` is PSLD's: it probes
the servers and places the chunks by their predicted speeds before the first iteration; after
every iteration it feeds the servers' timings to the pure :class:`~unstall.ps.psld.controller.
PSLDController`, asks for a decision and applies it through the :class:`~unstall.ps.coordinator.
PSCluster` API before the next iteration starts: chunk state (parameters and momentum) moves
server to server as ObjectRefs, new servers start with the spec the scenario gives their id,
drained servers stop, and the workers' routing switches at the boundary. Each decision's pause is
timed, recorded and fed back to the controller (which learns what a decision costs); the
run's result carries the summary.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from unstall.ps.coordinator import IterationTelemetry, PSCluster, Tripwire
from unstall.ps.psld.config import ControllerConfig
from unstall.ps.psld.controller import PSLDController
from unstall.ps.psld.decisions import ClusterView, Decision, NoChange, Reassign, ScaleIn, ScaleOut
from unstall.ps.psld.pauses import PauseSample
from unstall.ps.psld.rates import ServerSample, samples_from
from unstall.ps.scenarios import Scenario
from unstall.ps.server import ProbeTiming


@dataclass(frozen=True, kw_only=True)
class ElasticEvent:
    """One applied decision: after ``iteration``, what was done, why, and the pause it caused
    (``iteration`` -1, kind ``WarmStart``: the placement before the first iteration, which
    moved nothing; its ``pause_s`` is the probe's and placement's time). ``held``: taken
    during iteration ``iteration + 1``, whose pushes a probe sent with it held back (see
    :class:`~unstall.ps.coordinator.Tripwire`), before they went."""

    iteration: int
    kind: str
    reason: str
    chunks_moved: int
    bytes_moved: int
    pause_s: float
    servers: tuple[int, ...]
    held: bool = False


@dataclass(frozen=True, kw_only=True)
class ElasticSummary:
    """What a controller did over a run: servers after each iteration, decisions, pauses."""

    servers_over_time: tuple[int, ...]
    migrations: int
    scale_outs: int
    scale_ins: int
    max_pause_s: float
    total_pause_s: float
    events: tuple[ElasticEvent, ...]
    # Seconds the warm start's probe and placement took before the first iteration (part of
    # the run: they count in its throughput); the boundary probes', which are in the
    # iterations' boundary time already, summed.
    warm_start_s: float = 0.0
    probe_s: float = 0.0


class Controller(Protocol):
    """Called at every iteration boundary, after the step: may change the cluster through
    :class:`~unstall.ps.coordinator.PSCluster`'s hooks (reassign, add or remove servers)."""

    def __call__(self, cluster: PSCluster, telemetry: IterationTelemetry) -> None: ...

    def summary(self) -> ElasticSummary | None:
        """What it did over the run (None: nothing to report; the servers stayed)."""
        ...


@runtime_checkable
class Watcher(Protocol):
    """A controller that may send probes with an iteration (see
    :class:`~unstall.ps.coordinator.Tripwire`)."""

    def tripwire(self, cluster: PSCluster, iteration: int) -> Tripwire | None:
        """Called at the boundary before ``iteration``: its probes (None: none)."""
        ...


@runtime_checkable
class WarmStarter(Protocol):
    """A controller that may place the chunks itself before the first iteration."""

    def warm_start(self, cluster: PSCluster) -> Mapping[int, int]:
        """Called once the run's servers run and before they get their chunks (the cluster's
        ``owner`` is the strategy's first assignment): the owner map to load instead."""
        ...


class ElasticPSLD:
    """The controller that runs PSLD on a live cluster."""

    def __init__(
        self,
        scenario: Scenario,
        iterations: int,
        config: ControllerConfig | None = None,
        *,
        controller: PSLDController | None = None,
    ) -> None:
        self.scenario = scenario
        self.iterations = iterations
        self.controller = controller or PSLDController(config)
        self.next_server = scenario.servers
        self.last_server = scenario.servers + scenario.spares  # ids beyond are not in the scenario
        self.events: list[ElasticEvent] = []
        self.servers_over_time: list[int] = []
        self.warm_start_s = 0.0
        self.probe_s = 0.0
        self._apply: Mapping[type, Callable[[PSCluster, int, Decision], tuple[int, int]]] = {
            Reassign: self._reassign,
            ScaleOut: self._scale_out,
            ScaleIn: self._scale_in,
        }

    def view(self, cluster: PSCluster) -> ClusterView:
        return ClusterView(
            chunk_bytes={c.id: c.nbytes for c in cluster.chunks},
            owner=dict(cluster.owner),
            servers=tuple(sorted(cluster.servers)),
            next_server=self.next_server,
            spares_left=self.last_server - self.next_server,
        )

    def warm_start(self, cluster: PSCluster) -> Mapping[int, int]:
        """Probe every server and place the chunks by the speeds the probes predict (with
        ``warm_start`` off, or if the controller keeps the even split: the cluster's owner)."""
        if not self.controller.config.warm_start:
            return cluster.owner
        started = time.perf_counter()
        self._probe(cluster)
        decision = self.controller.place(self.view(cluster))
        self.warm_start_s = time.perf_counter() - started
        self.events.append(
            ElasticEvent(
                iteration=-1,
                kind="WarmStart",
                reason=decision.reason,
                chunks_moved=0,
                bytes_moved=0,
                pause_s=self.warm_start_s,
                servers=tuple(sorted(cluster.servers)),
            )
        )
        return decision.owner if isinstance(decision, Reassign) else cluster.owner

    def _probe(self, cluster: PSCluster) -> list[int]:
        """Probe every server with what the workers would exchange for ``probe_bytes`` of
        owned parameters (one buffer of workers x that, each way: an iteration's sample
        counts every worker's push and pull on the server's link); the servers the probes
        found changed."""
        owned = self.controller.config.probe_bytes
        return self._observe_probes(cluster.probe(owned * len(cluster.workers)))

    def _observe_probes(self, timings: Mapping[int, ProbeTiming]) -> list[int]:
        """Give the controller the probes' seconds, each standing for ``probe_bytes`` of owned
        parameters; the servers they found changed."""
        owned = self.controller.config.probe_bytes
        return self.controller.observe_probe(
            [
                ServerSample(server=s, owned_bytes=owned, seconds=t.busy_s)
                for s, t in timings.items()
            ]
        )

    def __call__(self, cluster: PSCluster, telemetry: IterationTelemetry) -> None:
        self.controller.observe(samples_from(telemetry.servers))
        every = self.controller.config.probe_every
        upcoming = telemetry.iteration + 1
        if every and upcoming % every == 0 and upcoming < self.iterations:
            started = time.perf_counter()
            self._probe(cluster)
            self.probe_s += time.perf_counter() - started
        self._carry_out(cluster, self.controller.decide(self.view(cluster)), telemetry.iteration)
        self.servers_over_time.append(len(cluster.servers))

    def tripwire(self, cluster: PSCluster, iteration: int) -> Tripwire | None:
        """The probes to send with ``iteration`` (``probe_in_step``): each loaded server's
        tripwire from the controller, for a probe standing for ``probe_bytes`` of owned
        parameters as :meth:`_probe` sends it."""
        if not self.controller.config.probe_in_step:
            return None
        owned = self.controller.config.probe_bytes
        limits = self.controller.tripwires(self.view(cluster))
        if not limits:
            return None

        def on_trip(cluster: PSCluster, timings: dict[int, ProbeTiming]) -> None:
            self._observe_probes(timings)
            decision = self.controller.decide(self.view(cluster))
            self._carry_out(cluster, decision, iteration - 1, held=True)

        return Tripwire(
            probe_bytes=owned * len(cluster.workers),
            limits={s: limit * owned for s, limit in limits.items()},
            on_trip=on_trip,
        )

    def _carry_out(
        self, cluster: PSCluster, decision: Decision, after: int, held: bool = False
    ) -> None:
        """Apply ``decision`` (taken after iteration ``after``), record it and its pause, and
        tell the controller what the pause was."""
        if isinstance(decision, NoChange):
            return
        started = time.perf_counter()
        chunks, nbytes = self._apply[type(decision)](cluster, after, decision)
        event = ElasticEvent(
            iteration=after,
            kind=type(decision).__name__,
            reason=decision.reason,
            chunks_moved=chunks,
            bytes_moved=nbytes,
            pause_s=time.perf_counter() - started,
            servers=tuple(sorted(cluster.servers)),
            held=held,
        )
        self.events.append(event)
        # The hysteresis learns what a decision costs from what this one cost.
        self.controller.observe_pause(
            PauseSample(kind=event.kind, bytes_moved=nbytes, pause_s=event.pause_s)
        )

    def _reassign(self, cluster: PSCluster, iteration: int, d: Decision) -> tuple[int, int]:
        assert isinstance(d, Reassign)
        moved = cluster.reassign(d.owner)
        return moved.chunks, moved.bytes

    def _scale_out(self, cluster: PSCluster, iteration: int, d: Decision) -> tuple[int, int]:
        assert isinstance(d, ScaleOut)
        spec = self.scenario.spec(d.server, iteration + 1, self.iterations)
        sid = cluster.add_server(spec)
        self.next_server = sid + 1
        if sid != d.server:  # the cluster numbers servers itself; follow it
            d = ScaleOut(
                server=sid,
                owner={c: sid if s == d.server else s for c, s in d.owner.items()},
                reason=d.reason,
            )
        moved = cluster.reassign(d.owner)
        return moved.chunks, moved.bytes

    def _scale_in(self, cluster: PSCluster, iteration: int, d: Decision) -> tuple[int, int]:
        assert isinstance(d, ScaleIn)
        moved = cluster.reassign(d.owner)
        cluster.remove_server(d.server)
        self.controller.estimator.forget(d.server)
        return moved.chunks, moved.bytes

    def summary(self) -> ElasticSummary:
        """The decisions' pauses leave out the warm start's time (``warm_start_s``): it comes
        before the first iteration, where it holds nothing up that had started."""
        pauses = [e.pause_s for e in self.events if e.kind != "WarmStart"]
        return ElasticSummary(
            servers_over_time=tuple(self.servers_over_time),
            migrations=sum(e.chunks_moved > 0 for e in self.events),
            scale_outs=sum(e.kind == "ScaleOut" for e in self.events),
            scale_ins=sum(e.kind == "ScaleIn" for e in self.events),
            max_pause_s=max(pauses, default=0.0),
            total_pause_s=sum(pauses),
            events=tuple(self.events),
            warm_start_s=self.warm_start_s,
            probe_s=self.probe_s,
        )
