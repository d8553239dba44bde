"""Straggler scenarios as data: how many servers, each one's link and compute, and how they change.

A scenario has a ``base`` :class:`~unstall.ps.links.ServerSpec` every server starts from and
``phases``: from a fraction ``start`` of the run on, the listed servers take the listed values
over the base (a phase replaces the one before it; servers it does not list are back at the base).
It may name the model it is meant for (``imbalance`` needs one very large tensor). A scenario is
the truth about the hardware: server ``i`` (ids are never reused) has the spec the scenario gives
index ``i`` at every iteration, including ``spares`` that a controller may add later. Presets are
functions in :data:`SCENARIOS`; :func:`load_scenario` reads the same structure from TOML or JSON:

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from unstall.config import check, from_mapping, load_table_file
from unstall.errors import ConfigError, DataFileError
from unstall.ps.links import ServerSpec

SPEC_FIELDS = tuple(f.name for f in dataclasses.fields(ServerSpec))
SLOW_LINK_FACTOR = 4  # `bandwidth`: one server at a quarter of the bandwidth
INTERFERENCE_SLOWDOWN = 10.0


@dataclass(frozen=True, kw_only=True)
class ServerOverride:
    """Values that replace the base for server ``server`` (None: keep the base value)."""

    server: int
    bandwidth_mb_s: float | None = None
    latency_ms: float | None = None
    apply_mb_s: float | None = None
    slowdown: float | None = None

    def __post_init__(self) -> None:
        ok = isinstance(self.server, int) and not isinstance(self.server, bool)
        check(ok and self.server >= 0, self, "server", f"must be an index >= 0, got {self.server}")
        try:  # validate the values now, so that a file's error names this entry's field
            self.over(ServerSpec())
        except ConfigError as exc:
            raise ConfigError(type(self).__name__, exc.field, exc.why) from exc

    def over(self, base: ServerSpec) -> ServerSpec:
        values = {k: getattr(self, k) for k in SPEC_FIELDS if getattr(self, k) is not None}
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
    """A straggler scenario (see the module docstring)."""

    name: str
    description: str = ""
    servers: int = 4
    spares: int = 0  # servers a controller may add: ids servers .. servers + spares - 1
    base: ServerSpec = field(default_factory=ServerSpec)
    phases: tuple[Phase, ...] = ()
    model: str | None = None
    model_options: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "model_options", MappingProxyType(dict(self.model_options)))
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


# --- presets -------------------------------------------------------------------------------------

# The small models the presets train: a 4-layer MLP (3.7 MB of float32 parameters, no tensor
# above 1.6 MB), and for `imbalance` a 3-layer MLP whose first layer (4096 x 256: 1.05 M
# elements, 4.2 MB) holds 94% of its 4.5 MB, like VGG-16's first fully-connected layer (74%).
BALANCED_MODEL = ("mlp", {"in_features": 784, "width": 512, "depth": 4, "num_classes": 10})
IMBALANCED_MODEL = ("mlp", {"in_features": 4096, "width": 256, "depth": 3, "num_classes": 10})


def _slow_link(server: int, base: ServerSpec) -> ServerOverride:
    return ServerOverride(server=server, bandwidth_mb_s=base.bandwidth_mb_s / SLOW_LINK_FACTOR)


def none() -> Scenario:
    return Scenario(
        name="none",
        description="four equal servers, no straggler",
        model=BALANCED_MODEL[0],
        model_options=BALANCED_MODEL[1],
    )


def bandwidth() -> Scenario:
    base = ServerSpec()
    return Scenario(
        name="bandwidth",
        description="bandwidth contention: server 1 of 4 at a quarter of the bandwidth",
        phases=(Phase(servers=(_slow_link(1, base),)),),
        model=BALANCED_MODEL[0],
        model_options=BALANCED_MODEL[1],
    )


def interference() -> Scenario:
    return Scenario(
        name="interference",
        description=f"interference: server 2 computes {INTERFERENCE_SLOWDOWN:g}x slower",
        phases=(Phase(servers=(ServerOverride(server=2, slowdown=INTERFERENCE_SLOWDOWN),)),),
        model=BALANCED_MODEL[0],
        model_options=BALANCED_MODEL[1],
    )


def imbalance() -> Scenario:
    return Scenario(
        name="imbalance",
        description="imbalanced parameters: one tensor holds 94% of the model (like VGG-16's fc6)",
        model=IMBALANCED_MODEL[0],
        model_options=IMBALANCED_MODEL[1],
    )


def dynamic() -> Scenario:
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


# --- files ---------------------------------------------------------------------------------------


def _build(cls: type[Any], data: object, source: str, where: str) -> Any:
    """``cls`` from ``data``, with errors naming ``source`` and the field path ``where``."""
    if not isinstance(data, Mapping):
        raise DataFileError(source, f"must be a table, got {data!r}", field=where)
    try:
        return from_mapping(cls, data, source=source)
    except ConfigError as exc:
        raise DataFileError(source, exc.why, field=f"{where}.{exc.field}".lstrip(".")) from exc
    except DataFileError as exc:
        field_name = f"{where}.{exc.field}".lstrip(".") if exc.field else where or None
        raise DataFileError(source, exc.why, field=field_name) from exc


def _list(data: Mapping[str, Any], key: str, source: str, where: str) -> Sequence[Any]:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise DataFileError(source, f"must be a list, got {value!r}", field=f"{where}{key}")
    return value


def scenario_from_mapping(data: Mapping[str, Any], source: str) -> Scenario:
    """A scenario from the structure of a TOML/JSON file (see the module docstring)."""
    fields = dict(data)
    fields["base"] = _build(ServerSpec, data.get("base", {}), source, "base")
    phases = []
    for i, raw in enumerate(_list(data, "phases", source, "")):
        where = f"phases[{i}]"
        if not isinstance(raw, Mapping):
            raise DataFileError(source, f"must be a table, got {raw!r}", field=where)
        overrides = tuple(
            _build(ServerOverride, o, source, f"{where}.servers[{j}]")
            for j, o in enumerate(_list(raw, "servers", source, f"{where}."))
        )
        phases.append(_build(Phase, {**raw, "servers": overrides}, source, where))
    fields["phases"] = tuple(phases)
    fields.setdefault("name", Path(source).stem)
    return _build(Scenario, fields, source, "")


def load_scenario(path: str | Path) -> Scenario:
    return scenario_from_mapping(load_table_file(path), str(path))


def resolve_scenario(name_or_path: str) -> Scenario:
    """A preset by name, or a TOML/JSON file by path."""
    preset = SCENARIOS.get(name_or_path)
    if preset is not None:
        return preset()
    if Path(name_or_path).suffix.lower() in (".toml", ".json"):
        return load_scenario(name_or_path)
    known = ", ".join(SCENARIOS)
    raise ConfigError(
        "scenario", "name", f"{name_or_path!r} is neither a preset ({known}) nor a .toml/.json file"
    )
