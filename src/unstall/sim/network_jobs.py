"""The running jobs whose speed the network sets, as arrays: re-planned many at a time.

A change of background congestion moves the share of every job on a shared link, and a job
starting or finishing on a coupled rack moves those of hundreds; each such job's iteration time,
progress and finish time must then be re-planned. A run that spreads jobs over the cluster
re-plans millions of times (first-fit on the Philly trace: 3.5 M), so job by job, with one
finish event pushed per re-plan, that would be most of the run. Here those jobs' progress lives
in arrays, one slot per job, and a re-plan is a few array operations over the jobs whose share
changed; their finish times stay in an array whose minimum is the next such finish, so no finish
event is pushed or superseded at all.

Every operation is the one :class:`~unstall.loop.jobs.Job` and
:class:`~unstall.sim.speed.RateTiming` do on Python floats, in the same order, so the
results are the same to the bit. A job's :class:`Job` fields are brought up to date from the
arrays when it leaves (``remove``) or when a policy must see its progress (``sync``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

from unstall.loop.jobs import Job
from unstall.sim.speed import RateTiming

# A link term that never sets the time: at any rate it takes 0 s (with ``weight`` = inf the
# bandwidth is clamped to ``max_bandwidth`` = inf, and 0 bytes / inf = 0).
_NO_TERM = (math.inf, math.inf, 0.0, 0.0)


class NetworkJobs:
    """Progress and finish times of the running jobs that cross shared links.

    ``timing``: per job, its :class:`RateTiming` (evaluated over arrays) or any function of the
    rate (then every re-plan evaluates one job at a time: speed models without ``rate_timing``).
    """

    def __init__(self, capacity: int = 64) -> None:
        self._slot: dict[int, int] = {}  # job index -> slot
        self._free = list(range(capacity - 1, -1, -1))  # lowest slots first
        self._job = np.full(capacity, -1, dtype=np.int64)
        names = ("done", "last", "paused", "work", "cons", "iter", "comm", "finish")
        self._progress = {name: np.zeros(capacity) for name in names}
        self._progress["finish"].fill(math.inf)
        self._fresh = np.zeros(capacity, dtype=bool)  # placed, finish not planned yet
        fields = ("floor", "compute", "overlap", "data")
        self._timing = {name: np.zeros(capacity) for name in fields}
        self._terms = np.tile(np.array(_NO_TERM), (capacity, 1, 1))  # (slot, term, field)
        self._callables: list[Callable[[float], float] | None] = [None] * capacity
        self._scalar = 0  # tracked jobs whose timing is not a RateTiming
        self._next: float | None = None  # cached time of the next finish

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, job: int) -> bool:
        return job in self._slot

    # --- jobs come and go ------------------------------------------------------------------------

    def add(self, job: Job, timing: RateTiming | Callable[[float], float]) -> None:
        """Track a job just placed on shared links; its finish is planned at the next
        ``replan`` (which always includes a new flow's first rate)."""
        if not self._free:
            self._grow()
        slot = self._free.pop()
        self._slot[job.index] = slot
        self._job[slot] = job.index
        p = self._progress
        p["done"][slot] = job.done_iters
        p["last"][slot] = job.last_update_s
        p["paused"][slot] = job.paused_until_s
        p["work"][slot] = job.work_iters
        p["cons"][slot] = job.base_iter_s
        p["iter"][slot] = job.iter_s
        p["comm"][slot] = job.comm_overhead_s
        p["finish"][slot] = math.inf
        self._fresh[slot] = True
        self._callables[slot] = timing
        if isinstance(timing, RateTiming):
            self._set_terms(slot, timing)
        else:
            self._scalar += 1
        self._next = None

    def _set_terms(self, slot: int, timing: RateTiming) -> None:
        width = self._terms.shape[1]
        if len(timing.terms) > width:  # widen every slot with terms that never set the time
            extra = np.tile(np.array(_NO_TERM), (len(self._job), len(timing.terms) - width, 1))
            self._terms = np.concatenate([self._terms, extra], axis=1)
        self._terms[slot] = _NO_TERM
        if timing.terms:
            self._terms[slot, : len(timing.terms)] = timing.terms
        t = self._timing
        t["floor"][slot] = timing.floor
        t["compute"][slot] = timing.compute_s
        t["overlap"][slot] = timing.overlap_s
        t["data"][slot] = timing.data_s

    def _grow(self) -> None:
        old = len(self._job)
        new = max(2 * old, 64)
        self._job = np.concatenate([self._job, np.full(new - old, -1, dtype=np.int64)])
        for store in (self._progress, self._timing):
            for name, values in store.items():
                fill = math.inf if name == "finish" else 0.0
                store[name] = np.concatenate([values, np.full(new - old, fill)])
        self._fresh = np.concatenate([self._fresh, np.zeros(new - old, dtype=bool)])
        extra = np.tile(np.array(_NO_TERM), (new - old, self._terms.shape[1], 1))
        self._terms = np.concatenate([self._terms, extra])
        self._callables.extend([None] * (new - old))
        self._free.extend(range(new - 1, old - 1, -1))  # lowest slots first

    def remove(self, job: Job) -> None:
        """Stop tracking the job; its :class:`Job` gets its progress back."""
        slot = self._slot.pop(job.index)
        self._write_back(job, slot)
        self._job[slot] = -1
        self._progress["finish"][slot] = math.inf
        if not isinstance(self._callables[slot], RateTiming):
            self._scalar -= 1
        self._callables[slot] = None
        self._free.append(slot)
        self._next = None

    def sync(self, job: Job) -> None:
        """Bring the job's :class:`Job` progress up to date (it stays tracked)."""
        self._write_back(job, self._slot[job.index])

    def _write_back(self, job: Job, slot: int) -> None:
        p = self._progress
        job.done_iters = float(p["done"][slot])
        job.last_update_s = float(p["last"][slot])
        job.iter_s = float(p["iter"][slot])
        job.comm_overhead_s = float(p["comm"][slot])

    # --- re-planning -----------------------------------------------------------------------------

    def replan(self, rates: Mapping[int, float], now: float) -> list[int]:
        """Give each job (by index) its new rate: account its progress at the old iteration time
        up to ``now``, then plan its finish at the new one. Returns the jobs whose iteration time
        changed (or that were new); the others keep their planned finish."""
        slot_of = self._slot
        slots = np.fromiter((slot_of[job] for job in rates), dtype=np.int64, count=len(rates))
        rate = np.fromiter(rates.values(), dtype=float, count=len(rates))
        new_iter = self._iter_s(slots, rate)
        p = self._progress
        moved = (new_iter != p["iter"][slots]) | self._fresh[slots]
        if not moved.all():
            slots, new_iter = slots[moved], new_iter[moved]
        if not len(slots):
            return []
        self._advance(slots, now)
        p["iter"][slots] = new_iter
        paused = p["paused"][slots]
        begin = np.where(now > paused, now, paused)
        left = p["work"][slots] - p["done"][slots]
        p["finish"][slots] = begin + np.where(left > 0.0, left, 0.0) * new_iter
        self._fresh[slots] = False
        self._next = None
        return self._job[slots].tolist()

    def _advance(self, slots: np.ndarray, now: float) -> None:
        """``Job.advance`` over the slots."""
        p = self._progress
        last, paused = p["last"][slots], p["paused"][slots]
        start = np.where(last > paused, last, paused)
        moving = now > start
        if moving.any():
            on = slots[moving]
            dt = now - start[moving]
            iter_s = p["iter"][on]
            with np.errstate(divide="ignore", invalid="ignore"):
                p["done"][on] = p["done"][on] + dt / iter_s
                p["comm"][on] = p["comm"][on] + dt * (1.0 - p["cons"][on] / iter_s)
        p["last"][slots] = now

    def _iter_s(self, slots: np.ndarray, rate: np.ndarray) -> np.ndarray:
        """``RateTiming.__call__`` over the slots (or each job's own function of the rate)."""
        if self._scalar:
            callables = self._callables
            return np.array(
                [callables[s](r) for s, r in zip(slots.tolist(), rate.tolist(), strict=True)],
                dtype=float,
            )
        t = self._timing
        terms = self._terms[slots]
        comm = t["floor"][slots]
        with np.errstate(divide="ignore", invalid="ignore"):
            for k in range(terms.shape[1]):
                max_bw, weight, latency_s, nbytes = (terms[:, k, f] for f in range(4))
                bw = weight * rate
                bw = np.where(bw < max_bw, bw, max_bw)
                took = latency_s + np.where(bw > 0.0, nbytes / bw, math.inf)
                comm = np.where(took > comm, took, comm)
        exposed = comm - t["overlap"][slots]
        exposed = np.where(exposed < 0.0, 0.0, exposed)
        total = t["compute"][slots] + exposed
        data = t["data"][slots]
        return np.where(data > total, data, total)

    # --- finishing -------------------------------------------------------------------------------

    def next_finish_s(self) -> float:
        """When the first tracked job finishes (``inf`` if none is planned)."""
        if self._next is None:
            self._next = float(self._progress["finish"].min())
        return self._next

    def finishing_at(self, now: float) -> list[int]:
        """The jobs (by index, in slot order) planned to finish at ``now``."""
        slots = np.flatnonzero(self._progress["finish"] == now)
        return self._job[slots].tolist()
