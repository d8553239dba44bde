"""The driver-side coordinator: starts Ray, owns the server actors and the routing table, runs
synchronous iterations, and is the place where a controller acts at iteration boundaries.

Hooks for a load balancer (PSLD): between two calls of :meth:`PSCluster.step` a controller may
:meth:`~PSCluster.reassign` chunks (their parameters and optimizer state move server to server as
ObjectRefs, never through the driver), :meth:`~PSCluster.add_server`,
:meth:`~PSCluster.remove_server` (once it owns nothing) and :meth:`~PSCluster.set_spec`. Every
step returns the telemetry it needs (per worker, per server transfer times).

An actor that dies stops the run with :class:`~unstall.ps.errors.PSActorDiedError` naming it; a
step that does not finish in time raises :class:`~unstall.ps.errors.PSTimeoutError` naming what
it waits on; an error in the user's code (the model, data or loss function, run by a worker)
stops it with the worker's :class:`~unstall.usercode.UserCodeError`. Nothing hangs.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray
import torch
from ray.exceptions import ActorDiedError, RayActorError, RayTaskError

from unstall.errors import UnstallError
from unstall.ps.chunks import Chunk, plan_pieces
from unstall.ps.errors import PSActorDiedError, PSTimeoutError
from unstall.ps.links import ServerSpec
from unstall.ps.optim import ServerOptimizer
from unstall.ps.replica import TrainingJob
from unstall.ps.runtime import ActorPool
from unstall.ps.server import ProbeTiming, ServerIteration
from unstall.ps.worker import StepWatch, WorkerIteration
from unstall.ray_connect import first_line, root_cause
from unstall.usercode import UserCodeError
from unstall.workload.zoo_jobs import Batch

# A server owning more than this exchanges it in pieces of this size, pipelined (plan_pieces).
# Large enough that one machine exchanges everything in one piece: there every piece costs
# another Ray call (an object-store object each way) and a piece of a large tensor a copy into
# the worker's model, which cost more than hiding the step behind the next piece's transfer gains
# (measured: benchmarks/BENCHMARKS.md, "Push/pull overhead against raw Ray"). Across a real
# network, whose transfers outlast the step, smaller pieces (``fit(piece_mb=...)``) overlap the
# two.
DEFAULT_PIECE_BYTES = 256_000_000
# How long a failed run waits for its actors' answers (pings, aborts) before it reports: a
# live actor answers in milliseconds, and a run that timed out has made its user wait already.
FAILURE_WAIT_S = 2.0
# What a timed-out run says to do where the user's work (a slow data function, a large model on
# a slow machine) or the set-up (starting actors on a loaded machine) needs longer.
# Starting a worker or server starts a process that imports torch: seconds, up to a minute on
# a loaded machine. A run's set-up waits at least this long, whatever its iterations' limit.
SETUP_TIMEOUT_S = 120.0
TIMEOUT_HINT = "if it needs longer, give it more: --timeout SECONDS, fit(timeout_s=...)"


@dataclass(frozen=True, kw_only=True)
class Migration:
    """What one reassignment moved, and the pause it caused."""

    chunks: int
    bytes: int
    seconds: float


@dataclass(frozen=True, kw_only=True)
class IterationTelemetry:
    """One synchronous iteration: wall time, mean loss, every worker's and server's view."""

    iteration: int
    iter_s: float
    loss: float
    workers: tuple[WorkerIteration, ...]
    servers: tuple[ServerIteration, ...]
    boundary_s: float = 0.0  # controller / scenario work before this iteration
    held_s: float = 0.0  # of ``iter_s``: the pushes held back while a tripwire's call ran


@dataclass(frozen=True, kw_only=True)
class Tripwire:
    """Probes of an iteration, sent with it: while the workers compute (the servers' links are
    idle then) each server in ``limits`` gets a buffer of ``probe_bytes`` through its emulated
    links and step and back. If one's seconds exceed its limit, every worker holds its push
    back and ``on_trip(cluster, timings)`` runs first (it may move chunks: the servers are
    between two steps), then the pushes go on the routes it left."""

    probe_bytes: int
    limits: Mapping[int, float]  # server id -> most seconds its probe may take
    on_trip: Callable[[PSCluster, dict[int, ProbeTiming]], None]


class PSCluster:
    """Servers, the routing table and the iteration barrier of one run."""

    def __init__(
        self,
        job: TrainingJob,
        optimizer: ServerOptimizer,
        pool: ActorPool,
        *,
        timeout_s: float = 300.0,
        piece_bytes: int = DEFAULT_PIECE_BYTES,
        step_threads: int = 1,
        start_iteration: int = 0,
        buffers: Mapping[str, torch.Tensor] | None = None,
    ) -> None:
        self.job = job
        self.piece_bytes = piece_bytes
        self.step_threads = step_threads
        self.optimizer = optimizer
        self.pool = pool
        self.workers = pool.take_workers(job.workers, job.device)
        self.timeout_s = timeout_s
        self.servers: dict[int, Any] = {}
        self.specs: dict[int, ServerSpec] = {}
        self.chunks: tuple[Chunk, ...] = ()
        self.owner: dict[int, int] = {}  # chunk id -> server id
        self.iteration = -1
        self._next_server = 0
        self._labels: dict[str, Any] = {f"worker {r}": w for r, w in enumerate(self.workers)}
        self._abandoned: list[Any] = []  # refs left pending when a wait failed
        self.nodes: dict[str, str] = {}  # actor label -> the Ray node it ran on
        job_ref = ray.put(job)  # the user's functions travel once, to every worker
        # as numpy arrays: Ray's zero-copy path warns for any torch tensor it is handed
        buffers_ref = ray.put({k: v.detach().cpu().numpy() for k, v in (buffers or {}).items()})
        self._gather(
            {
                f"worker {r}": w.setup.remote(r, job_ref, start_iteration, buffers_ref)
                for r, w in enumerate(self.workers)
            }
        )
        self._record_nodes({f"worker {r}": w for r, w in enumerate(self.workers)})

    # --- set-up and the controller's hooks -----------------------------------------------------

    def start(
        self,
        chunks: Sequence[Chunk],
        owner: Mapping[int, int] | Sequence[int],
        specs: Sequence[ServerSpec],
        initial: Sequence[np.ndarray],
        initial_state: Sequence[Sequence[np.ndarray]] | None = None,
        server_ids: Sequence[int] | None = None,
        place: Callable[[PSCluster], Mapping[int, int]] | None = None,
    ) -> None:
        """Start one server per spec (ids ``server_ids``, default 0..n-1), give each the chunks
        ``owner`` (chunk id -> server id) assigns it, with ``initial`` parameters and optimizer
        state (``initial_state[slot][tensor]``; None: zeros). ``place`` (a controller's warm
        start) is called once the servers run and before they get anything, with ``owner`` as
        the cluster's: the owner map it returns is loaded instead (nothing moves: the chunks
        go straight where it says)."""
        self.chunks = tuple(chunks)
        for spec, sid in zip(specs, server_ids or range(len(specs)), strict=True):
            self.add_server(spec, sid)
        self.owner = {c.id: owner[c.id] for c in self.chunks}
        if place is not None:
            placed = place(self)
            self._check_owner(placed)
            self.owner = {c.id: placed[c.id] for c in self.chunks}
        if initial_state is None:
            initial_state = [
                [np.zeros_like(p) for p in initial] for _ in range(self.optimizer.slots)
            ]
        loads = {}
        for sid, server in self.servers.items():
            state = {
                c.id: tuple(
                    tensors[c.tensor][c.start : c.stop] for tensors in (initial, *initial_state)
                )
                for c in self.chunks
                if self.owner[c.id] == sid
            }
            loads[f"server {sid}"] = server.load_chunks.remote(ray.put(state))
        self._gather(loads)
        self._send_routes()

    def add_server(self, spec: ServerSpec, sid: int | None = None) -> int:
        """Start a server that owns nothing yet; its id (ids are never reused; ``sid`` gives it
        one, as a run restarted from a snapshot keeps its servers' ids)."""
        sid = self._next_server if sid is None else sid
        self._next_server = max(self._next_server, sid + 1)
        server = self.pool.take_server()
        self._labels[f"server {sid}"] = server
        self._gather(
            {
                f"server {sid}": server.reset.remote(
                    sid, len(self.workers), spec, self.optimizer, self.step_threads
                )
            }
        )
        self.servers[sid] = server
        self._record_nodes({f"server {sid}": server})
        self.specs[sid] = spec
        return sid

    def remove_server(self, sid: int) -> None:
        """Stop server ``sid``; it must own no chunk (reassign them first)."""
        owned = [cid for cid, s in self.owner.items() if s == sid]
        if owned:
            raise UnstallError(f"server {sid} still owns {len(owned)} chunk(s): reassign first")
        self.pool.give_back_server(self.servers.pop(sid))
        del self.specs[sid]
        del self._labels[f"server {sid}"]

    def set_spec(self, sid: int, spec: ServerSpec) -> None:
        """Change server ``sid``'s emulated link and compute (from the next transfer on)."""
        if self.specs.get(sid) != spec:
            self._gather({f"server {sid}": self.servers[sid].configure.remote(spec=spec)})
            self.specs[sid] = spec

    def reassign(self, owner: Mapping[int, int]) -> Migration:
        """Route chunks as ``owner`` (chunk id -> server id) says from the next iteration on;
        chunks that change hands carry their parameters and optimizer state server to server."""
        started = time.perf_counter()
        self._check_owner(owner)
        moves: dict[tuple[int, int], list[int]] = {}
        for cid, dst in owner.items():
            if self.owner[cid] != dst:
                moves.setdefault((self.owner[cid], dst), []).append(cid)
        loads = {}
        for (src, dst), cids in moves.items():
            state_ref = self.servers[src].export_chunks.remote(cids)
            loads[f"server {dst}"] = self.servers[dst].load_chunks.remote(state_ref)
        self._gather(loads)
        drops = {
            f"server {src}": self.servers[src].drop_chunks.remote(cids)
            for (src, _), cids in moves.items()
        }
        self._gather(drops)
        self.owner = dict(owner)
        self._send_routes()
        moved = [cid for cids in moves.values() for cid in cids]
        return Migration(
            chunks=len(moved),
            bytes=sum(self.chunks[c].nbytes for c in moved),
            seconds=time.perf_counter() - started,
        )

    def _check_owner(self, owner: Mapping[int, int]) -> None:
        unknown = sorted(set(owner.values()) - set(self.servers))
        if unknown or set(owner) != set(self.owner):
            raise UnstallError(f"bad reassignment: unknown servers {unknown} or chunk ids")

    def probe(self, nbytes: int) -> dict[int, ProbeTiming]:
        """Send every server a buffer of ``nbytes`` and have it back, all servers at once
        (between iterations, on the path the workers' push-pulls take: the emulated links and
        step): per server, the link and step seconds it saw."""
        sent = self._send_probes(nbytes, list(self.servers))
        got = self._gather({f"server {sid}": ref for sid, ref in sent.items()})
        return {sid: got[f"server {sid}"][1] for sid in self.servers}

    def _send_probes(self, nbytes: int, sids: Sequence[int]) -> dict[int, Any]:
        """A buffer of ``nbytes`` sent to each server in ``sids`` for its probe: the replies'
        ObjectRefs by server."""
        payload = np.zeros(max(1, nbytes // 4), np.float32)
        return {sid: self.servers[sid].probe.remote(payload) for sid in sids}

    def owned_bytes(self) -> dict[int, int]:
        out = dict.fromkeys(self.servers, 0)
        for c in self.chunks:
            out[self.owner[c.id]] += c.nbytes
        return out

    def _send_routes(self) -> None:
        routes = {}
        for sid, handle in self.servers.items():
            mine = tuple(c for c in self.chunks if self.owner[c.id] == sid)
            routes[sid] = (handle, mine, plan_pieces(mine, self.piece_bytes))
        self._gather(
            {f"worker {r}": w.set_routes.remote(routes) for r, w in enumerate(self.workers)}
        )

    # --- running -------------------------------------------------------------------------------

    def step(self, iteration: int, tripwire: Tripwire | None = None) -> IterationTelemetry:
        """One synchronous iteration: every worker pulls, computes, pushes; every server steps.
        With a ``tripwire`` the servers it names are probed as the workers compute (see
        :class:`Tripwire`)."""
        self.iteration = iteration
        started = time.perf_counter()
        watch = self._watch(tripwire)
        done = self._gather(
            {f"worker {r}": w.step.remote(iteration, watch) for r, w in enumerate(self.workers)}
        )
        held_s = 0.0
        if any(d.held for d in done.values()):
            assert tripwire is not None and watch is not None
            if not all(d.held for d in done.values()):  # the same replies, the same limits
                raise UnstallError(f"iteration {iteration}: the workers disagree on the probes")
            held = time.perf_counter()
            got = self._gather({f"server {s}": ref for s, ref in watch.probes.items()})
            tripwire.on_trip(self, {s: got[f"server {s}"][1] for s in watch.probes})
            held_s = time.perf_counter() - held
            done = self._gather(
                {f"worker {r}": w.exchange.remote(iteration) for r, w in enumerate(self.workers)}
            )
        applied = self._gather(
            {f"server {sid}": s.wait_applied.remote(iteration) for sid, s in self.servers.items()}
        )
        workers = tuple(done[f"worker {r}"] for r in range(len(self.workers)))
        return IterationTelemetry(
            iteration=iteration,
            iter_s=time.perf_counter() - started,
            loss=float(np.mean([w.loss for w in workers])),
            workers=workers,
            servers=tuple(applied[f"server {sid}"] for sid in sorted(self.servers)),
            held_s=held_s,
        )

    def _watch(self, tripwire: Tripwire | None) -> StepWatch | None:
        """The probes of ``tripwire``, sent now, for the workers to read (None: no probe)."""
        if tripwire is None or not tripwire.limits:
            return None
        probes = self._send_probes(tripwire.probe_bytes, list(tripwire.limits))
        return StepWatch(probes=probes, limits=dict(tripwire.limits))

    def params(self) -> list[np.ndarray]:
        """The current parameters, tensor by tensor, gathered from the servers."""
        got = self._gather({f"server {sid}": s.params.remote() for sid, s in self.servers.items()})
        return self._assemble(lambda label, cid: got[label][cid])

    def state(self) -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
        """The current parameters and optimizer state (``state[slot][tensor]``), tensor by
        tensor, gathered from the servers (for a checkpoint)."""
        got = self._gather(
            {
                f"server {sid}": s.export_chunks.remote(
                    [c for c, o in self.owner.items() if o == sid]
                )
                for sid, s in self.servers.items()
            }
        )

        def column(k: int) -> list[np.ndarray]:
            return self._assemble(lambda label, cid: got[label][cid][k])

        return column(0), [column(k) for k in range(1, 1 + self.optimizer.slots)]

    def _assemble(self, part: Callable[[str, int], np.ndarray]) -> list[np.ndarray]:
        """Whole tensors from every chunk's ``part(server label, chunk id)``."""
        sizes: dict[int, int] = {}
        for c in self.chunks:
            sizes[c.tensor] = max(sizes.get(c.tensor, 0), c.stop)
        out = [np.empty(sizes[t], np.float32) for t in sorted(sizes)]
        for c in self.chunks:
            out[c.tensor][c.start : c.stop] = part(f"server {self.owner[c.id]}", c.id)
        return out

    def _record_nodes(self, actors: Mapping[str, Any]) -> None:
        """Note the Ray node each of ``actors`` runs on."""
        self.nodes.update(self._gather({label: a.node.remote() for label, a in actors.items()}))

    def batches(self, clear: bool = False) -> list[list[Batch]]:
        """Every worker's batches (rank order), one an iteration, as the workers recorded them
        (a job with ``record_batches``) since the last ``clear``."""
        with _read_only_tensors():
            got = self._gather(
                {f"worker {r}": w.batches.remote(clear) for r, w in enumerate(self.workers)}
            )
        return [got[f"worker {r}"] for r in range(len(self.workers))]

    def buffers(self) -> dict[str, torch.Tensor]:
        """The model's buffers as worker 0 has them (each worker updates its own, e.g.
        BatchNorm's running statistics from its batches)."""
        with _read_only_tensors():
            got = self._gather({"worker 0": self.workers[0].buffers.remote()})
        return dict(got["worker 0"])

    def close(self, *, failed: bool = False) -> None:
        """Give the servers back to the pool (the workers stay in it). After a failure, first
        abort what the servers still wait for (a dead worker's push), which releases the
        workers waiting on them, and collect the calls the failed wait left behind."""
        if failed:
            aborts = {sid: s.abort.remote() for sid, s in self.servers.items()}
            leftover = [*aborts.values(), *self._abandoned]
            ready, _ = ray.wait(leftover, num_returns=len(leftover), timeout=FAILURE_WAIT_S)
            for ref in ready:
                with contextlib.suppress(Exception):  # their errors are the failure's echoes
                    ray.get(ref)
            answered = set(ready)
            for sid in [sid for sid, ref in aborts.items() if ref not in answered]:
                # Hung (stopped, or stuck in user code): killing it fails the calls that
                # workers still wait on, so nothing waits on it into the next run.
                ray.kill(self.servers.pop(sid))
        for server in self.servers.values():
            self.pool.give_back_server(server)
        self.servers = {}
        self._abandoned = []

    # --- waiting without hanging ---------------------------------------------------------------

    def _gather(self, refs: Mapping[str, Any]) -> dict[str, Any]:
        """Every ref's value by label; raises naming a dead actor or what is still pending."""
        pending = {ref: label for label, ref in refs.items()}
        out: dict[str, Any] = {}
        # The set-up starts actor processes (each imports torch): it gets at least
        # SETUP_TIMEOUT_S, however short the limit given for an iteration.
        limit = self.timeout_s if self.iteration >= 0 else max(self.timeout_s, SETUP_TIMEOUT_S)
        deadline = time.monotonic() + limit
        while pending:
            left = deadline - time.monotonic()
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=max(0.0, left))
            if not ready:
                self._abandoned += list(pending)
                silent = self._raise_dead(f"timed out after {limit:g} s")
                waiting = ", ".join(sorted(pending.values()))
                hung = f"; not answering a ping: {', '.join(silent)}" if silent else ""
                raise PSTimeoutError(
                    f"{self._when()}: no reply in {limit:g} s from {waiting}{hung} ({TIMEOUT_HINT})"
                )
            for ref in ready:
                label = pending.pop(ref)
                try:
                    out[label] = ray.get(ref)
                except Exception as exc:  # an actor died, or a method raised
                    self._abandoned += list(pending)
                    self._raise_failure(label, exc)

        return out

    def _when(self) -> str:
        return f"iteration {self.iteration}" if self.iteration >= 0 else "set-up"

    def _raise_failure(self, label: str, exc: Exception) -> None:
        """Raise what ``label``'s failed call means: the user's code failed in it, it died,
        another actor died, or the call raised."""
        cause = root_cause(exc)
        if isinstance(cause, UserCodeError):
            raise UserCodeError(f"{label}: {cause}") from exc
        # The actor called is the dead one (a RayTaskError also passes for its cause's type:
        # that is a call that failed because *another* actor died).
        if isinstance(exc, ActorDiedError) and not isinstance(exc, RayTaskError):
            raise PSActorDiedError(
                f"{label} died during {self._when()} ({first_line(exc)})"
            ) from exc
        self._raise_dead(first_line(exc))
        hint = ""
        if "No module named" in first_line(exc):
            hint = (
                " (the user's code imports a module this actor's node cannot import: ship its "
                "folder with --working-dir, i.e. fit(runtime_env={'working_dir': FOLDER}), or "
                "install it on every node)"
            )
        raise UnstallError(f"{label} failed in {self._when()}: {first_line(exc)}{hint}") from exc

    def _raise_dead(self, cause: str) -> list[str]:
        """Ping every actor; raise :class:`PSActorDiedError` naming the dead ones; return those
        that did not answer in time (busy, or hung)."""
        pings = {label: actor.ping.remote() for label, actor in self._labels.items()}
        # One wait for all, kept short: a run's --timeout is what the user waits, not pings.
        ready, _ = ray.wait(list(pings.values()), num_returns=len(pings), timeout=FAILURE_WAIT_S)
        answered = set(ready)
        dead, silent = [], []
        for label, ref in pings.items():
            if ref not in answered:
                silent.append(label)  # alive but busy, or hung: not known to be dead
                continue
            try:
                ray.get(ref)
            except RayActorError:
                dead.append(label)
        if dead:
            raise PSActorDiedError(f"{' and '.join(dead)} died during {self._when()} ({cause})")
        return silent


@contextlib.contextmanager
def _read_only_tensors() -> Iterator[None]:
    """Torch tensors that arrive zero-copy from the object store are read-only, which torch
    warns about once; the batches and buffers fetched here are only read."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        yield
