"""Resolvers of the simulator's command line: text (names, files, ``KEY=VALUE`` options, user
code) into the objects :func:`unstall.sim.simulate` takes.

- policy: a registered name (``unstall sim policies``) with ``KEY=VALUE`` options typed by the
  policy's options dataclass, or user code ``FILE.py:Class`` / ``package.module:Class`` built with
  the options as keyword arguments (typed like the class's defaults);
- cluster: a preset name (``small``, ``medium``, ``philly``) or a ``.toml``/``.json`` file;
- congestion: a level (``none``, ``low``, ``medium``, ``high``) or a ``.csv`` schedule file;
- trace: :func:`unstall.cli.resolvers.traces.resolve_trace` (a file in any known format, or
  the embedded default trace);
- job profiles: JobProfile JSON files.

:class:`SimRequest` holds one run as the user gave it; it is what ``--json`` saves beside a
result, and :func:`simulate_request` resolves it and runs it.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unstall.config import parse_text_options
from unstall.errors import ConfigError, a_or_an
from unstall.net import TOPOLOGY_PRESETS, TopologyConfig, load_topology, topology_preset
from unstall.sched import Policy, make_policy, policy_entry
from unstall.sim import (
    CONGESTION_LEVELS,
    Congestion,
    PolicyCrashError,
    SimRun,
    congestion_level,
    read_congestion_schedule,
    simulate,
)
from unstall.sim.arguments import missing_policy_members
from unstall.traces import Trace
from unstall.usercode import call_user, is_reference, load_callable
from unstall.workload import JobProfile

REQUEST = "SimRequest"  # what errors about the request's fields are reported against
TOPOLOGY_SUFFIXES = (".toml", ".json")


@dataclass(frozen=True, kw_only=True)
class SimRequest:
    """One simulated run as the user asked for it: names, file paths and option texts, plus the
    plain settings. Saved beside each result, so that the run can be repeated."""

    policy: str = "fifo"
    # The policy's own knobs as (field, text) pairs, e.g. (("order", "las"),) for dally.
    policy_options: tuple[tuple[str, str], ...] = ()
    cluster: str = "small"  # a preset name or a TOML/JSON topology file
    congestion: str = "none"  # a level or a CSV schedule file (time_s,fraction)
    seed: int = 0
    restore_s: float = 60.0  # checkpoint + restore paid by each preemption and migration
    tick_s: float | None = None  # None: the policy's own re-scheduling period, if it has one
    # Share of each model among jobs whose trace names none (Philly has no model column).
    model_mix: tuple[tuple[str, float], ...] | None = None
    max_jobs: int | None = None  # simulate only the first N jobs of the trace
    # JobProfile JSON files (from `unstall profile run`): jobs of a profiled model's name run at
    # its measured figures instead of the zoo's estimates (a zoo name is overridden).
    job_profiles: tuple[str, ...] = ()
    # The GPU type the trace's durations were measured on (None: the cluster's fastest type).
    duration_gpu: str | None = None


# --- text -----------------------------------------------------------------------------------------


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


# --- objects --------------------------------------------------------------------------------------


def resolve_policy(text: str, options: Sequence[tuple[str, str]] = ()) -> Policy:
    """A fresh policy object: a registered name, or user code ``FILE.py:Class`` /
    ``package.module:Class``, with ``options`` (``(key, text)`` pairs) typed and passed as
    keyword arguments."""
    if is_reference(text):
        return _user_policy(text, options)
    entry = policy_entry(text)
    if not options or entry.options is None:
        # Without an options dataclass any option is an error, which make_policy reports.
        return make_policy(text, **dict(options))
    return make_policy(
        text, **parse_text_options(entry.options, options, owner=entry.options.__name__)
    )


def _user_policy(reference: str, options: Sequence[tuple[str, str]]) -> Policy:
    factory = load_callable(reference, what="policy class")
    typed: dict[str, Any] = {}
    if options:
        shape = _options_shape(factory)
        typed = parse_text_options(shape, options, owner=getattr(factory, "__name__", reference))
    policy = call_user(factory, what="policy class", **typed)
    missing = _missing_protocol(policy)
    if missing:
        built = a_or_an(type(policy).__name__)
        raise ConfigError(
            REQUEST,
            "policy",
            f"{reference} built {built}, which lacks the Policy protocol's {missing}",
        )
    return policy


def _missing_protocol(policy: object) -> str:
    """What ``policy`` lacks of the Policy protocol, as ``"decide(snapshot, rng) and reset()"``
    ("" when nothing)."""
    missing = missing_policy_members(policy)
    if len(missing) <= 1:
        return "".join(missing)
    return f"{', '.join(missing[:-1])} and {missing[-1]}"


def _options_shape(factory: Callable[..., Any]) -> type[Any]:
    """A dataclass whose fields type the options of ``factory``: the class itself when it is a
    dataclass, else one field per keyword parameter with a default (typed like the default)."""
    if isinstance(factory, type) and dataclasses.is_dataclass(factory):
        return factory
    fields = []
    for name, param in inspect.signature(factory).parameters.items():
        usable = param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY)
        if usable and param.default is not param.empty:
            fields.append((name, type(param.default), dataclasses.field(default=param.default)))
    label = getattr(factory, "__name__", "policy")
    return dataclasses.make_dataclass(f"{label}Options", fields, frozen=True)


def resolve_cluster(text: str) -> TopologyConfig:
    """A preset by name, or a topology file (``.toml``/``.json``)."""
    if text in TOPOLOGY_PRESETS:
        return topology_preset(text)
    if Path(text).suffix in TOPOLOGY_SUFFIXES:
        return load_topology(text)
    raise ConfigError(
        REQUEST,
        "cluster",
        f"{text!r} is neither a preset {sorted(TOPOLOGY_PRESETS)} nor a .toml/.json file",
    )


def resolve_congestion(text: str) -> Congestion:
    """A level by name, or a CSV schedule file (labelled in results as written here)."""
    if text in CONGESTION_LEVELS:
        return congestion_level(text)
    if text.endswith(".csv"):
        return read_congestion_schedule(text, name=text)
    raise ConfigError(
        REQUEST,
        "congestion",
        f"{text!r} is neither a level {sorted(CONGESTION_LEVELS)} nor a .csv schedule",
    )


def resolve_job_profiles(paths: Sequence[str | Path]) -> tuple[JobProfile, ...]:
    """The JobProfile JSON files, read (each error names its file)."""
    return tuple(JobProfile.from_json(Path(path)) for path in paths)


def simulate_request(
    request: SimRequest, trace: Trace, *, on_finish: Callable[[int], None] | None = None
) -> SimRun:
    """Resolve every name and file of ``request``, then simulate ``trace``. A policy that
    raises is named as the user wrote it (``badpol.py:Crash``), not by the name it gives
    itself, which may be the same for two classes compared side by side."""
    cluster = resolve_cluster(request.cluster)
    policy = resolve_policy(request.policy, request.policy_options)
    congestion = resolve_congestion(request.congestion)
    profiles = resolve_job_profiles(request.job_profiles)
    try:
        return simulate(
            trace,
            cluster,
            policy,
            congestion=congestion,
            seed=request.seed,
            restore_s=request.restore_s,
            tick_s=request.tick_s,
            model_mix=None if request.model_mix is None else dict(request.model_mix),
            max_jobs=request.max_jobs,
            job_profiles=profiles,
            duration_gpu=request.duration_gpu,
            on_finish=on_finish,
        )
    except PolicyCrashError as exc:
        raise PolicyCrashError(request.policy, exc.error) from exc.__cause__
