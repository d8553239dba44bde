"""Topology files: a TOML or JSON table (or a dict) into a :class:`TopologyConfig`.

The schema, every field with its unit and default, is docs/topology.md. Errors name the file and
the field (``nodes[1].device``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from os import PathLike
from pathlib import Path
from typing import Any

from unstall.config import load_table_file
from unstall.errors import ArgumentTypeError, ConfigError, ConfigFileError, did_you_mean
from unstall.net.hardware import INTERCONNECT_PRESETS, NIC_PRESETS, LinkPreset
from unstall.net.link import Link
from unstall.net.topology import (
    CALIBRATED_NETWORK_EFFICIENCY,
    TOPOLOGY_PRESETS,
    NodeGroup,
    TopologyConfig,
)

_LINK_FIELDS = ("intra_link", "nic", "uplink")
TOPOLOGY_SUFFIXES = (".toml", ".json")  # the file formats of a topology
# The fields a regular cluster (racks x nodes x GPUs, no node groups) cannot do without.
_REGULAR_REQUIRED = ("nodes_per_rack", "gpus_per_node")
# The fields of a node group without a default.
_GROUP_REQUIRED = tuple(
    f.name
    for f in dataclasses.fields(NodeGroup)
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
)


def _link_from(value: Any, field_name: str, source: str, presets: Mapping[str, LinkPreset]) -> Link:
    """A Link from a preset name or a ``{bandwidth_gbps, latency_us}`` table."""
    if isinstance(value, str):
        if value.lower() not in presets:
            raise ConfigFileError(
                source, f"unknown preset {value!r}; known: {sorted(presets)}", field=field_name
            )
        return presets[value.lower()].link()
    if not isinstance(value, Mapping):
        raise ConfigFileError(
            source,
            "must be a preset name or a table {bandwidth_gbps, latency_us}",
            field=field_name,
        )
    known = {"bandwidth_gbps", "latency_us"}
    unknown = sorted(set(value) - known)
    if unknown:
        raise ConfigFileError(
            source,
            f"unknown key(s) {unknown}; known: {sorted(known)}",
            field=f"{field_name}.{unknown[0]}",
        )
    if "bandwidth_gbps" not in value:
        raise ConfigFileError(source, "missing", field=f"{field_name}.bandwidth_gbps")
    for key, number in value.items():
        # TOML's inf and nan, JSON's Infinity and NaN: no link of a real cluster has them.
        if isinstance(number, float) and not math.isfinite(number):
            raise ConfigFileError(
                source, f"must be a finite number, got {number!r}", field=f"{field_name}.{key}"
            )
    try:
        return Link(
            bandwidth_gbps=float(value["bandwidth_gbps"]),
            latency_us=float(value.get("latency_us", 0.0)),
        )
    except (TypeError, ValueError, OverflowError) as exc:
        raise ConfigFileError(source, str(exc), field=field_name) from exc


def _node_groups(value: Any, source: str) -> tuple[NodeGroup, ...]:
    """``[[nodes]]`` tables as node groups; errors name ``nodes[i].field``."""
    if not isinstance(value, list | tuple) or not value:
        raise ConfigFileError(
            source, "must be a non-empty list of node-group tables", field="nodes"
        )
    known = {f.name for f in dataclasses.fields(NodeGroup)}
    groups = []
    for i, table in enumerate(value):
        where = f"nodes[{i}]"
        if not isinstance(table, Mapping):
            raise ConfigFileError(
                source, "must be a table {count, gpus_per_node, ...}", field=where
            )
        unknown = sorted(set(table) - known)
        if unknown:
            raise ConfigFileError(
                source, f"unknown key(s) {unknown}; known: {sorted(known)}", field=where
            )
        missing = [name for name in _GROUP_REQUIRED if name not in table]
        if missing:  # else NodeGroup's own "__init__() missing 1 required keyword-only argument"
            also = f"; missing as well: {', '.join(missing[1:])}" if missing[1:] else ""
            raise ConfigFileError(
                source, f"missing: every node group gives it{also}", field=f"{where}.{missing[0]}"
            )
        try:
            groups.append(NodeGroup(**table))
        except ConfigError as exc:
            raise ConfigFileError(source, exc.why, field=f"{where}.{exc.field}") from exc
        except TypeError as exc:  # count or gpus_per_node missing
            raise ConfigFileError(source, str(exc), field=where) from exc
    return tuple(groups)


def topology_from_mapping(data: Mapping[str, Any], *, source: str = "<mapping>") -> TopologyConfig:
    """Build a topology from a mapping: an optional ``preset`` to start from, then overrides.

    Link fields (``intra_link``, ``nic``, ``uplink``) take a preset name ("25g", "efa", "nvlink3")
    or a table ``{bandwidth_gbps = ..., latency_us = ...}``; ``nodes`` a list of node-group
    tables (:class:`NodeGroup` fields). docs/topology.md lists every field.
    """
    data = dict(data)
    base: dict[str, Any] = {}
    from_preset = "preset" in data
    if from_preset:
        preset = data.pop("preset")
        if not isinstance(preset, str) or preset not in TOPOLOGY_PRESETS:
            raise ConfigFileError(
                source,
                f"unknown preset {preset!r}{did_you_mean(preset, TOPOLOGY_PRESETS)}; known: "
                f"{sorted(TOPOLOGY_PRESETS)}",
                field="preset",
            )
        base = {
            f.name: getattr(TOPOLOGY_PRESETS[preset](), f.name)
            for f in dataclasses.fields(TopologyConfig)
        }
    known = {f.name for f in dataclasses.fields(TopologyConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigFileError(
            source,
            f"unknown field(s) {unknown}; known: {sorted(known | {'preset'})}",
            field=unknown[0],
        )
    if "nodes" in data:
        data["nodes"] = _node_groups(data["nodes"], source)
        # Node groups replace a preset's regular shape.
        base.update(racks=1, nodes_per_rack=0, gpus_per_node=0)
    for name in _LINK_FIELDS:
        if name in data and data[name] is not None:
            presets = NIC_PRESETS if name != "intra_link" else INTERCONNECT_PRESETS
            data[name] = _link_from(data[name], name, source, presets)
    if not from_preset and "network_efficiency" not in data:
        # A file describes a real cluster: its network achieves what the presets' calibrated
        # share says, not line rate (a hand copy of a preset must give the preset's results).
        base["network_efficiency"] = CALIBRATED_NETWORK_EFFICIENCY
    if "uplink" in data and "oversubscription" not in data:
        base["oversubscription"] = 1.0
    if "oversubscription" in data and "uplink" not in data:
        base["uplink"] = None
    # TopologyConfig's defaults for these (0) stand for "not given": its error would read
    # "got 0" for a field the file never wrote.
    absent = [name for name in _REGULAR_REQUIRED if name not in data and name not in base]
    merged = {**base, **data}
    try:
        return TopologyConfig(**merged)
    except ConfigError as exc:
        if exc.field in absent:
            raise ConfigFileError(
                source, _required_why(exc.field, absent), field=exc.field
            ) from exc
        raise ConfigFileError(source, exc.why, field=exc.field) from exc
    except TypeError as exc:  # a missing required field, or a value of the wrong type
        raise ConfigFileError(source, str(exc)) from exc


def _required_why(field: str, absent: list[str]) -> str:
    """Why a regular cluster's missing ``field`` is an error, with the others missing too."""
    why = "required in the regular form (or give `nodes`, a list of node groups)"
    others = [name for name in absent if name != field]
    return why + (f"; missing as well: {', '.join(others)}" if others else "")


