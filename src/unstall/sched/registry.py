"""The explicit registry of scheduling policies: name -> how to build a fresh policy object.

A policy with knobs names the frozen dataclass that holds them (``options``): its fields are the
keyword options :func:`make_policy` accepts, and they type the ``KEY=VALUE`` text a resolver
reads from the command line (:func:`unstall.config.parse_text_options`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from unstall.errors import ConfigError, a_or_an, did_you_mean
from unstall.sched.base import Policy
from unstall.sched.dally import Dally, DallyConfig
from unstall.sched.dally.lookahead_config import DallyOptions
from unstall.sched.fifo import Consolidate, Fifo, FirstFit
from unstall.sched.gandiva import Gandiva
from unstall.sched.gavel import Gavel, GavelConfig
from unstall.sched.options import check_options, missing_protocol, options_shape
from unstall.sched.srtf import Srtf
from unstall.sched.tiresias import Tiresias
from unstall.usercode import call_user, is_reference, load_callable


@dataclass(frozen=True, kw_only=True)
class PolicyEntry:
    """One registered policy: ``factory(**options)`` builds a fresh policy object;
    ``description`` is one line for listings; ``options`` is the dataclass whose fields are the
    keyword options the factory takes (None: the policy has no options)."""

    factory: Callable[..., Policy]
    description: str
    options: type[Any] | None = None


# Builders that a part above ``sched`` provides for a registered name: ``dally`` (its look-ahead
# runs the simulator, which lives above ``sched``) is provided by ``unstall.sim`` when that is
# imported. The arrow points down: ``sim`` hands ``sched`` its builder, ``sched`` imports no
# ``sim``.
_PROVIDED: dict[str, Callable[..., Policy]] = {}


def provide_factory(name: str, factory: Callable[..., Policy]) -> None:
    """Give a registered policy its builder (a part above ``sched`` provides it)."""
    if name not in POLICIES:
        raise ConfigError("provide_factory", "name", f"{name!r} is not registered")
    _PROVIDED[name] = factory


def _dally(**options: Any) -> Policy:
    factory = _PROVIDED.get("dally")
    if factory is None:
        raise ConfigError(
            "make_policy",
            "dally",
            "its look-ahead runs the simulator: import unstall.sim first (simulate, live runs "
            "and the service do), or use dally-fixed",
        )
    return factory(*DallyOptions(**options).split())


def _dally_fixed(**options: Any) -> Dally:
    return Dally(DallyConfig(**options), name="dally-fixed")


def _gavel(**options: Any) -> Gavel:
    return Gavel(GavelConfig(**options))


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
        description="network-sensitive: delay timers per locality level, preemption; its "
        "settings (delay factor, queue order, preemption for service) chosen every period by a "
        "look-ahead with the simulator, from learnt run times",
        options=DallyOptions,
    ),
    # Dally's fixed settings, without the look-ahead: beside ``dally`` in one comparison it
    # shows what the tuner earns, and it is the cheaper choice (BENCHMARKS.md, "Dally's
    # look-ahead tuner").
    "dally-fixed": PolicyEntry(
        factory=_dally_fixed,
        # The timer tuner (autotune) is off by default (DallyConfig.autotune says why): a
        # listing that promised it would describe runs the defaults never make.
        description="dally with fixed settings (no look-ahead): delay timers, a fixed factor of "
        "expected run time (autotune=on tunes it), preemption",
        options=DallyConfig,
    ),
    "gavel": PolicyEntry(
        factory=_gavel,
        description="heterogeneity-aware LAS (Gavel, OSDI'20): max-min fair shares of each GPU "
        "type from a linear program (HiGHS), realised in rounds (round_s)",
        options=GavelConfig,
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
    if not isinstance(name, str) or not name or ":" in name or name != name.strip():
        raise ConfigError(
            "register_policy", "name", f"{name!r}: want a plain name (a colon names user code)"
        )
    if name in POLICIES:
        raise ConfigError(
            "register_policy", "name", f"{name!r} is already registered; known: {sorted(POLICIES)}"
        )
    _check_factory(factory)
    if not isinstance(description, str):
        raise ConfigError(
            "register_policy", "description", f"must be a string (one line), got {description!r}"
        )
    if options is not None and not (
        isinstance(options, type) and dataclasses.is_dataclass(options)
    ):
        why = f"{options!r} is not a dataclass"
        if dataclasses.is_dataclass(options):
            why = f"must be the dataclass itself, got an instance: pass {type(options).__name__}"
        raise ConfigError("register_policy", "options", why)
    POLICIES[name] = PolicyEntry(factory=factory, description=description, options=options)


def _check_factory(factory: object) -> None:
    """A class or function that builds a fresh policy: a built policy or a name there failed
    only when ``make_policy`` called it, as "'Mine' object is not callable"."""
    if callable(factory):
        return
    if isinstance(factory, Policy):
        cls = type(factory).__name__
        hint = f"a built policy; pass its class ({cls}) or a function that builds a fresh one"
    elif isinstance(factory, str):
        hint = "a name; pass the class itself (unstall.usercode.load_object loads 'FILE.py:NAME')"
    else:
        hint = type(factory).__name__
    raise ConfigError(
        "register_policy", "factory", f"must be callable (a class or function), got {hint}"
    )


# Names that were registered once, with what took their place: a saved command or config that
# names one is told where it went, not only that it is unknown.
RENAMED: dict[str, str] = {
    "dally-tuned": "its look-ahead tuner is on in 'dally' now (Dally without it: 'dally-fixed')",
}


def policy_entry(name: str) -> PolicyEntry:
    """The registered entry called ``name``, with an error listing the known ones."""
    entry = POLICIES.get(name)
    if entry is None:
        moved = f"; {RENAMED[name]}" if name in RENAMED else ""
        raise ConfigError(
            "policy",
            "name",
            f"unknown policy {name!r}{moved or did_you_mean(name, POLICIES)}; known: "
            f"{sorted(POLICIES)}",
        )
    return entry


def make_policy(name: str, /, **options: Any) -> Policy:
    """A fresh policy object of the registered policy ``name``, or of a policy class in user
    code (``FILE.py:Class`` or ``package.module:Class``), with keyword ``options`` (typed
    Python values: ``make_policy("dally", order="las", preemption=False)``).

    ``name`` is positional-only, so that a policy may have an option called ``name`` (a user
    policy's own label: ``make_policy("mine", name="mine-2")``). An option of the wrong type
    (``age_weight="high"``) is a :class:`ConfigError` naming the options class and field; a
    class from user code is typed by itself when it is a dataclass, else by its constructor's
    defaults.
    """
    if isinstance(name, str) and is_reference(name):
        return _user_policy(name, options)
    entry = policy_entry(name)
    if options:
        if entry.options is None:
            with_options = sorted(n for n, e in POLICIES.items() if e.options is not None)
            raise ConfigError(
                "policy", "options", f"{name!r} has no options; these do: {with_options}"
            )
        check_options(entry.options, options)
    policy = entry.factory(**options)
    if not isinstance(policy, Policy):
        raise ConfigError(
            "make_policy",
            "name",
            f"the factory registered as {name!r} returned {type(policy).__name__}, not a policy "
            "(name, needs_oracle, decide(snapshot, rng), reset())",
        )
    return policy


def policy_options_class(name: str) -> type[Any] | None:
    """The dataclass whose fields are the options of the policy ``name`` (registered, or user
    code ``FILE.py:Class``); None for a registered policy without options."""
    if isinstance(name, str) and is_reference(name):
        return options_shape(load_callable(name, what="policy class"))
    return policy_entry(name).options


def _user_policy(reference: str, options: Mapping[str, Any]) -> Policy:
    factory = load_callable(reference, what="policy class")
    if options:
        check_options(options_shape(factory), options)
    policy = call_user(factory, what="policy class", **options)
    missing = missing_protocol(policy)
    if missing:
        built = a_or_an(type(policy).__name__)
        raise ConfigError(
            "make_policy",
            "name",
            f"{reference} built {built}, which lacks the Policy protocol's {missing}",
        )
    return policy


def describe_policies() -> dict[str, str]:
    """``{name: one-line description}`` of every registered policy, in registration order."""
    return {name: entry.description for name, entry in POLICIES.items()}
