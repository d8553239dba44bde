"""The one small interface every placement implements.

A placement is a pure function: the model's tensors (creation order), the number of servers and,
optionally, what each server costs (phases of a run, each with a weight and one
:class:`~unstall.ps.links.ServerCost` per server) in; an :class:`~unstall.ps.chunks.Assignment`
(chunks and the server index of each) out. Only ``oracle`` reads the costs: ``psld`` starts
without knowing the servers and learns them while the run goes on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from unstall.config import check
from unstall.ps.chunks import Assignment, TensorInfo
from unstall.ps.links import ServerCost


@dataclass(frozen=True, kw_only=True)
class CostPhase:
    """A stretch of the run (``weight``: its share of the iterations) and each server's cost."""

    weight: float
    servers: tuple[ServerCost, ...]

    def __post_init__(self) -> None:
        check(self.weight > 0, self, "weight", f"must be > 0, got {self.weight}")
        check(bool(self.servers), self, "servers", "must list at least one server")


class Placement(Protocol):
    """``(tensors, servers, costs) -> Assignment`` (see the module docstring)."""

    def __call__(
        self, tensors: Sequence[TensorInfo], servers: int, costs: Sequence[CostPhase] = ()
    ) -> Assignment: ...


def check_inputs(name: str, tensors: Sequence[TensorInfo], servers: int) -> None:
    """Common checks: at least one tensor and one server, keys in creation order 0..n-1."""
    check(servers >= 1, name, "servers", f"must be >= 1, got {servers}")
    check(bool(tensors), name, "tensors", "must list at least one tensor")
    keys = [t.key for t in tensors]
    check(keys == list(range(len(keys))), name, "tensors", "keys must be 0..n-1 in order")
