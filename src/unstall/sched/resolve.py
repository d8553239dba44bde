"""A policy from what a user names: a policy object as it is, a registered name, or a policy
class in user code (``FILE.py:Class`` / ``package.module:Class``), with options given as text
(``(key, text)`` pairs, as a command line or a saved run holds them) typed by the policy's
options dataclass.

Every front door that takes a policy (:func:`unstall.sim.simulate`, the live backend, a
command) resolves it here, so that a name means the same everywhere.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from unstall.config import parse_text_options
from unstall.errors import ArgumentTypeError, ConfigError
from unstall.sched.base import Policy
from unstall.sched.options import missing_policy_members
from unstall.sched.registry import POLICIES, make_policy, policy_options_class


def resolve_policy(
    policy: Policy | str,
    options: Sequence[tuple[str, str]] = (),
    *,
    owner: str = "resolve_policy",
    field: str = "policy",
) -> Policy:
    """``policy`` itself when it is a policy object; else a fresh policy of the registered name
    or user-code class it names, with ``options`` (``(key, text)`` pairs such as
    ``(("order", "las"),)``) typed by its options dataclass (a user class: by itself when it is
    a dataclass, else by its constructor's defaults) and passed as keyword arguments.

    A value of another type raises :class:`~unstall.errors.ArgumentTypeError` (a TypeError)
    naming ``owner.field`` and what it takes; options given with a policy object, a
    :class:`ConfigError` (the object is built already).
    """
    if isinstance(policy, str):
        return make_policy(policy, **policy_text_options(policy, options))
    if isinstance(policy, type) or missing_policy_members(policy):
        raise ArgumentTypeError(owner, field, _wrong_type(policy))
    if options:
        raise ConfigError(
            owner,
            "options",
            f"given with a policy object ({type(policy).__name__}), which is built already: "
            "name the policy instead, or build it with its options",
        )
    return policy


# A label: letters, digits, "_" and "-" (no "." or ":", so that it reads as no file or module).
_LABEL = re.compile(r"[A-Za-z0-9_-]+")


def labelled_policy(entry: str) -> tuple[str, str]:
    """``LABEL=POLICY`` (a comparison's entry naming one policy twice with other options, e.g.
    ``nodelay=dally-fixed``) as ``(LABEL, POLICY)``; an entry without a label is its own label.
    A text before ``=`` that is no label (it holds a ``.``, ``/`` or ``:``) leaves the entry
    whole: a file name may hold an ``=``."""
    label, sep, policy = entry.partition("=")
    if sep and _LABEL.fullmatch(label.strip()) and policy.strip():
        return label.strip(), policy.strip()
    return entry, entry


def policy_text_options(name: str, options: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """``(key, text)`` pairs as the typed keyword options of the policy ``name``: each text
    typed like its field (bool, int, float, str, a comma-separated tuple of floats; ``none``
    for a field that may be None). Errors name the policy and the field."""
    if not options:
        return {}
    shape = policy_options_class(name)
    if shape is None:
        # Without an options dataclass any option is an error, which make_policy reports.
        return dict(options)
    # Errors name the policy as its user does (``dally.wiat_factor``), not its options class.
    return parse_text_options(shape, options, owner=name)


def _wrong_type(policy: object) -> str:
    wanted = (
        "takes a policy object (name, needs_oracle, decide(snapshot, rng), reset()), a "
        f"registered policy's name ({sorted(POLICIES)}) or FILE.py:Class"
    )
    if isinstance(policy, type):
        name = policy.__name__
        return f"{wanted}; got a class, {name}: instantiate it ({name}())"
    missing = " and ".join(missing_policy_members(policy))
    return f"{wanted}; got {type(policy).__name__}, which lacks {missing}"
