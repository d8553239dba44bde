"""A training script of your own, profiled by unstall without changing a line of it.

Three functions are all the profiler needs (the same contract as ``unstall ps``):

- ``make_model()`` returns the ``nn.Module`` to train (here a small residual CNN of this file's
  own, with a frozen colour-mixing stem: its parameters count, but it has no gradients);
- ``make_data(rank, world_size)`` returns an iterable of ``(inputs, targets)`` batches for one
  data-parallel worker (here synthetic images, each worker its own shard, augmented on the fly
  the way a real input pipeline would: a random crop and flip per batch);
- ``smoothed_cross_entropy(outputs, targets)`` is the loss (cross-entropy with label smoothing).

Profile it, then let the measured JobProfile drive the cost advisor and the simulator::

    unstall profile run --model examples/my_training.py:make_model \\
        --data examples/my_training.py:make_data \\
        --loss examples/my_training.py:smoothed_cross_entropy \\
        --name tinyresnet --network 1,0.5 --profile-out tinyresnet.json --trace trace.json
    unstall recommend --profile tinyresnet.json --samples 50000 --epochs 30 --budget-hours 2
    unstall profile convert tinyresnet.json --gpu v100 --out tinyresnet-v100.json
    unstall sim run --policy dally --job-profile tinyresnet-v100.json \\
        --trace ../shared/data/traces/philly_jobs.csv --trace-format philly-csv \\
        --model-mix tinyresnet=1,resnet50=1 --max-jobs 50

(``--model-mix`` needs a trace that names no models, as Philly's: the embedded trace names every
job's model, so on it no job would be ``tinyresnet``.)

``BATCH``, ``IMAGE_SIZE`` and ``WIDTH`` size it; tests/test_examples.py runs it smaller.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

BATCH = int(os.environ.get("MY_TRAINING_BATCH", "32"))
IMAGE_SIZE = int(os.environ.get("MY_TRAINING_IMAGE_SIZE", "32"))
WIDTH = int(os.environ.get("MY_TRAINING_WIDTH", "32"))
CLASSES = 10
SAMPLES = 2048  # per epoch, over all workers


class Block(nn.Module):
    """Two 3x3 convolutions with batch norm and a skip connection."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(x + self.bn2(self.conv2(y)))


class TinyResNet(nn.Module):
    """A frozen 1x1 colour-mixing stem, a trained stem, two residual blocks, a classifier."""

    def __init__(self, width: int = WIDTH, classes: int = CLASSES) -> None:
        super().__init__()
        self.colour = nn.Conv2d(3, 3, 1)
        self.colour.requires_grad_(False)  # fixed: part of the parameters, not of the gradients
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.blocks = nn.Sequential(Block(width), Block(width))
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(F.relu(self.stem(self.colour(x))))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def make_model() -> nn.Module:
    return TinyResNet()


def _augment(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Pad by 4, crop back at a random offset, flip half the time: per batch, on the CPU."""
    padded = F.pad(images, (4, 4, 4, 4), mode="reflect")
    top, left = (int(v) for v in torch.randint(0, 9, (2,), generator=generator))
    crop = padded[..., top : top + IMAGE_SIZE, left : left + IMAGE_SIZE]
    return crop.flip(-1) if bool(torch.rand(1, generator=generator) < 0.5) else crop


def make_data(rank: int, world_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """One epoch of this worker's shard: ``SAMPLES / world_size`` images in batches."""
    generator = torch.Generator().manual_seed(1000 + rank)
    for _ in range(max(1, SAMPLES // world_size // BATCH)):
        images = torch.rand(BATCH, 3, IMAGE_SIZE, IMAGE_SIZE, generator=generator)
        labels = torch.randint(0, CLASSES, (BATCH,), generator=generator)
        yield _augment(images, generator), labels


def smoothed_cross_entropy(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(outputs, targets, label_smoothing=0.1)
