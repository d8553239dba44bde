"""Strategies: how a run places its parameters on the servers, and whether it moves them later.

A :class:`Strategy` is an object with a ``name``, an ``assign`` that makes the run's first
:class:`~unstall.ps.chunks.Assignment` (a pure placement, :mod:`unstall.ps.assign`), and a
``controller`` that the run calls at every iteration boundary, or None for a static strategy.
Every strategy is dispatched the same way, PSLD included: the run asks the strategy for both.
:data:`STRATEGIES` holds the built-in ones by name; a user's own strategy is any object with
the same three members.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from unstall.errors import ConfigError
from unstall.ps.assign import byteps, mxnet, oracle, psld, round_robin, tf_greedy
from unstall.ps.assign.base import CostPhase, Placement
from unstall.ps.chunks import Assignment, TensorInfo, check_cover
from unstall.ps.elastic import Controller, ElasticPSLD
from unstall.ps.psld.config import ControllerConfig
from unstall.ps.psld.controller import PSLDController
from unstall.ps.scenarios import Scenario


class Strategy(Protocol):
    """Places the chunks before a run (``assign``) and may move them during it
    (``controller``)."""

    @property
    def name(self) -> str: ...

    def assign(
        self, tensors: Sequence[TensorInfo], servers: int, costs: Sequence[CostPhase]
    ) -> Assignment:
        """The first assignment of the run's chunks to servers ``0 .. servers - 1``;
        ``costs``: what each server costs in each stretch of the run (the scenario's truth,
        which only an oracle should read)."""
        ...

    def controller(self, scenario: Scenario, iterations: int) -> Controller | None:
        """The controller of one run (None: the assignment stays as it is)."""
        ...


@dataclass(frozen=True)
class StaticStrategy:
    """A placement made once before the run and kept for all of it."""

    name: str
    place: Placement

    def assign(
        self, tensors: Sequence[TensorInfo], servers: int, costs: Sequence[CostPhase] = ()
    ) -> Assignment:
        """The placement's assignment, checked to tile every tensor exactly once."""
        result = self.place(tensors, servers, costs)
        check_cover(tensors, result.chunks)
        return result

    def controller(self, scenario: Scenario, iterations: int) -> Controller | None:
        """None: a static strategy never moves anything."""
        return None


@dataclass(frozen=True)
class PSLDStrategy:
    """PSLD: fine chunks spread evenly by bytes (:mod:`unstall.ps.assign.psld`), placed before
    the first iteration by the speeds a probe of every server predicts (``config.warm_start``),
    then moved, and servers added and removed, by :class:`~unstall.ps.elastic.ElasticPSLD` as
    the servers' measured speeds say. ``make_controller`` builds the decision-maker of each run
    from ``config`` (a scripted one in tests); ``chunk_bytes`` overrides the chunks' size."""

    config: ControllerConfig = field(default_factory=ControllerConfig)
    make_controller: Callable[[ControllerConfig], PSLDController] = PSLDController
    name: str = psld.NAME
    chunk_bytes: int | None = None  # None: the rule of :func:`~unstall.ps.assign.psld.chunk_size`

    def assign(
        self, tensors: Sequence[TensorInfo], servers: int, costs: Sequence[CostPhase] = ()
    ) -> Assignment:
        """PSLD's starting point; it reads no costs (it learns the servers while running)."""
        result = psld.assign(tensors, servers, chunk_bytes=self.chunk_bytes)
        check_cover(tensors, result.chunks)
        return result

    def controller(self, scenario: Scenario, iterations: int) -> Controller:
        """A fresh elastic controller for one run."""
        return ElasticPSLD(scenario, iterations, controller=self.make_controller(self.config))


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        StaticStrategy(mxnet.NAME, mxnet.assign),
        StaticStrategy(byteps.NAME, byteps.assign),
        StaticStrategy(tf_greedy.NAME, tf_greedy.assign),
        StaticStrategy(round_robin.NAME, round_robin.assign),
        StaticStrategy(oracle.NAME, oracle.assign),
        PSLDStrategy(),
    )
}


def strategy_named(name: str, *, owner: str = "ps", field: str = "strategy") -> Strategy:
    """The built-in strategy called ``name`` (a key of :data:`STRATEGIES`); an unknown name
    raises a :class:`~unstall.errors.ConfigError` naming ``owner``'s ``field`` and the known
    ones."""
    found = STRATEGIES.get(name)
    if found is None:
        known = ", ".join(STRATEGIES)
        raise ConfigError(owner, field, f"unknown strategy {name!r}; known: {known}")
    return found
