"""An image dataset on disk and the three ways the profiler feeds it (cold, warm, cached).

Two layouts are read (:func:`read_dataset`):

- class folders, as image data sets ship (ImageNet, torchvision's ``ImageFolder``):
  ``root/<class>/*.{png,jpg,jpeg}``, the classes numbered in sorted order of their folder names;
- the profiler's own flat folder ``root/NNNNNN_LABEL.png`` (:func:`write_image_dataset` writes
  one, with random RGB images, and syncs them so their pages are clean and can be dropped).

:func:`drop_page_cache` asks the kernel to forget the files' cached pages
(``posix_fadvise(POSIX_FADV_DONTNEED)``, no root needed), so the next read fetches from the
storage device: a cold pass. A warm pass reads the same files again from the page cache. Files
are read and decoded through a real ``torch.utils.data.DataLoader`` (:func:`loader_feed`): each
batch is fetched (file bytes read) and prepared (Pillow decode, resize to the model's image size
where it differs, random crop after 4-pixel padding, random flip, normalisation), in the
loader's worker processes when it has any, so that the stalls measured are those a training job
with as many loader workers sees. The cached feed holds the first batches decoded once up front
and skips both phases.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from unstall.errors import DataFileError

SUFFIX = ".png"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
CLASS_FOLDERS = "class folders"
FLAT = "flat"
_MEAN = torch.tensor([0.5, 0.5, 0.5]).view(3, 1, 1)
_STD = torch.tensor([0.25, 0.25, 0.25]).view(3, 1, 1)
# Batches the cached run (and a model without synthetic batches) holds in memory, cycled.
CACHED_BATCHES = 4

Batch = tuple[torch.Tensor, torch.Tensor]
# A feed gives batch ``index`` of a run (0, 1, ...); it may wrap around its data.
BatchFeed = Callable[[int], Batch]


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


@dataclass(frozen=True)
class ImageSet:
    """A dataset's image files (sorted), their labels, its layout and its class names (class
    folders; empty for the flat layout)."""

    paths: tuple[Path, ...]
    labels: tuple[int, ...]
    layout: str
    classes: tuple[str, ...] = ()


def _images_in(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def read_dataset(directory: Path) -> ImageSet:
    """The dataset in ``directory``: image files right in it are the flat layout (named
    ``NNNNNN_LABEL.png``); otherwise each sub-folder holding images is a class. An error names
    the directory when there are no images."""
    if not directory.is_dir():
        raise DataFileError(str(directory), "no such directory")
    flat = _images_in(directory)
    if flat:
        return ImageSet(tuple(flat), tuple(label_of(p) for p in flat), FLAT)
    folders = sorted(p for p in directory.iterdir() if p.is_dir() and _images_in(p))
    if not folders:
        raise DataFileError(
            str(directory),
            "no images: want class folders DIR/CLASS/*.{png,jpg,jpeg} or the flat"
            " NNNNNN_LABEL.png files of unstall profile data",
        )
    paths: list[Path] = []
    labels: list[int] = []
    for label, folder in enumerate(folders):
        files = _images_in(folder)
        paths += files
        labels += [label] * len(files)
    return ImageSet(tuple(paths), tuple(labels), CLASS_FOLDERS, tuple(f.name for f in folders))


def list_dataset(directory: Path) -> list[Path]:
    """The dataset's image files, sorted (either layout, see :func:`read_dataset`)."""
    return list(read_dataset(directory).paths)


def label_of(path: Path) -> int:
    try:
        return int(path.stem.rsplit("_", 1)[1])
    except (IndexError, ValueError) as exc:
        raise DataFileError(
            str(path), "name must be NNNNNN_LABEL.png (or put the images in class folders)"
        ) from exc


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


def decode(blob: bytes, image_size: int | None = None) -> torch.Tensor:
    """Image bytes (PNG, JPEG) to a float ``(3, S, S)`` tensor in [0, 1]: resized so that its
    shorter side is ``image_size`` and centre-cropped to a square, when its size differs (no
    resizing without ``image_size``)."""
    from PIL import Image

    with Image.open(io.BytesIO(blob)) as opened:
        image = opened.convert("RGB")
    if image_size is not None and image.size != (image_size, image_size):
        scale = image_size / min(image.size)
        width, height = (max(image_size, round(side * scale)) for side in image.size)
        image = image.resize((width, height), Image.Resampling.BILINEAR)
        left, top = (width - image_size) // 2, (height - image_size) // 2
        image = image.crop((left, top, left + image_size, top + image_size))
    array = np.asarray(image, dtype=np.uint8)
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
    blobs: list[bytes],
    rng: np.random.Generator,
    extra_delay_s: float = 0.0,
    image_size: int | None = None,
) -> torch.Tensor:
    """Decode and augment one batch (the prep phase); ``extra_delay_s`` is an injected delay."""
    if extra_delay_s > 0:
        time.sleep(extra_delay_s)
    return torch.stack([augment(decode(blob, image_size), rng) for blob in blobs])


