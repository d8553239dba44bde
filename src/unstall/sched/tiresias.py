"""Tiresias (Gu et al., NSDI'19): discretised two-dimensional least-attained-service.

A job's priority is the queue its attained GPU-service (GPUs x time) puts it in; within a queue,
arrival order. Jobs that waited much longer than they ran are promoted to the top queue
(starvation guard). Jobs of skewed models (one or a few very large tensors) are started only on
consolidated GPUs; others go wherever GPUs are free, as Tiresias's profiler-guided placement does.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from unstall.config import check
from unstall.sched.base import ClusterSnapshot, Decision, JobView, PolicyBase, Preempt, Start
from unstall.sched.free import FreeGpus
from unstall.sched.placement import TypeClaims
from unstall.sched.reasons import shortfall

# Models whose largest tensor holds most of the parameters; from the zoo's static facts
# (vgg16's and alexnet's first fully connected layers, the LM's embedding and decoder).
DEFAULT_SKEWED_MODELS = frozenset({"vgg11", "vgg13", "vgg16", "vgg19", "alexnet", "lstm_lm"})


@dataclass
class Tiresias(PolicyBase):
    """Discretised 2D least-attained-service with starvation promotion; skewed models start
    only on consolidated GPUs (see the module docstring)."""

    name: str = "tiresias"
    needs_oracle: bool = False
    thresholds_gpu_s: tuple[float, ...] = (3600.0, 36000.0)
    promote_factor: float = 8.0  # promote when waiting > factor x time run so far
    skewed_models: frozenset[str] = field(default_factory=lambda: DEFAULT_SKEWED_MODELS)
    tick_s: float = 300.0  # re-evaluate priorities this often while jobs wait

    def __post_init__(self) -> None:
        check(
            list(self.thresholds_gpu_s) == sorted(self.thresholds_gpu_s),
            self,
            "thresholds_gpu_s",
            "must be ascending",
        )
        check(self.promote_factor > 0, self, "promote_factor", "must be > 0")

    def level(self, job: JobView, now: float) -> int:
        attained = job.attained_gpu_s(now)
        if not job.running and attained > 0:
            ran_s = attained / job.num_gpus
            if job.waiting_s(now) > self.promote_factor * ran_s:
                return 0
        return bisect.bisect_right(self.thresholds_gpu_s, attained)

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        if not snapshot.queued:
            return Decision()
        now = snapshot.now
        free = FreeGpus(snapshot)
        waiting = sorted(snapshot.queued, key=lambda j: (self.level(j, now), j.submit_s, j.index))
        # Lowest priority first: the first to give way.
        victims = sorted(
            snapshot.running, key=lambda j: (-self.level(j, now), -j.submit_s, -j.index)
        )
        starts: list[Start] = []
        preempts: list[Preempt] = []
        # Several GPU types: the fast GPUs go to the jobs that gain most from them.
        claims = None if free.layout.one_type else TypeClaims(waiting, free.by_node, free.layout)
        for job in waiting:
            level = self.level(job, now)
            types = None if claims is None else claims.types_for(job, free.by_node)
            placement = self._place(free, job, types)
            if claims is not None:
                claims.done(job)
            if placement is None:
                chosen = self._make_room(free, job, level, victims, now)
                placement = self._place(free, job, types) if chosen else None
                if placement is None:
                    for victim in chosen:  # room was not enough: nobody is preempted
                        free.take(victim.placement)
                    continue
                for victim in chosen:
                    victims.remove(victim)
                    preempts.append(Preempt(victim.job_id, "lower attained-service priority"))
            free.take(placement)
            starts.append(Start(job.job_id, placement))
        return Decision(starts=tuple(starts), preemptions=tuple(preempts))

    def wait_reasons(self, snapshot: ClusterSnapshot) -> dict[str, str]:
        """Each waiting job's reason (:mod:`unstall.sched.reasons`): its priority queue by
        attained service, the waiting jobs of higher priority ahead of it, and the GPUs or the
        consolidated placement it lacks."""
        now = snapshot.now
        queues = len(self.thresholds_gpu_s) + 1
        free = FreeGpus(snapshot)
        reasons: dict[str, str] = {}
        ahead_by_level: dict[int, int] = {}
        for job in snapshot.queued:
            level = self.level(job, now)
            ahead_by_level[level] = ahead_by_level.get(level, 0) + 1
        for job in snapshot.queued:
            level = self.level(job, now)
            higher = sum(n for lv, n in ahead_by_level.items() if lv < level)
            words = [
                f"priority queue {level + 1} of {queues} "
                f"({job.attained_gpu_s(now) / 3600:.2g} GPU-h attained)"
            ]
            if higher:
                words.append(f"{higher} waiting job(s) of higher priority")
            short = shortfall(job, snapshot)
            if short is not None:
                words.insert(0, short)
            elif job.model in self.skewed_models and free.consolidated(job.num_gpus) is None:
                words.insert(0, f"waiting for a consolidated placement ({job.model} is skewed)")
            reasons[job.job_id] = "; ".join(words)
        return reasons

    def _place(
        self, free: FreeGpus, job: JobView, types: Sequence[str] | None = None
    ) -> tuple[tuple[int, int], ...] | None:
        if job.model in self.skewed_models:
            return free.consolidated(job.num_gpus, types)
        return free.best(job.num_gpus, types)

    def _make_room(
        self, free: FreeGpus, job: JobView, level: int, victims: list[JobView], now: float
    ) -> list[JobView]:
        """Free strictly lower-priority running jobs until the free count could hold ``job``."""
        chosen: list[JobView] = []
        now_free = free.total
        for victim in victims:
            if now_free >= job.num_gpus:
                break
            if self.level(victim, now) <= level:
                break
            chosen.append(victim)
            now_free += victim.num_gpus
        if now_free < job.num_gpus:
            return []
        for victim in chosen:
            free.give(victim.placement)
        return chosen
