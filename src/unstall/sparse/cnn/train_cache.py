"""Checkpoints of the analyser's training run, so that a network trained for a while is trained
once: further runs on it (another array, dataflow or skipping model) load it and record at once.

A checkpoint holds everything the rest of the run depends on: the weights (with BatchNorm's
running statistics), the optimizer's momentum, the data generator's state, the RNG state that
draws dropout masks, and the losses and correct predictions of the steps so far. Resuming from a
checkpoint of ``n`` steps therefore continues exactly as the uninterrupted run would have
(``tests/sparse/cnn/test_analyzer.py`` checks this).

Files are ``<dir>/<prefix>-step<n>.pt``; the training run names the prefix (its model, image
size, batch and :func:`cache_key` of every setting that changes training). Only the newest
checkpoint of a prefix is kept (a VGG-16 checkpoint is about 1 GB).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from unstall.errors import DataFileError
from unstall.results import replaced_atomically


@dataclass
class TrainState:
    """The run's state after ``steps`` warm-up steps."""

    steps: int
    model: dict[str, Any]
    optimizer: dict[str, Any]
    data_rng: torch.Tensor
    torch_rng: torch.Tensor
    losses: list[float]
    correct: list[int]


def cache_key(fields: Mapping[str, object], leave_out: Collection[str] = ()) -> str:
    """A short hash of ``fields`` (by their text) but those in ``leave_out``."""
    text = json.dumps(
        {name: str(value) for name, value in fields.items() if name not in leave_out},
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _cached(cache_dir: Path, prefix: str) -> list[tuple[int, Path]]:
    stem = f"{prefix}-step"
    pattern = re.compile(re.escape(stem) + r"(\d+)\.pt$")
    found = []
    for path in cache_dir.glob(stem + "*.pt") if cache_dir.is_dir() else []:
        match = pattern.match(path.name)
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


def load_latest(cache_dir: Path, prefix: str, upto: int) -> TrainState | None:
    """The checkpoint of ``prefix`` with the most steps, at most ``upto``; None if none."""
    usable = [(n, p) for n, p in _cached(cache_dir, prefix) if n <= upto]
    if not usable:
        return None
    steps, path = usable[-1]
    try:
        data = torch.load(path, map_location="cpu", weights_only=False)
    except (OSError, RuntimeError, EOFError) as exc:
        raise DataFileError(str(path), f"unreadable checkpoint: {exc}") from exc
    return TrainState(
        steps=steps,
        model=data["model"],
        optimizer=data["optimizer"],
        data_rng=data["data_rng"],
        torch_rng=data["torch_rng"],
        losses=list(data["losses"]),
        correct=list(data["correct"]),
    )


def save(cache_dir: Path, prefix: str, key: str, state: TrainState) -> Path:
    """Write ``state`` (atomically: a temporary file, then a rename), noting ``key`` in it, and
    drop older checkpoints of the same prefix."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / f"{prefix}-step{state.steps}.pt"
    # Not dataclasses.asdict: it would deep-copy every weight first.
    data = {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}
    with replaced_atomically(path) as tmp:
        torch.save(data | {"config": key}, tmp)
    for steps, old in _cached(cache_dir, prefix):
        if steps < state.steps:
            old.unlink(missing_ok=True)
    return path
