"""Policy classes as a user writes them in a file, for the tests that load ``FILE.py:Class``."""

from __future__ import annotations

from pathlib import Path

USER_POLICIES = '''
import dataclasses
from unstall.sched import Decision, FreeGpus, Start


@dataclasses.dataclass
class Greedy:
    """Starts every queued job on the best free GPUs, largest first when asked."""

    name: str = "greedy"
    needs_oracle: bool = False
    largest_first: bool = False

    def reset(self):
        pass

    def decide(self, snapshot, rng):
        free = FreeGpus(snapshot)
        jobs = sorted(snapshot.queued, key=lambda j: -j.num_gpus) if self.largest_first else list(
            snapshot.queued
        )
        starts = []
        for job in jobs:
            placement = free.best(job.num_gpus)
            if placement is not None:
                free.take(placement)
                starts.append(Start(job.job_id, placement))
        return Decision(starts=tuple(starts))


class Plain:
    """Not a dataclass: its options come from the constructor's defaults."""

    needs_oracle = False

    def __init__(self, name="plain", margin=1.5):
        self.name = name
        self.margin = margin

    def reset(self):
        pass

    def decide(self, snapshot, rng):
        return Decision()


class NotAPolicy:
    pass


class NoMethods:
    name = "no-methods"
    needs_oracle = False
'''


def write_user_policies(folder: Path) -> Path:
    """``my_policies.py`` in ``folder``, holding :data:`USER_POLICIES`."""
    path = folder / "my_policies.py"
    path.write_text(USER_POLICIES)
    return path
