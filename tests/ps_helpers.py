"""Shared by the parameter-server tests (tests/ps, tests/cli): a tiny model's run config."""

from __future__ import annotations

import dataclasses
from typing import Any

TINY_MODEL = {"in_features": 32, "width": 48, "depth": 3, "num_classes": 10}


def tiny_config(scenario: str, **changes: Any) -> Any:
    """A 3-iteration run of a 4 K-parameter MLP on 2 workers (about a second on fast links)."""
    from unstall.ps.train import PSConfig

    base = PSConfig(
        model="mlp",
        model_options=TINY_MODEL,
        workers=2,
        scenario=scenario,
        iterations=3,
        batch_size=8,
        # Generous: starting actors on a loaded 2-core machine can take a minute; a hang is
        # still caught (the timeout test sets its own 1 s).
        timeout_s=300.0,
    )
    return dataclasses.replace(base, **changes)


FAST_SCENARIO = {
    "servers": 3,
    "base": {"bandwidth_mb_s": 500.0, "latency_ms": 0.1},
    "phases": [{"start": 0.0, "servers": [{"server": 2, "bandwidth_mb_s": 100.0}]}],
}
