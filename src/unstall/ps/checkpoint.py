"""A run's progress, to stop and go on with the same result: :class:`PSCheckpoint`.

A checkpoint holds what the next iteration needs and nothing the run can rebuild: the trained
parameters and the servers' optimizer state (tensor by tensor, whatever server owned which
chunk), the model's buffers as worker 0 had them, the next iteration's number, and what the
run must keep to replay the same batches and dropout masks (the seed and the number of
workers; the data function itself comes from the caller again). The placement is not saved:
the step is exact on any placement, so a resumed run may place the parameters anew.

Files are written with :func:`torch.save` (write to a temporary file, then rename: a run
killed while saving leaves the previous checkpoint whole) and read with ``weights_only``
loading, so a checkpoint cannot run code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from unstall.config import check
from unstall.errors import DataFileError, unreadable_checkpoint_reason
from unstall.ps.optim import OPTIMIZERS, ServerOptimizer
from unstall.results import replaced_atomically

FORMAT = "unstall.ps.checkpoint/1"


@dataclass(frozen=True, kw_only=True)
class PSCheckpoint:
    """The state of a run after ``iteration`` iterations (the next one to run is
    ``iteration``); ``state[slot][tensor]`` is the optimizer's state."""

    iteration: int
    params: tuple[np.ndarray, ...]
    state: tuple[tuple[np.ndarray, ...], ...]
    optimizer: ServerOptimizer
    buffers: Mapping[str, torch.Tensor] = field(default_factory=dict)
    seed: int = 0
    workers: int = 2
    model: str = ""

    def __post_init__(self) -> None:
        check(self.iteration >= 0, self, "iteration", f"must be >= 0, got {self.iteration}")
        check(
            len(self.state) == self.optimizer.slots,
            self,
            "state",
            f"{self.optimizer.name} keeps {self.optimizer.slots} state array(s) per tensor, "
            f"got {len(self.state)}",
        )
        for slot in self.state:
            shapes = [a.shape for a in slot]
            check(
                shapes == [p.shape for p in self.params],
                self,
                "state",
                "every state array must have its parameter's size",
            )

    def check_fits(self, sizes: Sequence[int], *, workers: int, seed: int) -> None:
        """Raise unless this checkpoint can resume a run of a model whose trainable tensors
        have ``sizes`` elements, on ``workers`` workers with ``seed``."""
        mine = [int(p.size) for p in self.params]
        check(
            mine == list(sizes),
            "resume",
            "params",
            f"the checkpoint's {len(mine)} tensors ({sum(mine):,} elements) do not fit the "
            f"model's {len(sizes)} ({sum(sizes):,} elements): another model?",
        )
        check(
            workers == self.workers,
            "resume",
            "workers",
            f"the checkpoint was made with {self.workers} workers, not {workers} (each worker's "
            "batches depend on the number of workers)",
        )
        check(
            seed == self.seed,
            "resume",
            "seed",
            f"the checkpoint was made with seed {self.seed}, not {seed} (the seed draws the "
            "batches and dropout masks)",
        )

    def save(self, path: str | Path) -> Path:
        """Write the checkpoint to ``path`` atomically; the path."""
        path = Path(path)
        payload = {
            "format": FORMAT,
            "iteration": self.iteration,
            "params": [torch.from_numpy(p) for p in self.params],
            "state": [[torch.from_numpy(a) for a in slot] for slot in self.state],
            "optimizer": {"name": self.optimizer.name, **_settings(self.optimizer)},
            "buffers": dict(self.buffers),
            "seed": self.seed,
            "workers": self.workers,
            "model": self.model,
        }
        with replaced_atomically(path) as tmp:
            torch.save(payload, tmp)
        return path

    @classmethod
    def load(cls, path: str | Path) -> PSCheckpoint:
        """Read a checkpoint written by :meth:`save`; a file that is not one raises
        :class:`~unstall.errors.DataFileError` naming it."""
        path = Path(path)
        try:
            payload = torch.load(path, map_location="cpu", weights_only=True)
        except FileNotFoundError as exc:
            raise DataFileError(str(path), "no such file") from exc
        except IsADirectoryError as exc:
            raise DataFileError(str(path), "is a folder, not a checkpoint file") from exc
        except Exception as exc:  # torch raises many kinds for a file that is not its own
            why = f"not a readable checkpoint of `unstall ps`: {unreadable_checkpoint_reason(exc)}"
            raise DataFileError(str(path), why) from exc
        if not isinstance(payload, dict) or payload.get("format") != FORMAT:
            raise DataFileError(str(path), f"not a checkpoint of `unstall ps` (want {FORMAT})")
        try:
            return cls._from_payload(payload)
        except (KeyError, TypeError, ValueError) as exc:
            raise DataFileError(str(path), f"damaged checkpoint: {exc}") from exc

    @classmethod
    def _from_payload(cls, payload: dict[str, Any]) -> PSCheckpoint:
        options = dict(payload["optimizer"])
        name = options.pop("name")
        if name not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {name!r}; known: {sorted(OPTIMIZERS)}")
        return cls(
            iteration=int(payload["iteration"]),
            params=tuple(t.numpy() for t in payload["params"]),
            state=tuple(tuple(t.numpy() for t in slot) for slot in payload["state"]),
            optimizer=OPTIMIZERS[name](**options),
            buffers=dict(payload["buffers"]),
            seed=int(payload["seed"]),
            workers=int(payload["workers"]),
            model=str(payload["model"]),
        )


def _settings(optimizer: ServerOptimizer) -> dict[str, Any]:
    """An optimizer config's fields (its settings) by name."""
    if not dataclasses.is_dataclass(optimizer):
        raise TypeError(f"{type(optimizer).__name__}: a checkpoint saves dataclass optimizers")
    return {f.name: getattr(optimizer, f.name) for f in dataclasses.fields(optimizer)}
