"""Your own model, data set and loss on unstall's parameter server, with PSLD balancing the load.

Nothing here is unstall's: a model class, a torch Dataset served by a DataLoader, a loss. The
parameter server needs three functions from this file:

- ``make_model()`` returns the ``nn.Module`` (every worker builds its own copy; unstall seeds
  torch first, so all copies start equal);
- ``make_data(rank, world_size)`` returns what worker ``rank`` trains on: any iterable of
  ``(inputs, targets)``, here a DataLoader over the worker's shard;
- ``loss(outputs, targets)`` returns a scalar tensor.

From the command line (one iteration = one batch on every worker; ``--check-reference`` replays
the run in one process and checks that the parameters agree to 1e-6):

    unstall ps train --model examples/ps_custom_model.py:make_model \\
        --data examples/ps_custom_model.py:make_data --loss examples/ps_custom_model.py:loss \\
        --strategy psld --scenario bandwidth --optimizer adam --lr 0.01 -n 60 \\
        --check-reference --save spiral.pt

On a Ray cluster add ``--address HOST:PORT``: this file travels to every node by itself. From
Python, run this file: ``python examples/ps_custom_model.py`` trains through
:func:`unstall.ps.fit` and loads the weights it returns into a fresh model.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset


class TwoSpirals(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Points on two interleaved spirals with a little noise; label: which spiral."""

    def __init__(self, points: int = 2048, noise: float = 0.05, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
        turn = torch.rand(points, generator=generator) * 3 * math.pi
        label = torch.randint(0, 2, (points,), generator=generator)
        angle = turn + math.pi * label
        radius = turn / (3 * math.pi)
        xy = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=1)
        self.inputs = xy + noise * torch.randn(points, 2, generator=generator)
        self.labels = label

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inputs[index], self.labels[index]


class SpiralNet(nn.Module):
    """A small residual MLP with LayerNorm (its own buffers: none; BatchNorm would work too)."""

    def __init__(self, width: int = 64, blocks: int = 3) -> None:
        super().__init__()
        self.embed = nn.Linear(2, width)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.GELU())
            for _ in range(blocks)
        )
        self.head = nn.Linear(width, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = h + block(h)
        return self.head(h)


def make_model() -> nn.Module:
    return SpiralNet()


def make_data(rank: int, world_size: int) -> DataLoader[tuple[torch.Tensor, torch.Tensor]]:
    """Worker ``rank``'s shard: every ``world_size``-th point, shuffled each epoch."""
    data = TwoSpirals()
    shard = Subset(data, range(rank, len(data), world_size))
    return DataLoader(shard, batch_size=64, shuffle=True)


def loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy with label smoothing: any differentiable scalar of the outputs works."""
    return nn.functional.cross_entropy(outputs, targets, label_smoothing=0.05)


def accuracy(model: nn.Module) -> float:
    """The share of all points the model puts on the right spiral."""
    data = TwoSpirals()
    model.eval()
    with torch.no_grad():
        return float((model(data.inputs).argmax(dim=1) == data.labels).float().mean())


def train(iterations: int = 60) -> tuple[Any, float]:
    """Train with PSLD on the ``bandwidth`` scenario (one slow server); the run's result and
    the accuracy of its weights loaded into a fresh model."""
    from unstall import ps

    result = ps.fit(
        make_model,
        make_data,
        loss=loss,
        optimizer=ps.AdamConfig(lr=0.01),
        workers=2,
        strategy=ps.STRATEGIES["psld"],
        scenario=ps.SCENARIOS["bandwidth"](),
        iterations=iterations,
        check_reference=True,
    )
    fresh = make_model()
    fresh.load_state_dict(result.state_dict)
    return result, accuracy(fresh)


if __name__ == "__main__":
    run, share = train()
    print(
        f"loss {run.loss_first:.3f} -> {run.loss_last:.3f}; "
        f"exact against one process: {run.params_match_reference}; "
        f"migrations {run.migrations}; accuracy {share:.1%}"
    )
