"""The parameter-server actor: owns chunks (parameters and optimizer state), emulates its link
and compute, and applies the optimizer's step once every worker's push of an iteration has
arrived.

Each iteration a worker calls :meth:`PSServer.push_pull` once per piece of what the server owns
(as ps-lite's and BytePS's push-pull do): its gradients go in (cut into parts of at most 1 MiB,
which Ray copies without starting threads), and the parameters after the step come back as one
array (the server keeps them in one flat array), so one round trip moves the bytes both ways
(a worker pulls separately only at the start of a run). A server owning up to a piece's bytes
(256 MB by default) is one piece; above that, pieces pipeline: a piece is stepped as soon as
every worker's push of it is in and goes back while the later pieces still travel, so the step
hides behind the transfers instead of adding to them (:func:`~unstall.ps.chunks.plan_pieces`).

An async actor: push-pulls from several workers are in flight at once, each waiting for
its turn on the emulated link (:class:`~unstall.ps.links.LinkQueue`) with ``asyncio.sleep``, so
the queueing is real while the delays are computed. Arrays arrive zero-copy from the object
store (read-only); the server keeps its own writable copies of the chunks it owns.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import ray
import torch

from unstall.errors import UnstallError
from unstall.ps.links import LinkQueue, ServerSpec
from unstall.ps.optim import STEP_BLOCK, ServerOptimizer

if TYPE_CHECKING:
    from unstall.ps.chunks import Segment

T = TypeVar("T")
# A segment this large is stepped by several threads (when the server has more than one): the
# step is memory-bound, and while one worker waits for it the machine's other cores are idle.
PARALLEL_STEP_ELEMENTS = 1 << 20
_STEP_POOLS: dict[int, ThreadPoolExecutor] = {}


def step_pool(threads: int) -> ThreadPoolExecutor:
    """This process's pool of ``threads`` step threads (made once, kept across runs)."""
    if threads not in _STEP_POOLS:
        _STEP_POOLS[threads] = ThreadPoolExecutor(threads, thread_name_prefix="ps-step")
    return _STEP_POOLS[threads]


# (parameters, *optimizer state: one array per slot of the optimizer), flat float32
ChunkState = tuple[np.ndarray, ...]


@dataclass(frozen=True)
class PushPullTiming:
    """One push-pull as the server saw it: on its ingress link (queueing, transfer, latency),
    waiting for the other workers' pushes and the step, on its egress link."""

    ingress_s: float
    wait_s: float
    egress_s: float


@dataclass(frozen=True)
class ProbeTiming:
    """One probe as the server saw it: the seconds its bytes held the ingress link, the
    emulated step on them, and the egress link (the observables of an iteration's
    :class:`ServerIteration`, for a buffer of known size)."""

    ingress_busy_s: float
    apply_s: float
    egress_busy_s: float

    @property
    def busy_s(self) -> float:
        return self.ingress_busy_s + self.apply_s + self.egress_busy_s


@dataclass
class ServerIteration:
    """What one server did in one iteration (emulated seconds, real bytes)."""

    server: int
    owned_bytes: int = 0
    chunks: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    ingress_busy_s: float = 0.0
    egress_busy_s: float = 0.0
    apply_s: float = 0.0
    # Of ``egress_busy_s``: the workers' first pulls of a run (everything owned, once more).
    pull_busy_s: float = 0.0

    @property
    def busy_s(self) -> float:
        """Seconds the server's link or compute was occupied (both directions and the step)."""
        return self.ingress_busy_s + self.egress_busy_s + self.apply_s

    @property
    def exchange_busy_s(self) -> float:
        """``busy_s`` less the first pulls: the seconds of the iteration's push-pulls and step,
        which every iteration has (what a server's speed is measured by)."""
        return self.busy_s - self.pull_busy_s


