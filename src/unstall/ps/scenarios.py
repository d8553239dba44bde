"""Straggler scenarios as data: how many servers, each one's link and compute, and how they change.

A scenario has a ``base`` :class:`~unstall.ps.links.ServerSpec` every server starts from and
``phases``: from a fraction ``start`` of the run on, the listed servers take the listed values
over the base (a phase replaces the one before it; servers it does not list are back at the base).
It may name the zoo model it is meant for (``imbalance`` needs one very large tensor): a label
for whoever picks the model, which the parameter server itself never looks up. A scenario is
the truth about the hardware: server ``i`` (ids are never reused) has the spec the scenario gives
index ``i`` at every iteration, including ``spares`` that a controller may add later. Presets are
functions in :data:`SCENARIOS`; :func:`load_scenario` reads the same structure from TOML or JSON,
with links quoted in MB/s and milliseconds as network figures for servers usually are:

    name = "slow-one"
    servers = 4
    [base]
    bandwidth_mb_s = 100.0
    latency_ms = 0.2
    [[phases]]
    start = 0.0
    servers = [{ server = 1, bandwidth_mb_s = 25.0 }]

The default link (25 MB/s, 0.2 Gbit/s, 0.5 ms) is set so that moving the presets' few MB of
parameters takes several times longer than their compute and than Ray's own overhead on a small
machine, as the network does on a real cluster.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from unstall.config import check, check_positive, from_mapping, load_table_file
from unstall.errors import ConfigError, ConfigFileError, DataFileError
from unstall.net.link import Link
from unstall.ps.links import DEFAULT_LATENCY_MS, DEFAULT_LINK_MB_S, ServerSpec

SLOW_LINK_FACTOR = 4  # `bandwidth`: one server at a quarter of the bandwidth
INTERFERENCE_SLOWDOWN = 10.0


@dataclass(frozen=True, kw_only=True)
class ServerOverride:
    """Values that replace the base for server ``server`` (None: keep the base's)."""

    server: int
    link: Link | None = None
    apply_mb_s: float | None = None
    slowdown: float | None = None

    def __post_init__(self) -> None:
        ok = isinstance(self.server, int) and not isinstance(self.server, bool)
        check(ok and self.server >= 0, self, "server", f"must be an index >= 0, got {self.server}")
        try:  # validate the values now, so that an error names this override's field
            self.over(ServerSpec())
        except ConfigError as exc:
            raise ConfigError(type(self).__name__, exc.field, exc.why) from exc

    def over(self, base: ServerSpec) -> ServerSpec:
        values = {
            k: getattr(self, k)
            for k in ("link", "apply_mb_s", "slowdown")
            if getattr(self, k) is not None
        }
        return dataclasses.replace(base, **values)


@dataclass(frozen=True, kw_only=True)
class Phase:
    """From ``start`` (a fraction of the run's iterations, in [0, 1)) on, these overrides."""

    start: float = 0.0
    servers: tuple[ServerOverride, ...] = ()

    def __post_init__(self) -> None:
        check(0 <= self.start < 1, self, "start", f"must be in [0, 1), got {self.start}")
        listed = [o.server for o in self.servers]
        check(len(set(listed)) == len(listed), self, "servers", f"server listed twice: {listed}")

    def start_iteration(self, iterations: int) -> int:
        return int(self.start * iterations)


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """A straggler scenario (see the module docstring): ``servers`` servers that start from
    ``base``, ``spares`` more a controller may add, and ``phases`` of overrides over time."""

    name: str
    description: str = ""
    servers: int = 4
    spares: int = 0  # servers a controller may add: ids servers .. servers + spares - 1
    base: ServerSpec = field(default_factory=ServerSpec)
    phases: tuple[Phase, ...] = ()
    model: str | None = None  # a zoo model's name, for whoever picks the model (a label here)
    model_options: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "model_options", MappingProxyType(dict(self.model_options)))
        for name in ("servers", "spares"):
            value = getattr(self, name)
            whole = isinstance(value, int) and not isinstance(value, bool)
            check(whole, self, name, f"must be a whole number, got {value!r}")
        check(self.servers >= 1, self, "servers", f"must be >= 1, got {self.servers}")
        check(self.spares >= 0, self, "spares", f"must be >= 0, got {self.spares}")
        starts = [p.start for p in self.phases]
        check(starts == sorted(set(starts)), self, "phases", f"starts must increase: {starts}")
        for i, phase in enumerate(self.phases):
            for o in phase.servers:
                check(
                    o.server < self.servers + self.spares,
                    self,
                    f"phases[{i}].servers",
                    f"server {o.server} does not exist "
                    f"(servers = {self.servers}, spares = {self.spares})",
                )

    def with_servers(self, servers: int) -> Scenario:
        """The same scenario on ``servers`` servers (overrides of missing servers are an error)."""
        return dataclasses.replace(self, servers=servers)

    def with_spares(self, spares: int) -> Scenario:
        """The same scenario with ``spares`` servers a controller may add."""
        return dataclasses.replace(self, spares=spares)

    def spec(self, server: int, iteration: int, iterations: int) -> ServerSpec:
        """Server ``server``'s spec during ``iteration`` of a run of ``iterations``."""
        active: Phase | None = None
        for phase in self.phases:
            if phase.start_iteration(iterations) <= iteration:
                active = phase
        for o in active.servers if active else ():
            if o.server == server:
                return o.over(self.base)
        return self.base

    def specs(self, iteration: int, iterations: int) -> tuple[ServerSpec, ...]:
        return tuple(self.spec(s, iteration, iterations) for s in range(self.servers))

    def spans(self, iterations: int) -> list[tuple[int, int]]:
        """``[start, stop)`` of each stretch of iterations with constant specs (none empty)."""
        cuts = sorted({0, iterations, *(p.start_iteration(iterations) for p in self.phases)})
        return [(a, b) for a, b in itertools.pairwise(cuts) if b > a]


