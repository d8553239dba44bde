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
    (a name or ``FILE.py:Class``, which may itself hold dots: the longest match wins), or is the
    label of a ``LABEL=POLICY`` entry there (``nodelay.delay=off``); the result is keyed by the
    entries as written."""
    from unstall.sched.resolve import labelled_policy

    labels = {entry: labelled_policy(entry)[0] for entry in policies}
    by_policy: dict[str, list[tuple[str, str]]] = {entry: [] for entry in policies}
    for key, value in pairs:
        owners = [
            entry
            for entry, name in labels.items()
            if key.startswith(f"{name}.") and len(key) > len(name) + 1
        ]
        if not owners:
            raise ConfigError(
                "--policy-option",
                f"{key}={value}",
                "expected POLICY.KEY=VALUE with POLICY one of "
                f"{list(dict.fromkeys(labels.values()))}",
            )
        owner = max(owners, key=lambda entry: len(labels[entry]))
        by_policy[owner].append((key[len(labels[owner]) + 1 :], value))
    return {entry: tuple(options) for entry, options in by_policy.items()}


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