class ServerCore:
    """The server without Ray: chunk state, link queues, pending pushes, per-iteration stats.

    The owned chunks' parameters (and each optimizer state slot) lie in one flat array, in
    chunk-id order (the order of the workers' routes), so that every piece of a push-pull is
    one contiguous range: its reply is one array, a view, that a worker's model parameters
    alias (zero-copy) and that Ray copies into the reply in one go. Pushes come piece by piece
    (:func:`~unstall.ps.chunks.plan_pieces`: one piece holding every owned chunk unless the
    server owns more than a piece's bytes), each piece's gradients as the parts of
    :func:`~unstall.ps.chunks.wire_parts`; a piece is stepped when every worker's push of it is
    in, and the iteration's step is done when every owned element is."""

    def __init__(
        self,
        server_id: int,
        workers: int,
        spec: ServerSpec,
        optimizer: ServerOptimizer,
        step_threads: int = 1,
    ) -> None:
        self.server_id = server_id
        self.workers = workers
        self.spec = spec
        self.optimizer = optimizer
        self.param = np.empty(0, np.float32)  # every owned chunk's parameters, flat
        # the optimizer's state, one flat array per slot, laid out as ``param``
        self.slots = [np.empty(0, np.float32) for _ in range(optimizer.slots)]
        self.offset: dict[int, int] = {}  # chunk id -> its first element in the flat arrays
        self.state: dict[int, ChunkState] = {}  # chunk id -> views of the flat arrays
        self.ingress = LinkQueue()
        self.egress = LinkQueue()
        self.compute = LinkQueue()  # the emulated step: pieces' steps serialize on it
        self.pending: dict[tuple[int, int], dict[int, Sequence[np.ndarray]]] = {}
        self.stepped: dict[int, int] = {}  # iteration -> elements stepped so far
        self.stats: dict[int, ServerIteration] = {}
        self.step_threads = max(1, step_threads)
        # one per thread, reused by every step
        self.scratch = [np.empty(STEP_BLOCK, np.float32) for _ in range(self.step_threads)]

    def owned_bytes(self) -> int:
        return int(self.param.nbytes)

    def owned_elements(self) -> int:
        return int(self.param.size)

    def stat(self, iteration: int) -> ServerIteration:
        if iteration not in self.stats:
            self.stats[iteration] = ServerIteration(
                server=self.server_id, owned_bytes=self.owned_bytes(), chunks=len(self.state)
            )
        return self.stats[iteration]

    def load(self, chunks: dict[int, ChunkState]) -> None:
        """Own ``chunks`` too (copied: they arrive read-only from the object store)."""
        self._lay_out({**self.state, **chunks})

    def drop(self, cids: Sequence[int]) -> None:
        gone = set(cids)
        self._lay_out({cid: s for cid, s in self.state.items() if cid not in gone})

    def _lay_out(self, chunks: dict[int, ChunkState]) -> None:
        """Copy ``chunks`` into new flat arrays, in chunk-id order (at iteration boundaries)."""
        width = 1 + self.optimizer.slots
        for cid, state in chunks.items():
            if len(state) != width:
                raise UnstallError(
                    f"server {self.server_id}: chunk {cid} has {len(state) - 1} optimizer state "
                    f"array(s); {self.optimizer.name} keeps {self.optimizer.slots}"
                )
        total = sum(np.size(state[0]) for state in chunks.values())
        arrays = [np.empty(total, np.float32) for _ in range(width)]
        self.offset, self.state, pos = {}, {}, 0
        for cid in sorted(chunks):
            end = pos + np.size(chunks[cid][0])
            for array, values in zip(arrays, chunks[cid], strict=True):
                array[pos:end] = values
            self.offset[cid], self.state[cid] = pos, tuple(a[pos:end] for a in arrays)
            pos = end
        self.param, self.slots = arrays[0], arrays[1:]

    def piece_range(self, segments: Sequence[Segment]) -> tuple[int, int]:
        """``[start, stop)`` of a piece in the flat arrays (its segments follow each other)."""
        start = stop = self.offset[segments[0][0]] + segments[0][1]
        for cid, lo, hi in segments:
            if self.offset[cid] + lo != stop:
                raise UnstallError(f"server {self.server_id}: piece {segments} not contiguous")
            stop += hi - lo
        return start, stop

    def add_push(self, iteration: int, piece: int, rank: int, grads: Sequence[np.ndarray]) -> bool:
        """Record ``rank``'s push of ``piece``; True when every worker's push of it is in."""
        arrived = self.pending.setdefault((iteration, piece), {})
        arrived[rank] = grads
        return len(arrived) == self.workers

    def apply(self, iteration: int, piece: int, segments: Sequence[Segment]) -> bool:
        """The SGD step of one piece (gradients summed in worker-rank order); True when it
        completes the iteration's step (every owned element stepped)."""
        arrived = self.pending.pop((iteration, piece))
        start, stop = self.piece_range(segments)
        parts = [list(grads) for grads in zip(*(arrived[r] for r in sorted(arrived)), strict=True)]
        if sum(p[0].size for p in parts) != stop - start:
            raise UnstallError(f"server {self.server_id}: push of piece {piece} has wrong size")
        self._step(iteration, start, stop, parts)
        done = self.stepped.get(iteration, 0) + stop - start
        self.stepped[iteration] = done
        return done >= self.owned_elements()

    def _step(self, iteration: int, start: int, stop: int, parts: list[list[np.ndarray]]) -> None:
        """The step of iteration ``iteration`` on flat elements ``[start, stop)``;
        ``parts[j][r]``: rank ``r``'s gradient of the piece's ``j``-th part (the parts follow
        each other). A large piece is stepped by ``step_threads`` threads, each on a near-equal
        range (the step is elementwise: the ranges' steps are exactly the step of the whole,
        and numpy lets go of the GIL)."""
        threads = self.step_threads if stop - start >= PARALLEL_STEP_ELEMENTS else 1
        cuts = [start + (stop - start) * k // threads for k in range(threads + 1)]

        def step_range(k: int) -> None:
            lo, hi, pos = cuts[k], cuts[k + 1], start
            for grads in parts:
                end = pos + grads[0].size
                a, b = max(lo, pos), min(hi, end)
                if a < b:
                    part_grads = [g[a - pos : b - pos] for g in grads]
                    self.optimizer.step(
                        self.param[a:b],
                        [slot[a:b] for slot in self.slots],
                        part_grads,
                        step=iteration + 1,
                        scratch=self.scratch[k],
                    )
                pos = end

        if threads == 1:
            step_range(0)
        else:
            list(step_pool(threads).map(step_range, range(threads)))

    def values(self, segments: Sequence[Segment]) -> np.ndarray:
        """The parameters of a piece: one view (see :meth:`PSServer.push_pull`)."""
        start, stop = self.piece_range(segments)
        return self.param[start:stop]


@ray.remote(num_cpus=0)
class PSServer:
    """Ray actor around :class:`ServerCore` (see the module docstring)."""

    def __init__(
        self, server_id: int, workers: int, spec: ServerSpec, optimizer: ServerOptimizer
    ) -> None:
        # The step's kernel (torch's fused SGD) would otherwise split a call over every core's
        # thread, which spin while waiting on a busy machine; ``step_threads`` says how many.
        torch.set_num_threads(1)
        self._reset(server_id, workers, spec, optimizer)

    def _reset(
        self,
        server_id: int,
        workers: int,
        spec: ServerSpec,
        optimizer: ServerOptimizer,
        step_threads: int = 1,
    ) -> None:
        self.core = ServerCore(server_id, workers, spec, optimizer, step_threads)
        self.applied = -1  # the last iteration whose step is complete
        self.finished: set[tuple[int, int]] = set()  # (iteration, piece) stepped
        self.aborted = False
        self.changed = asyncio.Condition()
        self.inflight: set[asyncio.Future[Any]] = set()  # pulls and push-pulls being served

    async def reset(
        self,
        server_id: int,
        workers: int,
        spec: ServerSpec,
        optimizer: ServerOptimizer,
        step_threads: int = 1,
    ) -> None:
        """Forget everything and serve a new run as ``server_id`` (pooled actors are reused:
        starting a process costs seconds), stepping large segments with ``step_threads``."""
        self._cancel_inflight()
        self._reset(server_id, workers, spec, optimizer, step_threads)

    async def abort(self) -> None:
        """Fail every push-pull still waiting for the step (the run stopped: a worker whose
        push it waits for may be dead), and cancel those still on the emulated link, so that
        every worker waiting on this server gets an error now. :meth:`reset` clears it."""
        self._cancel_inflight()
        async with self.changed:
            self.aborted = True
            self.changed.notify_all()

    def _cancel_inflight(self) -> None:
        for task in list(self.inflight):
            task.cancel()

    async def _tracked(self, work: Coroutine[Any, Any, T]) -> T:
        """Serve ``work`` as a task that :meth:`abort` can cancel (a stale push-pull must not
        sleep on, then add its gradients to the next run's step)."""
        task = asyncio.ensure_future(work)
        self.inflight.add(task)
        try:
            return await task
        except asyncio.CancelledError as exc:
            raise UnstallError(f"server {self.core.server_id}: run aborted") from exc
        finally:
            self.inflight.discard(task)

    async def ping(self) -> int:
        return self.core.server_id

    async def pid(self) -> int:
        """This server's process id (what a test kills)."""
        return os.getpid()

    async def node(self) -> str:
        """The id of the Ray node this server runs on."""
        return str(ray.get_runtime_context().get_node_id())

    async def configure(self, spec: ServerSpec | None = None, workers: int | None = None) -> None:
        if spec is not None:
            self.core.spec = spec
        if workers is not None:
            self.core.workers = workers

    async def load_chunks(self, chunks: dict[int, ChunkState]) -> int:
        """Take ownership of ``chunks`` (an ObjectRef argument is resolved here, zero-copy)."""
        self.core.load(chunks)
        return len(chunks)

    async def export_chunks(self, cids: list[int]) -> dict[int, ChunkState]:
        return {cid: self.core.state[cid] for cid in cids}

    async def drop_chunks(self, cids: list[int]) -> None:
        self.core.drop(cids)

    async def params(self) -> dict[int, np.ndarray]:
        """Current parameters of every owned chunk, without emulated delay (for checks)."""
        return {cid: state[0] for cid, state in self.core.state.items()}

    async def _link_wait(self, queue: LinkQueue, nbytes: int) -> float:
        spec = self.core.spec
        now = time.perf_counter()
        hold = spec.transfer_s(nbytes)
        delivered = queue.reserve(now, hold, spec.latency_s)
        if delivered > now:
            await asyncio.sleep(delivered - now)
        return hold

    async def pull(self, iteration: int) -> dict[int, np.ndarray]:
        """The owned parameters, after the emulated egress transfer: a worker's first pull of
        a run (afterwards the parameters come back with :meth:`push_pull`)."""
        return await self._tracked(self._pull(iteration))

    async def _pull(self, iteration: int) -> dict[int, np.ndarray]:
        values = {cid: state[0] for cid, state in self.core.state.items()}
        await self._send(iteration, list(values.values()), pull=True)
        return values

    async def push_pull(
        self,
        iteration: int,
        rank: int,
        piece: int,
        segments: tuple[Segment, ...],
        grads: list[np.ndarray],
    ) -> tuple[np.ndarray, PushPullTiming]:
        """Take ``rank``'s gradients of one piece (the segments' gradients in order, cut into
        :func:`~unstall.ps.chunks.wire_parts`) after the emulated ingress transfer, wait until
        every worker's push of the piece is in and its step is done (the last push runs it),
        and return the piece's new parameters, the segments' one after the other in one array
        (after the emulated egress transfer)."""
        return await self._tracked(self._push_pull(iteration, rank, piece, segments, grads))

    async def _push_pull(
        self,
        iteration: int,
        rank: int,
        piece: int,
        segments: tuple[Segment, ...],
        grads: list[np.ndarray],
    ) -> tuple[np.ndarray, PushPullTiming]:
        started = time.perf_counter()
        stat = self.core.stat(iteration)
        nbytes = sum(g.nbytes for g in grads)
        stat.bytes_in += nbytes
        hold = await self._link_wait(self.core.ingress, nbytes)
        stat.ingress_busy_s += hold  # after the await: concurrent pushes add to it meanwhile
        arrived = time.perf_counter()
        if self.core.add_push(iteration, piece, rank, grads):
            await self._apply(iteration, piece, segments)
        async with self.changed:
            await self.changed.wait_for(lambda: (iteration, piece) in self.finished or self.aborted)
        if self.aborted:
            raise UnstallError(f"server {self.core.server_id}: run aborted")
        released = time.perf_counter()
        # No step can touch this piece while its reply waits on the link: the next step needs
        # this worker's next push. So the array is returned as it is (a view), not copied.
        values = self.core.values(segments)
        await self._send(iteration, [values])
        return values, PushPullTiming(
            ingress_s=arrived - started,
            wait_s=released - arrived,
            egress_s=time.perf_counter() - released,
        )

    async def probe(self, payload: np.ndarray) -> tuple[np.ndarray, ProbeTiming]:
        """Take ``payload`` through the emulated ingress link, run the emulated step on its
        bytes (as if they were gradients: a busy server shows), and send it back through the
        egress link; the link and step seconds it took. Owned chunks are not touched."""
        return await self._tracked(self._probe(payload))

    async def _probe(self, payload: np.ndarray) -> tuple[np.ndarray, ProbeTiming]:
        nbytes = int(payload.nbytes)
        ingress = await self._link_wait(self.core.ingress, nbytes)
        started = time.perf_counter()
        apply_s = self.core.spec.apply_s(nbytes)
        left = self.core.compute.reserve(started, apply_s, 0.0) - time.perf_counter()
        if left > 0:
            await asyncio.sleep(left)
        egress = await self._link_wait(self.core.egress, nbytes)
        return payload, ProbeTiming(ingress_busy_s=ingress, apply_s=apply_s, egress_busy_s=egress)

    async def _send(self, iteration: int, values: Sequence[np.ndarray], pull: bool = False) -> None:
        nbytes = sum(v.nbytes for v in values)
        stat = self.core.stat(iteration)
        stat.bytes_out += nbytes
        hold = await self._link_wait(self.core.egress, nbytes)
        stat.egress_busy_s += hold
        if pull:
            stat.pull_busy_s += hold

    async def _apply(self, iteration: int, piece: int, segments: Sequence[Segment]) -> None:
        started = time.perf_counter()
        stat = self.core.stat(iteration)
        complete = self.core.apply(iteration, piece, segments)
        nbytes = 4 * sum(hi - lo for _, lo, hi in segments)  # float32
        emulated = self.core.spec.apply_s(nbytes * self.core.workers)
        stat.apply_s += emulated
        left = self.core.compute.reserve(started, emulated, 0.0) - time.perf_counter()
        if left > 0:
            await asyncio.sleep(left)
        async with self.changed:
            self.finished.add((iteration, piece))
            if complete:
                self.applied = max(self.applied, iteration)
            self.changed.notify_all()

    async def wait_applied(self, iteration: int) -> ServerIteration:
        """Wait until ``iteration``'s step is done (at once if nothing is owned); its stats."""
        if not self.core.state:
            self.applied = max(self.applied, iteration)
        async with self.changed:
            await self.changed.wait_for(lambda: self.applied >= iteration or self.aborted)
        self.finished = {key for key in self.finished if key[0] > iteration}
        self.core.stepped.pop(iteration, None)
        return self.core.stats.pop(iteration, ServerIteration(server=self.core.server_id))