def batch_indices(count: int, index: int, batch: int) -> list[int]:
    """The files (positions) of batch ``index``, wrapping around a dataset of ``count``."""
    start = index * batch
    return [(start + k) % count for k in range(batch)]


def batch_paths(paths: list[Path], index: int, batch: int) -> list[Path]:
    """The files of batch ``index``, wrapping around the dataset."""
    return [paths[i] for i in batch_indices(len(paths), index, batch)]


@dataclass(frozen=True, kw_only=True)
class FileBatches(torch.utils.data.Dataset[Batch]):
    """A map-style dataset whose item ``k`` is batch ``k`` read and prepared from the files:
    fetched as one read of its files, then decoded and augmented (a generator seeded by the
    seed and ``k``, so every pass augments alike). Items per pass: the batches that cover the
    files once (the last one wraps to the first files). With ``drop_cache`` each batch's files
    lose their cached pages just before they are read: every read is cold."""

    images: ImageSet
    batch: int
    image_size: int | None = None
    seed: int = 0
    fetch_delay_s: float = 0.0
    prep_delay_s: float = 0.0
    drop_cache: bool = False

    def __len__(self) -> int:
        return -(-len(self.images.paths) // self.batch)

    def __getitem__(self, index: int) -> Batch:
        chosen = batch_indices(len(self.images.paths), index, self.batch)
        paths = [self.images.paths[i] for i in chosen]
        if self.drop_cache:  # a cold read of every file, however often the run wraps around
            drop_page_cache(paths)
        blobs = fetch(paths, self.fetch_delay_s)
        rng = np.random.default_rng((self.seed, index))
        images = prepare(blobs, rng, self.prep_delay_s, self.image_size)
        return images, torch.tensor([self.images.labels[i] for i in chosen])


class LoaderFeed:
    """A :data:`BatchFeed` over a ``DataLoader`` of :class:`FileBatches`: batch 0 starts a
    new pass (the loader's workers start and prefetch), each later call takes the next batch,
    and the pass starts again when the files run out (a new epoch). :meth:`close` ends the pass,
    stopping the workers, so that they read nothing while other runs are timed."""

    def __init__(self, dataset: FileBatches, workers: int) -> None:
        self.loader = torch.utils.data.DataLoader(
            dataset, batch_size=None, shuffle=False, num_workers=workers
        )
        self._items: Iterator[Batch] | None = None

    def __call__(self, index: int) -> Batch:
        if index == 0 or self._items is None:
            self._items = iter(self.loader)
        batch = next(self._items, None)
        if batch is None:
            self._items = iter(self.loader)
            batch = next(self._items)
        return batch

    def close(self) -> None:
        self._items = None


def loader_feed(
    images: ImageSet,
    batch: int,
    *,
    workers: int = 0,
    image_size: int | None = None,
    seed: int = 0,
    fetch_delay_s: float = 0.0,
    prep_delay_s: float = 0.0,
    drop_cache: bool = False,
) -> LoaderFeed:
    """Batches read and prepared from the files through a DataLoader with ``workers`` worker
    processes (0: in this process); cold with ``drop_cache``, else warm or cold as the page
    cache holds the files."""
    dataset = FileBatches(
        images=images,
        batch=batch,
        image_size=image_size,
        seed=seed,
        fetch_delay_s=fetch_delay_s,
        prep_delay_s=prep_delay_s,
        drop_cache=drop_cache,
    )
    return LoaderFeed(dataset, workers)


def cached_feed(
    images: ImageSet, batch: int, *, image_size: int | None = None, batches: int = CACHED_BATCHES
) -> BatchFeed:
    """The first ``batches`` batches decoded (and normalised, not augmented) once up front,
    cycled: no fetch, no prep in the timed loop, and memory for a few batches only."""
    pool = []
    for index in range(min(batches, -(-len(images.paths) // batch))):
        chosen = batch_indices(len(images.paths), index, batch)
        decoded = [
            (decode(images.paths[i].read_bytes(), image_size) - _MEAN) / _STD for i in chosen
        ]
        pool.append((torch.stack(decoded), torch.tensor([images.labels[i] for i in chosen])))

    def feed(index: int) -> Batch:
        return pool[index % len(pool)]

    return feed
