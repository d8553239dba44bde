"""Where a job's GPUs are: how many on each node, which nodes, which racks.

The perf model's view of a placement (:class:`Placement`), read from and written as Pollux's
strings ("1123": one digit of GPUs per node), and the tightest placement a topology allows
(:func:`consolidated_placement`), against which every other placement's slowdown is measured.
"""

from __future__ import annotations

from dataclasses import dataclass

from unstall.config import check
from unstall.errors import ConfigError
from unstall.net.topology import TopologyConfig


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a job's GPUs are: how many on each node, the node ids and (optionally) their racks.

    ``nodes`` defaults to ``0..n-1``; ``racks`` empty means "ask the topology"
    (``topology.rack_of(node)``). Pollux-style strings ("1123": one digit per node) are read by
    :meth:`parse` and written by :meth:`render`.
    """

    gpus_per_node: tuple[int, ...]
    nodes: tuple[int, ...] = ()
    racks: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        check(len(self.gpus_per_node) >= 1, "Placement", "gpus_per_node", "must not be empty")
        for g in self.gpus_per_node:
            check(
                isinstance(g, int) and g >= 1,
                "Placement",
                "gpus_per_node",
                f"every count must be an integer >= 1, got {self.gpus_per_node!r}",
            )
        if not self.nodes:
            object.__setattr__(self, "nodes", tuple(range(len(self.gpus_per_node))))
        check(
            len(self.nodes) == len(self.gpus_per_node),
            "Placement",
            "nodes",
            f"needs one node id per count ({len(self.gpus_per_node)}), got {len(self.nodes)}",
        )
        check(len(set(self.nodes)) == len(self.nodes), "Placement", "nodes", "ids must be distinct")
        check(
            not self.racks or len(self.racks) == len(self.nodes),
            "Placement",
            "racks",
            f"needs one rack per node ({len(self.nodes)}) or none, got {len(self.racks)}",
        )

    @property
    def n_gpus(self) -> int:
        return sum(self.gpus_per_node)

    @property
    def n_nodes(self) -> int:
        return len(self.gpus_per_node)

    @classmethod
    def parse(cls, text: str | int) -> Placement:
        """``"1123"`` -> nodes of 1, 1, 2 and 3 GPUs; ``"8.8.16"`` for counts above 9."""
        s = str(text).strip()
        parts = s.split(".") if "." in s else list(s)
        if not s or not all(p.isdigit() and int(p) >= 1 for p in parts):
            raise ConfigError(
                "Placement", "text", f"{s!r} is not a placement string like '1123' or '8.8.16'"
            )
        return cls(tuple(int(p) for p in parts))

    def render(self) -> str:
        """The Pollux-style string: one digit per node, or counts joined by '.' above 9."""
        if all(g <= 9 for g in self.gpus_per_node):
            return "".join(str(g) for g in self.gpus_per_node)
        return ".".join(str(g) for g in self.gpus_per_node)

    def rack_list(self, topology: TopologyConfig) -> tuple[int, ...]:
        return self.racks or tuple(topology.rack_of(n) for n in self.nodes)


def consolidated_placement(n_gpus: int, topology: TopologyConfig) -> Placement:
    """The tightest placement of ``n_gpus``: full nodes first, nodes of one rack first."""
    check(
        isinstance(n_gpus, int) and 1 <= n_gpus <= topology.n_gpus,
        "consolidated_placement",
        "n_gpus",
        f"must be in 1..{topology.n_gpus} (the topology's GPUs), got {n_gpus!r}",
    )
    if topology.nodes:
        return _fewest_nodes(n_gpus, topology)
    per = topology.gpus_per_node
    full, rest = divmod(n_gpus, per)
    counts = (per,) * full + ((rest,) if rest else ())
    return Placement(counts, racks=tuple(topology.rack_of(i) for i in range(len(counts))))


def _fewest_nodes(n_gpus: int, topology: TopologyConfig) -> Placement:
    """Node groups: the largest nodes first (lowest index among equals), so the fewest nodes."""
    order = sorted(range(topology.n_nodes), key=lambda n: (-topology.node_gpus[n], n))
    nodes, counts = [], []
    for node in order:
        take = min(n_gpus, topology.node_gpus[node])
        nodes.append(node)
        counts.append(take)
        n_gpus -= take
        if n_gpus == 0:
            break
    pairs = sorted(zip(nodes, counts, strict=True))
    return Placement(
        tuple(c for _, c in pairs),
        nodes=tuple(n for n, _ in pairs),
        racks=tuple(topology.rack_of(n) for n, _ in pairs),
    )