def scaled_links(scenario: Scenario, factor: float) -> Scenario:
    """``scenario`` with every bandwidth (the base's and each override's) times ``factor``: the
    same stragglers, relative to links ``factor`` times as fast."""
    check(factor > 0, "links", "factor", f"must be > 0, got {factor}")

    def scaled(link: Link) -> Link:
        return dataclasses.replace(link, bandwidth_gbps=link.bandwidth_gbps * factor)

    base = dataclasses.replace(scenario.base, link=scaled(scenario.base.link))
    phases = tuple(
        dataclasses.replace(
            phase,
            servers=tuple(
                o if o.link is None else dataclasses.replace(o, link=scaled(o.link))
                for o in phase.servers
            ),
        )
        for phase in scenario.phases
    )
    return dataclasses.replace(scenario, base=base, phases=phases)


# --- presets -------------------------------------------------------------------------------------

# The small models the presets train: a 4-layer MLP (3.7 MB of float32 parameters, no tensor
# above 1.6 MB), and for `imbalance` a 3-layer MLP whose first layer (4096 x 256: 1.05 M
# elements, 4.2 MB) holds 94% of its 4.5 MB, like VGG-16's first fully-connected layer (74%).
BALANCED_MODEL = ("mlp", {"in_features": 784, "width": 512, "depth": 4, "num_classes": 10})
IMBALANCED_MODEL = ("mlp", {"in_features": 4096, "width": 256, "depth": 3, "num_classes": 10})


def _slow_link(server: int, base: ServerSpec) -> ServerOverride:
    link = dataclasses.replace(
        base.link, bandwidth_gbps=base.link.bandwidth_gbps / SLOW_LINK_FACTOR
    )
    return ServerOverride(server=server, link=link)


def none() -> Scenario:
    """Four equal servers, no straggler."""
    return Scenario(
        name="none",
        description="four equal servers, no straggler",
        model=BALANCED_MODEL[0],
        model_options=BALANCED_MODEL[1],
    )


def bandwidth() -> Scenario:
    """Bandwidth contention: server 1 of 4 at a quarter of the bandwidth."""
    base = ServerSpec()
    return Scenario(
        name="bandwidth",
        description="bandwidth contention: server 1 of 4 at a quarter of the bandwidth",
        phases=(Phase(servers=(_slow_link(1, base),)),),
        model=BALANCED_MODEL[0],
        model_options=BALANCED_MODEL[1],
    )


def interference() -> Scenario:
    """Interference: server 2 computes ten times slower."""
    return Scenario(
        name="interference",
        description=f"interference: server 2 computes {INTERFERENCE_SLOWDOWN:g}x slower",
        phases=(Phase(servers=(ServerOverride(server=2, slowdown=INTERFERENCE_SLOWDOWN),)),),
        model=BALANCED_MODEL[0],
        model_options=BALANCED_MODEL[1],
    )


