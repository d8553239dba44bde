"""A small image dataset on disk and the three ways the profiler feeds it (cold, warm, cached).

:func:`write_image_dataset` writes ``count`` random RGB PNG files named ``NNNNNN_LABEL.png``
and syncs them, so their pages are clean and can be dropped. :func:`drop_page_cache` asks the
kernel to forget the files' cached pages (``posix_fadvise(POSIX_FADV_DONTNEED)``, no root
needed), so the next read fetches from the storage device: a cold pass. A warm pass reads the
same files again from the page cache. Each batch is fetched (file bytes read) and prepared
(PNG decode, random crop after 4-pixel padding, random flip, normalisation); the cached feed
holds tensors decoded once up front and skips both.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from unstall.errors import DataFileError

SUFFIX = ".png"
_MEAN = torch.tensor([0.5, 0.5, 0.5]).view(3, 1, 1)
_STD = torch.tensor([0.25, 0.25, 0.25]).view(3, 1, 1)


def write_image_dataset(
    directory: Path, *, count: int, image_size: int, num_classes: int, seed: int
) -> list[Path]:
    """Write ``count`` random PNG images of ``image_size`` pixels into ``directory``."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        pixels = rng.integers(0, 256, size=(image_size, image_size, 3), dtype=np.uint8)
        path = directory / f"{i:06d}_{int(rng.integers(num_classes))}{SUFFIX}"
        with open(path, "wb") as handle:
            Image.fromarray(pixels).save(handle, format="PNG")
            handle.flush()
            os.fsync(handle.fileno())  # clean pages: only those can be dropped
        paths.append(path)
    return paths


def list_dataset(directory: Path) -> list[Path]:
    """The dataset's image files, sorted; an error naming the directory when there are none."""
    if not directory.is_dir():
        raise DataFileError(str(directory), "no such directory")
    paths = sorted(directory.glob(f"*{SUFFIX}"))
    if not paths:
        raise DataFileError(str(directory), f"no {SUFFIX} files (make one: unstall profile data)")
    return paths


def label_of(path: Path) -> int:
    try:
        return int(path.stem.rsplit("_", 1)[1])
    except (IndexError, ValueError) as exc:
        raise DataFileError(str(path), "name must be NNNNNN_LABEL.png") from exc


def drop_page_cache(paths: list[Path]) -> None:
    """Drop the cached pages of ``paths`` so that the next read is cold."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def fetch(paths: list[Path], extra_delay_s: float = 0.0) -> list[bytes]:
    """Read the files' bytes (the fetch phase); ``extra_delay_s`` is an injected delay."""
    if extra_delay_s > 0:
        time.sleep(extra_delay_s)
    return [path.read_bytes() for path in paths]


def decode(blob: bytes) -> torch.Tensor:
    """PNG bytes to a float ``(3, H, W)`` tensor in [0, 1]."""
    from PIL import Image

    with Image.open(io.BytesIO(blob)) as image:
        array = np.asarray(image.convert("RGB"), dtype=np.uint8)
    return torch.from_numpy(array.copy()).permute(2, 0, 1).float().div_(255.0)


def augment(image: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
    """Random crop after 4-pixel zero padding, random horizontal flip, normalisation."""
    size = image.shape[-1]
    padded = torch.nn.functional.pad(image, (4, 4, 4, 4))
    top, left = (int(v) for v in rng.integers(0, 9, size=2))
    crop = padded[:, top : top + size, left : left + size]
    if rng.random() < 0.5:
        crop = crop.flip(-1)
    return (crop - _MEAN) / _STD


def prepare(
    blobs: list[bytes], rng: np.random.Generator, extra_delay_s: float = 0.0
) -> torch.Tensor:
    """Decode and augment one batch (the prep phase); ``extra_delay_s`` is an injected delay."""
    if extra_delay_s > 0:
        time.sleep(extra_delay_s)
    return torch.stack([augment(decode(blob), rng) for blob in blobs])


Batch = tuple[torch.Tensor, torch.Tensor]
# A feed gives batch ``index`` of a run (0, 1, ...); it may wrap around its data.
BatchFeed = Callable[[int], Batch]


def batch_paths(paths: list[Path], index: int, batch: int) -> list[Path]:
    """The files of batch ``index``, wrapping around the dataset."""
    start = index * batch
    return [paths[(start + k) % len(paths)] for k in range(batch)]


def file_feed(
    paths: list[Path],
    batch: int,
    rng: np.random.Generator,
    *,
    fetch_delay_s: float = 0.0,
    prep_delay_s: float = 0.0,
) -> BatchFeed:
    """Batches read and prepared from the files (cold or warm depends on the page cache)."""

    def feed(index: int) -> Batch:
        chosen = batch_paths(paths, index, batch)
        images = prepare(fetch(chosen, fetch_delay_s), rng, prep_delay_s)
        return images, torch.tensor([label_of(p) for p in chosen])

    return feed


def cached_feed(paths: list[Path], batch: int) -> BatchFeed:
    """Batches of tensors decoded once up front: no fetch, no prep in the timed loop."""
    images = [(decode(p.read_bytes()) - _MEAN) / _STD for p in paths]
    labels = [label_of(p) for p in paths]

    def feed(index: int) -> Batch:
        start = index * batch
        picks = [(start + k) % len(paths) for k in range(batch)]
        return torch.stack([images[i] for i in picks]), torch.tensor([labels[i] for i in picks])

    return feed
