"""Image batches for the CNN sparsity analyser: learnable synthetic classes, or an image folder.

Sparsity measured at initialisation says little about training, so the analyser trains first;
for that the data must have something to learn. :class:`PatternImages` gives each class a fixed
smooth colour pattern (a random low-resolution image, upsampled) and draws samples as that pattern
shifted at random, scaled in contrast and buried in noise: a network learns it within a few
hundred steps, and its activations then look like those of a trained network rather than of
random weights. :class:`FolderImages` reads any ``root/<class>/<image>`` tree (PNG, JPEG, ...).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F

from unstall.config import check
from unstall.errors import DataFileError

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff"})


class ImageSource(Protocol):
    """Anything that yields ``(images (N, 3, S, S) float, labels (N,) int64)`` batches.

    A source may also have a ``label`` (text): what results and the weight cache call its images
    (:func:`source_label`).
    """

    num_classes: int

    def batch(
        self, batch_size: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One batch drawn with ``generator``."""
        ...


@dataclass(frozen=True, kw_only=True)
class PatternConfig:
    """Synthetic classes: a smooth pattern per class, shifted, contrast-scaled, overlaid with a
    weaker pattern of another class, and noisy (hard enough that a CNN is still learning after a
    few hundred steps, easy enough that it learns)."""

    num_classes: int = 10
    image_size: int = 64
    pattern_cells: int = 4  # each class pattern is a random cells x cells RGB image, upsampled
    noise: float = 1.0  # std of the per-pixel Gaussian noise (the pattern has unit scale)
    distractor: float = 0.6  # weight of a random other class's pattern added to each image
    max_shift: float = 0.25  # random shift, as a fraction of the image side

    def __post_init__(self) -> None:
        check(self.num_classes >= 2, self, "num_classes", "must be >= 2")
        check(self.image_size >= 8, self, "image_size", "must be >= 8")
        check(self.pattern_cells >= 1, self, "pattern_cells", "must be >= 1")
        check(self.noise >= 0, self, "noise", "must be >= 0")
        check(self.distractor >= 0, self, "distractor", "must be >= 0")
        check(0 <= self.max_shift < 1, self, "max_shift", "must be in [0, 1)")


class PatternImages:
    """Seeded synthetic images whose class is learnable (see the module docstring)."""

    def __init__(self, config: PatternConfig, seed: int) -> None:
        self.config = config
        self.num_classes = config.num_classes
        self.label = f"synthetic patterns, seed {seed}"
        g = torch.Generator().manual_seed(seed)
        cells = torch.randn(
            config.num_classes, 3, config.pattern_cells, config.pattern_cells, generator=g
        )
        size = config.image_size
        self.patterns = F.interpolate(
            cells, size=(size, size), mode="bilinear", align_corners=False
        )
        self.patterns /= self.patterns.flatten(1).std(dim=1).clamp_min(1e-6)[:, None, None, None]

    def batch(
        self, batch_size: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.config
        labels = torch.randint(0, c.num_classes, (batch_size,), generator=generator)
        limit = int(c.max_shift * c.image_size)
        shifts = torch.randint(-limit, limit + 1, (batch_size, 2), generator=generator)
        images = _roll_each(self.patterns[labels], shifts)
        contrast = 0.5 + torch.rand(batch_size, 1, 1, 1, generator=generator)
        others = torch.randint(0, c.num_classes, (batch_size,), generator=generator)
        noise = c.noise * torch.randn(images.shape, generator=generator)
        return images * contrast + c.distractor * self.patterns[others] + noise, labels


def _roll_each(images: torch.Tensor, shifts: torch.Tensor) -> torch.Tensor:
    """Roll each image ``(B, C, H, W)`` by its own ``(dy, dx)`` (circular, like ``torch.roll``)."""
    b, c, h, w = images.shape
    rows = (torch.arange(h)[None, :] - shifts[:, :1]) % h  # (B, H)
    cols = (torch.arange(w)[None, :] - shifts[:, 1:]) % w  # (B, W)
    images = images.gather(2, rows[:, None, :, None].expand(b, c, h, w))
    return images.gather(3, cols[:, None, None, :].expand(b, c, h, w))


class FolderImages:
    """Images under ``root/<class name>/``, resized to ``image_size`` squares and standardised.

    Files are read once, on construction (the analyser runs a few hundred small batches, so a
    folder small enough for this machine fits in memory as uint8). ``label`` is the folder as
    given.
    """

    def __init__(self, root: Path, image_size: int, *, max_per_class: int | None = None) -> None:
        self.root = Path(root)
        self.label = str(self.root)
        if not self.root.is_dir():
            raise DataFileError(str(root), "no such folder (expected root/<class>/<image files>)")
        classes = sorted(p for p in self.root.iterdir() if p.is_dir())
        images, labels = [], []
        for label, folder in enumerate(classes):
            files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
            for path in files[:max_per_class]:
                images.append(_read_image(path, image_size))
                labels.append(label)
        if len(classes) < 2 or not images:
            raise DataFileError(
                str(root), f"needs at least 2 class folders with images; found {len(classes)}"
            )
        self.classes = [p.name for p in classes]
        self.num_classes = len(classes)
        self.images = torch.from_numpy(np.stack(images))  # (N, 3, S, S) uint8
        self.labels = torch.tensor(labels, dtype=torch.int64)
        as_float = self.images.float()
        self.mean = as_float.mean(dim=(0, 2, 3), keepdim=True)
        self.std = as_float.std(dim=(0, 2, 3), keepdim=True).clamp_min(1.0)

    def batch(
        self, batch_size: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.randint(0, len(self.labels), (batch_size,), generator=generator)
        images = (self.images[idx].float() - self.mean) / self.std
        flip = torch.rand(batch_size, generator=generator) < 0.5
        images[flip] = images[flip].flip(dims=(3,))
        return images, self.labels[idx]


def source_label(source: ImageSource) -> str:
    """What results call ``source``'s images: its ``label``, else its class name."""
    label = getattr(source, "label", None)
    return label if isinstance(label, str) and label else type(source).__name__


def _read_image(path: Path, image_size: int) -> np.ndarray:
    """One image file as a (3, S, S) uint8 array: centre-cropped to a square, then resized."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as img:
            rgb = img.convert("RGB")
    except (UnidentifiedImageError, OSError) as exc:
        raise DataFileError(str(path), f"not a readable image: {exc}") from exc
    side = min(rgb.size)
    left, top = (rgb.size[0] - side) // 2, (rgb.size[1] - side) // 2
    square = rgb.crop((left, top, left + side, top + side)).resize((image_size, image_size))
    return np.asarray(square, dtype=np.uint8).transpose(2, 0, 1).copy()


def batches(
    source: ImageSource, batch_size: int, count: int, generator: torch.Generator
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """``count`` batches from ``source``."""
    for _ in range(count):
        yield source.batch(batch_size, generator)
