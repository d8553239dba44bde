"""examples/ps_custom_model.py, the README's bring-your-own example, runs as a user runs it:
from the command line's names and through unstall.ps.fit (fewer iterations)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unstall.ps import PSRequest, resolve_run
from unstall.usercode import load_callable

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ps_custom_model.py"


def test_the_examples_names_resolve_as_the_readme_gives_them() -> None:
    run = resolve_run(
        PSRequest(
            model=f"{EXAMPLE}:make_model",
            data=f"{EXAMPLE}:make_data",
            loss=f"{EXAMPLE}:loss",
            optimizer="adam",
            lr=0.01,
            strategy="psld",
            scenario="bandwidth",
        )
    )
    assert run.optimizer.name == "adam" and run.strategy.name == "psld"
    inputs, targets = next(iter(run.data(0, 2)))
    assert inputs.shape == (64, 2) and run.loss(run.model()(inputs), targets).ndim == 0


def test_the_example_trains_exactly_and_its_weights_load(ray_session: Any) -> None:
    train = load_callable(f"{EXAMPLE}:train")
    result, share = train(iterations=12)
    assert result.params_match_reference is True
    assert result.loss_last < result.loss_first
    assert 0.5 < share <= 1.0
