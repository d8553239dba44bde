"""Shared by the parameter-server tests (tests/ps, tests/cli): a tiny model's runs."""

from __future__ import annotations

import functools
from typing import Any

from unstall.ps.psld.controller import PSLDController
from unstall.ps.psld.decisions import ClusterView, Decision, Reassign, ScaleIn, ScaleOut

TINY_MODEL = {"in_features": 32, "width": 48, "depth": 3, "num_classes": 10}

FAST_SCENARIO = {
    "name": "fast",
    "servers": 3,
    "base": {"bandwidth_mb_s": 500.0, "latency_ms": 0.1},
    "phases": [{"start": 0.0, "servers": [{"server": 2, "bandwidth_mb_s": 100.0}]}],
}


def zoo_model(**options: object) -> Any:
    """A zoo MLP with ``options`` as a model function labelled ``mlp``."""
    from unstall.ps import Named
    from unstall.workload import zoo

    return Named(functools.partial(zoo.build, "mlp", **options), "mlp", options)


def zoo_batches(batch_size: int = 8, **options: object) -> Any:
    """Synthetic batches of the zoo MLP with ``options``."""
    from unstall.ps import Named, SyntheticData
    from unstall.workload import zoo

    make = functools.partial(zoo.example_batch, "mlp", **options)
    return Named(SyntheticData(make, batch_size=batch_size), "synthetic")


def tiny_run(scenario: Any, *, model_options: dict[str, object] | None = None, **fit: Any) -> Any:
    """A 3-iteration run of a 4 K-parameter MLP on 2 workers (about a second on fast links);
    ``fit`` replaces :func:`unstall.ps.fit`'s arguments."""
    from unstall import ps

    options = {**TINY_MODEL, **(model_options or {})}
    batch_size = fit.pop("batch_size", 8)
    data = fit.pop("data", None) or zoo_batches(batch_size, **options)
    # Generous: starting actors on a loaded 2-core machine can take a minute; a hang is still
    # caught (the timeout test sets its own 1 s).
    arguments: dict[str, Any] = {"workers": 2, "iterations": 3, "timeout_s": 300.0, **fit}
    return ps.fit(zoo_model(**options), data, scenario=scenario, **arguments)


class ScriptedController(PSLDController):
    """Forces a decision at every boundary: scale out, shuffle, scale in, shuffle again."""

    def decide(self, view: ClusterView) -> Decision:
        step = len(self.script_done)
        self.script_done.append(step)
        ids = sorted(view.owner)
        if step == 0:
            owner = {c: view.next_server if c % 2 else s for c, s in view.owner.items()}
            return ScaleOut(server=view.next_server, owner=owner, reason="forced")
        if step == 2:
            victim = view.servers[0]
            rest = [s for s in view.servers if s != victim]
            owner = {c: rest[i % len(rest)] for i, c in enumerate(ids)}
            return ScaleIn(server=victim, owner=owner, reason="forced")
        shift = step % len(view.servers)
        owner = {c: view.servers[(i + shift) % len(view.servers)] for i, c in enumerate(ids)}
        return Reassign(owner=owner, reason="forced")

    script_done: list[int]


def scripted_controller() -> Any:
    """A PSLD controller that forces a decision at every boundary (:class:`ScriptedController`),
    and the strategy that uses it."""
    from unstall.ps import PSLDStrategy

    controller = ScriptedController()
    controller.script_done = []
    return controller, PSLDStrategy(make_controller=lambda config: controller)
