"""Checkpoints of the analyser's training run, so that a network trained for a while is trained
once: later runs (another array, dataflow or skipping model) load it and record at once.

A checkpoint holds everything the rest of the run depends on: the weights (with BatchNorm's
running statistics), the optimizer's momentum, the data generator's state, the RNG state that
draws dropout masks, and the losses and correct predictions of the steps so far. Resuming from a
checkpoint of ``n`` steps therefore continues exactly as the uninterrupted run would have
(``tests/sparse/test_analyzer.py`` checks this).

Files are ``<dir>/<model>-<size>px-b<batch>-<key>-step<n>.pt``; ``key`` hashes every
:class:`~unstall.sparse.analyzer.AnalyzerConfig` field that changes training (not the step
counts). Only the newest checkpoint of a key is kept (a VGG-16 checkpoint is about 1 GB).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from unstall.errors import DataFileError

if TYPE_CHECKING:
    from unstall.sparse.analyzer import AnalyzerConfig

# Fields that do not change the trained weights: how long to train, how many steps to record,
# how many images the accuracy after the warm-up is measured on.
_NOT_IN_KEY = frozenset({"warmup_steps", "steps", "eval_images"})


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


def cache_key(config: AnalyzerConfig) -> str:
    """A short hash of everything in ``config`` that changes training."""
    fields = {
        f.name: str(getattr(config, f.name))
        for f in dataclasses.fields(config)
        if f.name not in _NOT_IN_KEY
    }
    text = json.dumps(fields, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _prefix(config: AnalyzerConfig) -> str:
    return f"{config.model}-{config.image_size}px-b{config.batch_size}-{cache_key(config)}-step"


def _cached(cache_dir: Path, config: AnalyzerConfig) -> list[tuple[int, Path]]:
    pattern = re.compile(re.escape(_prefix(config)) + r"(\d+)\.pt$")
    found = []
    for path in cache_dir.glob(_prefix(config) + "*.pt") if cache_dir.is_dir() else []:
        match = pattern.match(path.name)
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


def load_latest(cache_dir: Path, config: AnalyzerConfig, upto: int) -> TrainState | None:
    """The checkpoint of ``config`` with the most steps, at most ``upto``; None if none."""
    usable = [(n, p) for n, p in _cached(cache_dir, config) if n <= upto]
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


def save(cache_dir: Path, config: AnalyzerConfig, state: TrainState) -> Path:
    """Write ``state`` (atomically: a temporary file, then a rename) and drop older checkpoints
    of the same key."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / f"{_prefix(config)}{state.steps}.pt"
    tmp = path.with_suffix(".tmp")
    # Not dataclasses.asdict: it would deep-copy every weight first.
    data = {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}
    torch.save(data | {"config": cache_key(config)}, tmp)
    tmp.replace(path)
    for steps, old in _cached(cache_dir, config):
        if steps < state.steps:
            old.unlink(missing_ok=True)
    return path
