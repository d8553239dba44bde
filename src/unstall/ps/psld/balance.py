"""Target loads and the moves that reach them: the min-max split of the bytes over servers of
known speeds, and the fewest chunk moves that approach it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def rebalance(
    chunk_bytes: Mapping[int, int], owner: Mapping[int, int], target: Mapping[int, float]
) -> dict[int, int]:
    """An owner map whose loads approach ``target`` (bytes per server) moving few chunks.

    A server whose target is 0 gives away everything; then, one chunk at a time, the most
    overloaded server gives the most underloaded one the chunk that brings the pair closest to
    their targets, for as long as a move brings them closer."""
    new = dict(owner)
    loads = dict.fromkeys(target, 0.0)
    held: dict[int, set[int]] = {s: set() for s in target}  # server -> its chunks
    for cid, sid in owner.items():
        loads[sid] = loads.get(sid, 0.0) + chunk_bytes[cid]
        held.setdefault(sid, set()).add(cid)
    receivers = [s for s in target if target[s] > 0]

    def move(cid: int, dst: int) -> None:
        loads[new[cid]] -= chunk_bytes[cid]
        held[new[cid]].discard(cid)
        loads[dst] += chunk_bytes[cid]
        held[dst].add(cid)
        new[cid] = dst

    for cid in sorted(new, key=lambda c: -chunk_bytes[c]):
        if target.get(new[cid], 0.0) <= 0:
            move(cid, max(receivers, key=lambda s: (target[s] - loads[s], -s)))
    for _ in range(2 * len(new)):
        src = max(loads, key=lambda s: (loads[s] - target.get(s, 0.0), -s))
        dst = max(receivers, key=lambda s: (target[s] - loads[s], -s))
        excess, deficit = loads[src] - target.get(src, 0.0), target[dst] - loads[dst]
        mine = held.get(src, set())
        if excess <= 0 or deficit <= 0 or not mine:
            break
        best = min(
            mine, key=lambda c: (abs(excess - chunk_bytes[c]) + abs(deficit - chunk_bytes[c]), c)
        )
        if chunk_bytes[best] >= excess + deficit:
            break  # no chunk brings the pair closer to their targets
        move(best, dst)
    return new


def moved_bytes(chunk_bytes: Mapping[int, int], a: Mapping[int, int], b: Mapping[int, int]) -> int:
    return sum(chunk_bytes[c] for c in a if a[c] != b[c])


def predicted_s(per_byte: Mapping[int, float], loads: Mapping[int, float]) -> float:
    """The slowest server's predicted seconds for ``loads``."""
    return max((per_byte[s] * b for s, b in loads.items() if b > 0), default=0.0)


def optimal_shares(per_byte: Mapping[int, float]) -> dict[int, float]:
    """The min-max split of the bytes over servers with these seconds per byte.

    With no fixed cost per server the slowest time is least when every server takes the same
    time, so each share is proportional to the server's speed (1 / seconds per byte): the
    oracle's linear programme has this closed form here, and the controller, which asks for it
    several times at every iteration boundary, skips the solver's millisecond."""
    speed = {s: 1.0 / max(p, 1e-30) for s, p in per_byte.items()}
    total = sum(speed.values())
    return {s: v / total for s, v in sorted(speed.items())}


def split_time(per_byte: Mapping[int, float], total: float) -> float:
    """The slowest server's time when ``total`` bytes are split min-max over these servers."""
    shares = optimal_shares(per_byte)
    return max(per_byte[s] * shares[s] * total for s in per_byte)


def loads_of(
    chunk_bytes: Mapping[int, int], owner: Mapping[int, int], servers: Sequence[int]
) -> dict[int, float]:
    """Bytes each of ``servers`` owns under ``owner``."""
    out = dict.fromkeys(servers, 0.0)
    for cid, sid in owner.items():
        out[sid] += chunk_bytes[cid]
    return out
