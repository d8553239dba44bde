"""The explicit registry of scheduling policies: name -> factory of a fresh policy object."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from unstall.config import parse_text_options
from unstall.errors import ConfigError
from unstall.sched.base import Policy
from unstall.sched.dally import Dally, DallyConfig
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


# Policies with knobs of their own: name -> (config class, factory taking that config). Options
# given as text (`sim run --policy-option KEY=VALUE`) are typed by the config's fields.
CONFIGURABLE: dict[str, tuple[type[Any], Callable[[Any], Policy]]] = {
    "dally": (DallyConfig, Dally),
}


def make_policy(name: str, options: Sequence[tuple[str, str]] = ()) -> Policy:
    factory = POLICIES.get(name)
    if factory is None:
        raise ConfigError("policy", "name", f"unknown policy {name!r}; known: {sorted(POLICIES)}")
    if not options:
        return factory()
    configurable = CONFIGURABLE.get(name)
    if configurable is None:
        raise ConfigError(
            "policy", "options", f"{name!r} has no options; these do: {sorted(CONFIGURABLE)}"
        )
    config_cls, build = configurable
    return build(config_cls(**parse_text_options(config_cls, options, owner=config_cls.__name__)))