def load_topology(path: str | PathLike[str]) -> TopologyConfig:
    """A cluster by preset name (``small``, ``medium``, ``philly``, ...: :data:`TOPOLOGY_PRESETS`)
    or from a TOML or JSON file; errors name the file and field. Without a ``name`` a file's
    cluster is named after the file (``racks/big.toml`` -> ``big``). A preset's name wins over a
    file of the same name in the working folder (write ``./small`` for the file)."""
    if not isinstance(path, str | PathLike):
        hint = "topology_from_mapping(mapping) builds one" if isinstance(path, Mapping) else ""
        raise ArgumentTypeError(
            "load_topology",
            "path",
            f"must be a preset name or a file path, got {type(path).__name__}"
            + (f": {hint}" if hint else ""),
        )
    if isinstance(path, str) and path in TOPOLOGY_PRESETS:
        return TOPOLOGY_PRESETS[path]()
    if Path(path).suffix.lower() not in TOPOLOGY_SUFFIXES:
        raise ConfigError(
            "load_topology",
            "path",
            f"{str(path)!r}{did_you_mean(str(path), TOPOLOGY_PRESETS)} is neither a preset "
            f"{sorted(TOPOLOGY_PRESETS)} nor a .toml/.json file",
        )
    data = load_table_file(path if isinstance(path, str) else Path(path))
    data.setdefault("name", Path(path).stem)
    return topology_from_mapping(data, source=str(path))


def resolve_cluster(
    cluster: TopologyConfig | str | PathLike[str],
    *,
    owner: str = "resolve_cluster",
    field: str = "cluster",
) -> TopologyConfig:
    """``cluster`` itself when it is a :class:`TopologyConfig`, else the preset or file it
    names (:func:`load_topology`). Another type raises
    :class:`~unstall.errors.ArgumentTypeError` (a TypeError) naming ``owner.field``."""
    if isinstance(cluster, TopologyConfig):
        return cluster
    if isinstance(cluster, str | PathLike):
        named = isinstance(cluster, str) and cluster in TOPOLOGY_PRESETS
        if not named and Path(cluster).suffix.lower() not in TOPOLOGY_SUFFIXES:
            raise ConfigError(
                owner,
                field,
                f"{str(cluster)!r}{did_you_mean(str(cluster), TOPOLOGY_PRESETS)} is neither a "
                f"preset {sorted(TOPOLOGY_PRESETS)} nor a "
                ".toml/.json file",
            )
        return load_topology(cluster)
    hint = "; topology_from_mapping(mapping) builds one" if isinstance(cluster, Mapping) else ""
    raise ArgumentTypeError(
        owner,
        field,
        "takes a cluster topology (a TopologyConfig), a preset name "
        f"{sorted(TOPOLOGY_PRESETS)} or a .toml/.json file; got {type(cluster).__name__}{hint}",
    )
