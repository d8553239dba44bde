"""Models for jobs whose trace does not name one (Philly, Helios, PAI), from a seeded mix.

The public traces record GPUs and times but not what was trained. The simulator needs a model per
job (its compute and communication come from the zoo), so each job is given one drawn from a
configurable mix: an assumption, stated as such in the README and in the trace's notes. With no
published breakdown of Philly's models, the default mix is uniform over the zoo.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from unstall.config import check
from unstall.traces.schema import Trace

# The model names of unstall's zoo (unstall.workload.zoo); traces name models by these.
ZOO_MODELS: tuple[str, ...] = (
    "resnet18",
    "resnet50",
    "vgg16",
    "alexnet",
    "mobilenet_v2",
    "lstm_lm",
    "transformer",
    "mlp",
    "ncf",
)
DEFAULT_MODEL_MIX: dict[str, float] = {name: 1.0 for name in ZOO_MODELS}


def normalised_mix(owner: object, field: str, mix: Mapping[str, float]) -> dict[str, float]:
    """``mix`` with shares summing to 1; names must be non-empty, shares >= 0 and not all 0."""
    check(len(mix) > 0, owner, field, "must name at least one model")
    for name, share in mix.items():
        check(isinstance(name, str) and bool(name.strip()), owner, field, f"bad name {name!r}")
        check(share >= 0, owner, field, f"share of {name!r} must be >= 0, got {share}")
    total = float(sum(mix.values()))
    check(total > 0, owner, field, "shares must not all be 0")
    return {name: float(share) / total for name, share in mix.items()}


def draw_models(rng: np.random.Generator, mix: Mapping[str, float], n: int) -> np.ndarray:
    """``n`` model names drawn independently from ``mix`` (already normalised)."""
    names = np.array(list(mix), dtype=object)
    return names[rng.choice(len(names), size=n, p=np.fromiter(mix.values(), dtype=float))]


def assign_models(
    trace: Trace,
    mix: Mapping[str, float] | None = None,
    seed: int = 0,
    *,
    overwrite: bool = False,
) -> Trace:
    """A copy of ``trace`` whose jobs without a model get one drawn from ``mix`` (seeded).

    Every row gets a draw in trace order, so a job's model depends only on the seed, the mix and
    its position, not on which other jobs already had one. ``overwrite`` replaces existing models
    too. Default mix: uniform over :data:`ZOO_MODELS`.
    """
    shares = normalised_mix("assign_models", "mix", DEFAULT_MODEL_MIX if mix is None else mix)
    check(seed >= 0, "assign_models", "seed", f"must be >= 0, got {seed}")
    drawn = draw_models(np.random.default_rng(seed), shares, len(trace))
    jobs = trace.jobs.copy()
    current = jobs["model"]
    fill = np.ones(len(jobs), dtype=bool) if overwrite else current.isna().to_numpy(bool)
    jobs["model"] = pd.Series(np.where(fill, drawn, current.to_numpy(dtype=object)), dtype="string")
    mix_text = ", ".join(f"{name} {share:.3g}" for name, share in shares.items())
    note = f"models assigned to {int(fill.sum())} jobs from the mix ({mix_text}), seed {seed}"
    return trace.with_jobs(jobs, notes=(*trace.notes, note))
