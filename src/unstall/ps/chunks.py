"""What a model's parameters are cut into, and who owns each piece.

A *tensor* is one trainable parameter of the model, numbered in creation (registration) order: its
``key``. A *chunk* is a contiguous slice ``[start, stop)`` of one tensor's flattened elements; a
whole tensor is the chunk ``[0, numel)``. An :class:`Assignment` is the routing table of one
iteration: the chunks and the server that owns each. Strategies return one; a controller may
return another with the same chunks and different owners at an iteration boundary.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
from torch import nn

from unstall.config import check

FLOAT32_BYTES = 4


@dataclass(frozen=True, kw_only=True)
class TensorInfo:
    """One parameter tensor: creation-order ``key``, qualified name, elements, bytes per element."""

    key: int
    name: str
    numel: int
    itemsize: int = FLOAT32_BYTES

    def __post_init__(self) -> None:
        check(self.key >= 0, self, "key", f"must be >= 0, got {self.key}")
        check(self.numel >= 1, self, "numel", f"must be >= 1, got {self.numel}")

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize


@dataclass(frozen=True, kw_only=True)
class Chunk:
    """Elements ``[start, stop)`` of tensor ``tensor`` (its key); ``id`` is its index in the
    assignment's chunk list."""

    id: int
    tensor: int
    start: int
    stop: int
    itemsize: int = FLOAT32_BYTES

    def __post_init__(self) -> None:
        check(0 <= self.start < self.stop, self, "stop", f"need 0 <= start < stop, got {self}")

    @property
    def numel(self) -> int:
        return self.stop - self.start

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize


@dataclass(frozen=True, kw_only=True)
class Assignment:
    """Chunks (covering every tensor exactly once) and the server index that owns each chunk."""

    chunks: tuple[Chunk, ...]
    owner: Mapping[int, int]  # chunk id -> server
    servers: int
    strategy: str = ""
    notes: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "owner", MappingProxyType(dict(self.owner)))
        ids = [c.id for c in self.chunks]
        check(ids == list(range(len(ids))), self, "chunks", "ids must be 0..n-1 in order")
        check(set(self.owner) == set(ids), self, "owner", "must map every chunk id exactly once")
        bad = [s for s in self.owner.values() if not 0 <= s < self.servers]
        check(not bad, self, "owner", f"server indices must be in [0, {self.servers}), got {bad}")

    def server_bytes(self) -> list[int]:
        """Parameter bytes each server owns."""
        load = [0] * self.servers
        for c in self.chunks:
            load[self.owner[c.id]] += c.nbytes
        return load

    def chunks_of(self, server: int) -> list[Chunk]:
        return [c for c in self.chunks if self.owner[c.id] == server]

    def with_owner(self, owner: Mapping[int, int], servers: int | None = None) -> Assignment:
        """The same chunks, owned as ``owner`` says (what a controller hands back)."""
        return Assignment(
            chunks=self.chunks,
            owner=owner,
            servers=self.servers if servers is None else servers,
            strategy=self.strategy,
        )


def tensor_infos(model: nn.Module) -> list[TensorInfo]:
    """The trainable parameters of ``model`` in creation order (shared tensors once)."""
    return [
        TensorInfo(key=i, name=name, numel=p.numel(), itemsize=p.element_size())
        for i, (name, p) in enumerate(
            (n, p) for n, p in model.named_parameters() if p.requires_grad
        )
    ]


def check_cover(tensors: Sequence[TensorInfo], chunks: Iterable[Chunk]) -> None:
    """Raise unless ``chunks`` tile every tensor exactly, without gaps or overlaps."""
    by_tensor: dict[int, list[Chunk]] = {}
    for c in chunks:
        by_tensor.setdefault(c.tensor, []).append(c)
    for t in tensors:
        pieces = sorted(by_tensor.pop(t.key, []), key=lambda c: c.start)
        pos = 0
        for c in pieces:
            check(c.start == pos, "Assignment", "chunks", f"tensor {t.key}: gap/overlap at {pos}")
            pos = c.stop
        check(pos == t.numel, "Assignment", "chunks", f"tensor {t.key}: covered to {pos}")
    check(not by_tensor, "Assignment", "chunks", f"chunks of unknown tensors {sorted(by_tensor)}")


