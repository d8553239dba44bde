"""Shortest remaining time first, preemptive. An oracle: it is told each job's remaining work,
which no real scheduler knows, so its figures are a bound rather than a competitor."""

from __future__ import annotations

import random
from dataclasses import dataclass

from unstall.sched.base import ClusterSnapshot, Decision, JobView, PolicyBase, Preempt, Start
from unstall.sched.free import FreeGpus


@dataclass
class Srtf(PolicyBase):
    """Preemptive shortest remaining time first; an oracle (``needs_oracle``): it reads each
    job's remaining work, so its figures are a bound."""

    name: str = "srtf"
    needs_oracle: bool = True
    # Preempt a running job only for one whose remaining time is this much shorter: without a
    # margin two jobs of nearly equal remaining time would swap back and forth, each swap paying
    # the checkpoint/restore cost.
    preempt_ratio: float = 0.5

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        if not snapshot.queued:
            return Decision()

        now = snapshot.now

        def remaining(job: JobView) -> float:
            return job.remaining_oracle_s(now)

        free = FreeGpus(snapshot)
        waiting = sorted(snapshot.queued, key=lambda j: (remaining(j), j.submit_s, j.index))
        # Longest remaining first; sorted only when some job does not fit (rare on a busy
        # cluster's typical round, where one arrival meets free GPUs).
        victims: list[JobView] | None = None
        starts: list[Start] = []
        preempts: list[Preempt] = []
        for job in waiting:
            if free.total < job.num_gpus:
                # Preempt the longest-remaining running jobs, but only when enough of them are
                # much longer than this job to make room (a placement anywhere then exists).
                need = job.num_gpus - free.total
                if victims is None:
                    victims = sorted(snapshot.running, key=lambda j: (-remaining(j), j.index))
                chosen = []
                for victim in victims:
                    if need <= 0 or remaining(victim) * self.preempt_ratio <= remaining(job):
                        break
                    chosen.append(victim)
                    need -= victim.num_gpus
                if need > 0:
                    continue
                for victim in chosen:
                    victims.remove(victim)
                    free.give(victim.placement)
                    preempts.append(Preempt(victim.job_id, "longer remaining time"))
            placement = free.best(job.num_gpus)
            if placement is None:
                continue
            free.take(placement)
            starts.append(Start(job.job_id, placement))
        return Decision(starts=tuple(starts), preemptions=tuple(preempts))
