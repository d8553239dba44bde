"""The explicit registry of scheduling policies: name -> factory of a fresh policy object."""

from __future__ import annotations

from collections.abc import Callable

from unstall.errors import ConfigError
from unstall.sched.base import Policy
from unstall.sched.dally import Dally
from unstall.sched.fifo import Consolidate, Fifo, FirstFit
from unstall.sched.gandiva import Gandiva
from unstall.sched.srtf import Srtf
from unstall.sched.tiresias import Tiresias

POLICIES: dict[str, Callable[[], Policy]] = {
    "fifo": Fifo,
    "first-fit": FirstFit,
    "consolidate": Consolidate,
    "srtf": Srtf,
    "tiresias": Tiresias,
    "gandiva": Gandiva,
    "dally": Dally,
}

# One line each, for `unstall sim policies` and the README.
DESCRIPTIONS: dict[str, str] = {
    "fifo": "arrival order, head-of-line blocking, most consolidated GPUs free now",
    "first-fit": "arrival order, any free GPUs in node order (locality-blind)",
    "consolidate": "a job starts only on its most consolidated placement (others backfill)",
    "srtf": "preemptive shortest remaining time first; an oracle (knows durations): a bound",
    "tiresias": "discretised 2D-LAS with starvation promotion; consolidates skewed models only",
    "gandiva": "consolidation-first packing, migration to defragment and re-consolidate",
    "dally": "network-sensitive: delay timers per locality level, preemption, auto-tuned timers",
}


def make_policy(name: str) -> Policy:
    factory = POLICIES.get(name)
    if factory is None:
        raise ConfigError("policy", "name", f"unknown policy {name!r}; known: {sorted(POLICIES)}")
    return factory()
