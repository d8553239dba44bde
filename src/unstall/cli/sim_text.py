"""The simulator commands' own text: ``KEY=VALUE`` options, ``POLICY.KEY=VALUE`` options of
``sim compare`` and ``sim sweep`` split by policy, and ``--model-mix``. Names and files are
resolved by the parts (:func:`unstall.sched.resolve_policy`, :func:`unstall.net.resolve_cluster`,
:func:`unstall.traces.resolve_trace`, :mod:`unstall.sim.request`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from unstall.errors import ConfigError


def parse_pairs(items: Sequence[str], option: str, form: str) -> tuple[tuple[str, str], ...]:
    """``KEY=VALUE`` texts split at the first ``=``, stripped; a text without one is an error."""
    pairs = []
    for text in items:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise ConfigError(option, text, f"expected {form}")
        pairs.append((key.strip(), value.strip()))
    return tuple(pairs)


def split_policy_options(
    pairs: Sequence[tuple[str, str]], policies: Sequence[str]
) -> dict[str, tuple[tuple[str, str], ...]]:
    """``POLICY.KEY=VALUE`` pairs (``sim compare --policy-option``) by policy: ``(("dally.order",
    "las"),)`` -> ``{"dally": (("order", "las"),)}``. ``POLICY`` is written as in ``--policies``
    (a name or ``FILE.py:Class``, which may itself hold dots: the longest match wins)."""
    by_policy: dict[str, list[tuple[str, str]]] = {name: [] for name in policies}
    for key, value in pairs:
        owners = [
            name for name in policies if key.startswith(f"{name}.") and len(key) > len(name) + 1
        ]
        if not owners:
            raise ConfigError(
                "--policy-option",
                f"{key}={value}",
                f"expected POLICY.KEY=VALUE with POLICY one of {list(dict.fromkeys(policies))}",
            )
        owner = max(owners, key=len)
        by_policy[owner].append((key[len(owner) + 1 :], value))
    return {name: tuple(options) for name, options in by_policy.items()}


def parse_model_mix(text: str | None) -> tuple[tuple[str, float], ...] | None:
    """``NAME=SHARE,...`` (``--model-mix``) as (name, share) pairs; None stays None."""
    if text is None:
        return None
    form = "NAME=SHARE with a number share"
    items = [part.strip() for part in text.split(",") if part.strip()]
    mix = []
    for name, share in parse_pairs(items, "--model-mix", form):
        try:
            value = float(share)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise ConfigError("--model-mix", f"{name}={share}", f"expected {form}")
        mix.append((name, value))
    return tuple(mix)