def imbalance() -> Scenario:
    """Imbalanced parameters: one tensor holds 94% of the model."""
    return Scenario(
        name="imbalance",
        description="imbalanced parameters: one tensor holds 94% of the model (like VGG-16's fc6)",
        model=IMBALANCED_MODEL[0],
        model_options=IMBALANCED_MODEL[1],
    )


def dynamic() -> Scenario:
    """The slow (quarter-bandwidth) server moves: 0, then 2, then 3."""
    base = ServerSpec()
    return Scenario(
        name="dynamic",
        description="the slow (quarter-bandwidth) server moves: 0, then 2, then 3",
        phases=tuple(
            Phase(start=start, servers=(_slow_link(server, base),))
            for start, server in ((0.0, 0), (1 / 3, 2), (2 / 3, 3))
        ),
        model=BALANCED_MODEL[0],
        model_options=BALANCED_MODEL[1],
    )


def mixed() -> Scenario:
    """One big tensor, a slow link and an interfered server; halfway the slow link moves."""
    base = ServerSpec()
    interfered = ServerOverride(server=2, slowdown=INTERFERENCE_SLOWDOWN / 2)
    return Scenario(
        name="mixed",
        description="one big tensor, server 1 at a quarter of the bandwidth and server 2 "
        "interfered; halfway the slow link moves to server 3",
        phases=(
            Phase(start=0.0, servers=(_slow_link(1, base), interfered)),
            Phase(start=0.5, servers=(_slow_link(3, base), interfered)),
        ),
        model=IMBALANCED_MODEL[0],
        model_options=IMBALANCED_MODEL[1],
    )


SCENARIOS: dict[str, Callable[[], Scenario]] = {
    "none": none,
    "bandwidth": bandwidth,
    "interference": interference,
    "imbalance": imbalance,
    "dynamic": dynamic,
    "mixed": mixed,
}


def scenario_named(text: str, *, owner: str = "ps", field: str = "scenario") -> Scenario:
    """A preset of :data:`SCENARIOS` by name, or a TOML/JSON scenario file by path (read
    here); anything else raises a :class:`~unstall.errors.ConfigError` naming ``owner``'s
    ``field``."""
    preset = SCENARIOS.get(text)
    if preset is not None:
        return preset()
    if Path(text).suffix.lower() in (".toml", ".json"):
        return load_scenario(text)
    known = ", ".join(SCENARIOS)
    raise ConfigError(
        owner, field, f"{text!r} is neither a preset ({known}) nor a .toml/.json file"
    )


# --- files ---------------------------------------------------------------------------------------


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True, kw_only=True)
class SpecTable:
    """A server's spec as a scenario file writes it: the link in MB/s and milliseconds."""

    bandwidth_mb_s: float = DEFAULT_LINK_MB_S
    latency_ms: float = DEFAULT_LATENCY_MS
    apply_mb_s: float = 400.0
    slowdown: float = 1.0

    def __post_init__(self) -> None:
        for name in ("bandwidth_mb_s", "latency_ms", "apply_mb_s", "slowdown"):
            value = getattr(self, name)
            check(_is_number(value), self, name, f"must be a number, got {value!r}")
        check_positive(self, bandwidth_mb_s=self.bandwidth_mb_s, apply_mb_s=self.apply_mb_s)
        check(self.latency_ms >= 0, self, "latency_ms", f"must be >= 0, got {self.latency_ms}")
        check(self.slowdown >= 1, self, "slowdown", f"must be >= 1, got {self.slowdown}")
        check(math.isfinite(self.latency_ms), self, "latency_ms", "must be finite")
        check(math.isfinite(self.slowdown), self, "slowdown", "must be finite")

    def spec(self) -> ServerSpec:
        link = Link.from_mb_s(self.bandwidth_mb_s, latency_ms=self.latency_ms)
        return ServerSpec(link=link, apply_mb_s=self.apply_mb_s, slowdown=self.slowdown)


