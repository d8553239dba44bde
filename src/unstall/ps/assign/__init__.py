"""Assignment strategies, one a file, found through :data:`STRATEGIES` (name -> function).

Every strategy has the signature of :class:`~unstall.ps.assign.base.Strategy`:
``assign(tensors, servers, costs=()) -> Assignment``.
"""

from __future__ import annotations

from collections.abc import Sequence

from unstall.errors import ConfigError
from unstall.ps.assign import byteps, mxnet, oracle, psld, round_robin, tf_greedy
from unstall.ps.assign.base import CostPhase, Strategy
from unstall.ps.chunks import Assignment, TensorInfo, check_cover

STRATEGIES: dict[str, Strategy] = {
    mxnet.NAME: mxnet.assign,
    byteps.NAME: byteps.assign,
    tf_greedy.NAME: tf_greedy.assign,
    round_robin.NAME: round_robin.assign,
    oracle.NAME: oracle.assign,
    psld.NAME: psld.assign,
}

__all__ = ["STRATEGIES", "CostPhase", "Strategy", "assign", "strategy_names"]


def strategy_names() -> list[str]:
    return list(STRATEGIES)


def assign(
    name: str, tensors: Sequence[TensorInfo], servers: int, costs: Sequence[CostPhase] = ()
) -> Assignment:
    """Run strategy ``name`` and check that its chunks tile every tensor exactly once."""
    strategy = STRATEGIES.get(name)
    if strategy is None:
        known = ", ".join(STRATEGIES)
        raise ConfigError("strategy", "name", f"unknown strategy {name!r}; known: {known}")
    result = strategy(tensors, servers, costs)
    check_cover(tensors, result.chunks)
    return result
