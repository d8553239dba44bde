"""The explicit registry of scheduling policies: name -> how to build a fresh policy object.

A policy with knobs names the frozen dataclass that holds them (``options``): its fields are the
keyword options :func:`make_policy` accepts, and they type the ``KEY=VALUE`` text a resolver
reads from the command line (:func:`unstall.config.parse_text_options`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from unstall.errors import ConfigError
from unstall.sched.base import Policy
from unstall.sched.dally import Dally, DallyConfig
from unstall.sched.fifo import Consolidate, Fifo, FirstFit
from unstall.sched.gandiva import Gandiva
from unstall.sched.srtf import Srtf
from unstall.sched.tiresias import Tiresias


@dataclass(frozen=True, kw_only=True)
class PolicyEntry:
    """One registered policy: ``factory(**options)`` builds a fresh policy object;
    ``description`` is one line for listings; ``options`` is the dataclass whose fields are the
    keyword options the factory takes (None: the policy has no options)."""

    factory: Callable[..., Policy]
    description: str
    options: type[Any] | None = None


def _dally(**options: Any) -> Dally:
    return Dally(DallyConfig(**options))


POLICIES: dict[str, PolicyEntry] = {
    "fifo": PolicyEntry(
        factory=Fifo,
        description="arrival order, head-of-line blocking, most consolidated GPUs free now",
    ),
    "first-fit": PolicyEntry(
        factory=FirstFit,
        description="arrival order, any free GPUs in node order (locality-blind)",
    ),
    "consolidate": PolicyEntry(
        factory=Consolidate,
        description="a job starts only on its most consolidated placement (others backfill)",
    ),
    "srtf": PolicyEntry(
        factory=Srtf,
        description="preemptive shortest remaining time first; an oracle (knows durations): a "
        "bound",
    ),
    "tiresias": PolicyEntry(
        factory=Tiresias,
        description="discretised 2D-LAS with starvation promotion; consolidates skewed models only",
    ),
    "gandiva": PolicyEntry(
        factory=Gandiva,
        description="consolidation-first packing, migration to defragment and re-consolidate",
    ),
    "dally": PolicyEntry(
        factory=_dally,
        description="network-sensitive: delay timers per locality level, preemption, auto-tuned "
        "timers",
        options=DallyConfig,
    ),
}


def register_policy(
    name: str,
    factory: Callable[..., Policy],
    *,
    description: str,
    options: type[Any] | None = None,
) -> None:
    """Add a policy to :data:`POLICIES` under ``name``.

    ``factory(**options)`` must return a fresh object implementing :class:`Policy`; ``options``
    is the dataclass whose fields are its keyword options, if it has any. A name already taken
    is an error (replacing a built-in silently would change every run that names it).
    """
    if not name or ":" in name or name != name.strip():
        raise ConfigError(
            "register_policy", "name", f"{name!r}: want a plain name (a colon names user code)"
        )
    if name in POLICIES:
        raise ConfigError(
            "register_policy", "name", f"{name!r} is already registered; known: {sorted(POLICIES)}"
        )
    if options is not None and not dataclasses.is_dataclass(options):
        raise ConfigError("register_policy", "options", f"{options!r} is not a dataclass")
    POLICIES[name] = PolicyEntry(factory=factory, description=description, options=options)


def policy_entry(name: str) -> PolicyEntry:
    """The registered entry called ``name``, with an error listing the known ones."""
    entry = POLICIES.get(name)
    if entry is None:
        raise ConfigError("policy", "name", f"unknown policy {name!r}; known: {sorted(POLICIES)}")
    return entry


def make_policy(name: str, **options: Any) -> Policy:
    """A fresh policy object of the registered policy ``name`` with keyword ``options``
    (typed Python values: ``make_policy("dally", order="las", preemption=False)``)."""
    entry = policy_entry(name)
    if options:
        if entry.options is None:
            with_options = sorted(n for n, e in POLICIES.items() if e.options is not None)
            raise ConfigError(
                "policy", "options", f"{name!r} has no options; these do: {with_options}"
            )
        known = {f.name for f in dataclasses.fields(entry.options)}
        for key in options:
            if key not in known:
                raise ConfigError(
                    entry.options.__name__, key, f"unknown option; known: {sorted(known)}"
                )
    return entry.factory(**options)


def describe_policies() -> dict[str, str]:
    """``{name: one-line description}`` of every registered policy, in registration order."""
    return {name: entry.description for name, entry in POLICIES.items()}