@dataclass(frozen=True, kw_only=True)
class OverrideTable:
    """A server's override as a scenario file writes it (None: the base's value)."""

    server: int
    bandwidth_mb_s: float | None = None
    latency_ms: float | None = None
    apply_mb_s: float | None = None
    slowdown: float | None = None

    def __post_init__(self) -> None:
        ok = isinstance(self.server, int) and not isinstance(self.server, bool)
        check(ok and self.server >= 0, self, "server", f"must be an index >= 0, got {self.server}")
        self.over(SpecTable())  # validates the values, naming the field

    def over(self, base: SpecTable) -> ServerOverride:
        """The override of a scenario whose base is ``base``: a link given in part (only the
        bandwidth, or only the latency) takes the rest from the base."""
        values = {
            k: getattr(self, k)
            for k in ("bandwidth_mb_s", "latency_ms", "apply_mb_s", "slowdown")
            if getattr(self, k) is not None
        }
        merged = dataclasses.replace(base, **values)
        has_link = self.bandwidth_mb_s is not None or self.latency_ms is not None
        return ServerOverride(
            server=self.server,
            link=merged.spec().link if has_link else None,
            apply_mb_s=self.apply_mb_s,
            slowdown=self.slowdown,
        )


def _build(cls: type[Any], data: object, source: str, where: str) -> Any:
    """``cls`` from ``data``, with errors naming ``source`` and the field path ``where``."""
    if not isinstance(data, Mapping):
        raise ConfigFileError(source, f"must be a table, got {data!r}", field=where)
    try:
        return from_mapping(cls, data, source=source)
    except ConfigError as exc:
        raise ConfigFileError(source, exc.why, field=f"{where}.{exc.field}".lstrip(".")) from exc
    except DataFileError as exc:
        field_name = f"{where}.{exc.field}".lstrip(".") if exc.field else where or None
        raise ConfigFileError(source, exc.why, field=field_name) from exc


def _list(data: Mapping[str, Any], key: str, source: str, where: str) -> Sequence[Any]:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise ConfigFileError(source, f"must be a list, got {value!r}", field=f"{where}{key}")
    return value


def scenario_from_mapping(data: Mapping[str, Any], source: str) -> Scenario:
    """A scenario from the structure of a TOML/JSON file (see the module docstring)."""
    if not data:
        # An empty file would otherwise run the defaults without a word.
        raise ConfigFileError(
            source, "empty: a scenario sets at least `servers`, `base` or `phases`"
        )
    fields = dict(data)
    base = _build(SpecTable, data.get("base", {}), source, "base")
    fields["base"] = base.spec()
    phases = []
    for i, raw in enumerate(_list(data, "phases", source, "")):
        where = f"phases[{i}]"
        if not isinstance(raw, Mapping):
            raise ConfigFileError(source, f"must be a table, got {raw!r}", field=where)
        overrides = tuple(
            _build(OverrideTable, o, source, f"{where}.servers[{j}]").over(base)
            for j, o in enumerate(_list(raw, "servers", source, f"{where}."))
        )
        phases.append(_build(Phase, {**raw, "servers": overrides}, source, where))
    fields["phases"] = tuple(phases)
    fields.setdefault("name", Path(source).stem)
    return _build(Scenario, fields, source, "")


def load_scenario(path: str | Path) -> Scenario:
    """Read a scenario file (TOML or JSON; see the module docstring). Errors name the file and
    the field."""
    return scenario_from_mapping(load_table_file(path), str(path))


def _spec_table(spec: ServerSpec) -> dict[str, float]:
    return {
        "bandwidth_mb_s": spec.link.mb_s,
        "latency_ms": spec.link.latency_ms,
        "apply_mb_s": spec.apply_mb_s,
        "slowdown": spec.slowdown,
    }


def _override_table(o: ServerOverride) -> dict[str, float]:
    table: dict[str, float] = {"server": o.server}
    if o.link is not None:
        table.update(bandwidth_mb_s=o.link.mb_s, latency_ms=o.link.latency_ms)
    if o.apply_mb_s is not None:
        table["apply_mb_s"] = o.apply_mb_s
    if o.slowdown is not None:
        table["slowdown"] = o.slowdown
    return table


def scenario_table(scenario: Scenario) -> dict[str, Any]:
    """``scenario`` as the structure of a scenario file (:func:`scenario_from_mapping` reads
    it back), for a run's saved config and for a derived scenario to be run by path."""
    table: dict[str, Any] = {
        "name": scenario.name,
        "description": scenario.description,
        "servers": scenario.servers,
        "spares": scenario.spares,
        "base": _spec_table(scenario.base),
        "phases": [
            {"start": phase.start, "servers": [_override_table(o) for o in phase.servers]}
            for phase in scenario.phases
        ],
    }
    if scenario.model is not None:
        table["model"] = scenario.model
        table["model_options"] = dict(scenario.model_options)
    return table
