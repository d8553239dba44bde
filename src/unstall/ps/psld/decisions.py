"""What the controller sees of the cluster, and the decisions it hands back (each says why)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class ClusterView:
    """What the controller may change: chunk sizes, owners, live servers, spares left."""

    chunk_bytes: Mapping[int, int]  # chunk id -> bytes
    owner: Mapping[int, int]  # chunk id -> server id
    servers: tuple[int, ...]
    next_server: int  # the id a scale-out would get
    spares_left: int

    def loads(self) -> dict[int, int]:
        out = dict.fromkeys(self.servers, 0)
        for cid, sid in self.owner.items():
            out[sid] += self.chunk_bytes[cid]
        return out


@dataclass(frozen=True, kw_only=True)
class NoChange:
    reason: str


@dataclass(frozen=True, kw_only=True)
class Reassign:
    owner: Mapping[int, int]
    reason: str
    moved_bytes: int = 0
    predicted_before_s: float = 0.0
    predicted_after_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class ScaleOut:
    """Start server ``server`` and route ``owner`` (which gives it an exploration share)."""

    server: int
    owner: Mapping[int, int]
    reason: str


@dataclass(frozen=True, kw_only=True)
class ScaleIn:
    """Route ``owner`` (nothing on ``server``), then stop ``server``."""

    server: int
    owner: Mapping[int, int]
    reason: str


Decision = NoChange | Reassign | ScaleOut | ScaleIn