def even_bounds(numel: int, parts: int) -> list[tuple[int, int]]:
    """``[start, stop)`` of ``parts`` nearly equal contiguous slices of ``numel`` elements (the
    first ``numel % parts`` slices one element longer); empty slices are left out."""
    base, extra = divmod(numel, parts)
    bounds, pos = [], 0
    for i in range(parts):
        size = base + (1 if i < extra else 0)
        if size:
            bounds.append((pos, pos + size))
        pos += size
    return bounds


class ChunkList:
    """Builds a chunk list with consecutive ids, and the owner map beside it."""

    def __init__(self) -> None:
        self.chunks: list[Chunk] = []
        self.owner: dict[int, int] = {}

    def add(self, tensor: TensorInfo, start: int, stop: int, server: int) -> None:
        cid = len(self.chunks)
        self.chunks.append(
            Chunk(id=cid, tensor=tensor.key, start=start, stop=stop, itemsize=tensor.itemsize)
        )
        self.owner[cid] = server

    def assignment(self, servers: int, strategy: str, **notes: object) -> Assignment:
        return Assignment(
            chunks=tuple(self.chunks),
            owner=self.owner,
            servers=servers,
            strategy=strategy,
            notes=notes,
        )


# A piece of one server's push-pull: elements ``[start, stop)`` of chunk ``chunk id``, relative
# to the chunk's own first element.
Segment = tuple[int, int, int]


def plan_pieces(chunks: Sequence[Chunk], piece_bytes: int) -> tuple[tuple[Segment, ...], ...]:
    """Cut one server's chunks (in order) into the pieces of its push-pull, each at most about
    ``piece_bytes``: consecutive whole chunks packed together, a chunk larger than
    ``piece_bytes`` cut into near-equal segments of its own; the pieces, one after the other,
    are the chunks' elements in order. Everything fits in one piece when the server owns at most
    ``piece_bytes``: one call moves it all. With several pieces, the
    server steps a piece as soon as every worker's push of it is in and sends it back while
    the next pieces still travel (the step overlaps the transfers)."""
    check(piece_bytes > 0, "plan_pieces", "piece_bytes", f"must be > 0, got {piece_bytes}")
    if sum(c.nbytes for c in chunks) <= piece_bytes:
        return (tuple((c.id, 0, c.numel) for c in chunks),) if chunks else ()
    pieces: list[tuple[Segment, ...]] = []
    packed: list[Segment] = []
    packed_bytes = 0
    for c in chunks:
        # Each piece is a run of consecutive elements of the server's chunks in order (the
        # server replies with one view of its flat array): a large chunk closes the packed one.
        if packed and (c.nbytes > piece_bytes or packed_bytes + c.nbytes > piece_bytes):
            pieces.append(tuple(packed))
            packed, packed_bytes = [], 0
        if c.nbytes > piece_bytes:
            parts = -(-c.nbytes // piece_bytes)
            pieces += [((c.id, lo, hi),) for lo, hi in even_bounds(c.numel, parts)]
            continue
        packed.append((c.id, 0, c.numel))
        packed_bytes += c.nbytes
    if packed:
        pieces.append(tuple(packed))
    return tuple(pieces)


# The largest buffer Ray's serializer copies with one plain ``memcpy``: a larger one it copies
# with six threads started for that buffer alone (``parallel_memcopy``). On a small machine,
# starting and joining them costs more than they save for a buffer of a few MB (2 cores: raw Ray
# moves 4 MB 43% faster in 1 MiB parts than in one buffer, benchmarks/ps_overhead.py "raw
# parts"), and less than they save for a large one (at 64 MB raw Ray is faster with one buffer
# than in 1 MiB parts, the same benchmark's columns).
WIRE_PART_BYTES = 1 << 20
WIRE_WHOLE_BYTES = 16 << 20  # a larger array travels whole, copied by Ray's threads


def wire_parts(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``arrays`` (flat) as they travel, in order, one buffer of Ray's message each: an array
    of up to :data:`WIRE_WHOLE_BYTES` cut into views of at most :data:`WIRE_PART_BYTES` (no
    copy), a larger one whole."""
    parts: list[np.ndarray] = []
    for array in arrays:
        if array.nbytes > WIRE_WHOLE_BYTES or array.size == 0:
            parts.append(array)
            continue
        step = max(1, WIRE_PART_BYTES // array.itemsize)
        parts += [array[lo : lo + step] for lo in range(0, array.size, step)]
    return parts
