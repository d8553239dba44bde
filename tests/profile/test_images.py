"""The on-disk image dataset and its cold, warm and cached feeds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from unstall.errors import DataFileError
from unstall.profile import images


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("images")
    return images.write_image_dataset(root, count=12, image_size=32, num_classes=5, seed=3)


def test_dataset_files_and_labels(dataset: list[Path]) -> None:
    assert images.list_dataset(dataset[0].parent) == dataset
    assert all(0 <= images.label_of(p) < 5 for p in dataset)
    image = images.decode(dataset[0].read_bytes())
    assert image.shape == (3, 32, 32) and 0.0 <= float(image.min()) <= float(image.max()) <= 1.0


def test_feeds_give_batches_of_the_right_shape(dataset: list[Path]) -> None:
    found = images.read_dataset(dataset[0].parent)
    assert found.layout == images.FLAT and found.labels == tuple(map(images.label_of, dataset))
    for feed in (images.loader_feed(found, 5), images.cached_feed(found, 5)):
        for index in range(3):
            batch, labels = feed(index)  # the third wraps around the 12 files
        assert batch.shape == (5, 3, 32, 32) and labels.dtype == torch.int64
        expected = [images.label_of(p) for p in images.batch_paths(dataset, 2, 5)]
        assert labels.tolist() == expected


def test_cached_feed_equals_unaugmented_decode(dataset: list[Path]) -> None:
    batch, _ = images.cached_feed(images.read_dataset(dataset[0].parent), 2)(0)
    direct = (images.decode(dataset[0].read_bytes()) - 0.5) / 0.25
    assert torch.allclose(batch[0], direct)


def _class_folders(root: Path) -> dict[str, int]:
    """Two classes of JPEG and PNG images of several sizes; returns files per class."""
    from PIL import Image

    rng = np.random.default_rng(0)
    sizes = {"cat": [(40, 30), (64, 64), (33, 50)], "dog": [(80, 60), (32, 32)]}
    for name, shapes in sizes.items():
        (root / name).mkdir(parents=True)
        for i, (w, h) in enumerate(shapes):
            pixels = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
            suffix = ".jpg" if i % 2 else ".PNG"
            Image.fromarray(pixels).save(root / name / f"img{i}{suffix}")
    (root / "notes").mkdir()  # no images: not a class
    (root / "notes" / "readme.txt").write_text("x")
    return {name: len(shapes) for name, shapes in sizes.items()}


def test_class_folders_are_read_through_a_dataloader_with_workers(tmp_path: Path) -> None:
    counts = _class_folders(tmp_path)
    found = images.read_dataset(tmp_path)
    assert (found.layout, found.classes) == (images.CLASS_FOLDERS, ("cat", "dog"))
    assert found.labels == (0,) * counts["cat"] + (1,) * counts["dog"]
    feed = images.loader_feed(found, 2, workers=2, image_size=32, drop_cache=True)
    seen = [feed(i) for i in range(4)]  # 3 batches a pass: the fourth starts a new epoch
    assert all(b.shape == (2, 3, 32, 32) for b, _ in seen)
    assert [t.tolist() for _, t in seen] == [[0, 0], [0, 1], [1, 0], [0, 0]]
    assert feed.loader.num_workers == 2
    feed.close()
    cached, labels = images.cached_feed(found, 4, image_size=48)(0)
    assert cached.shape == (4, 3, 48, 48) and labels.tolist() == [0, 0, 0, 1]


def test_a_resized_image_keeps_its_centre(tmp_path: Path) -> None:
    from PIL import Image

    pixels = np.zeros((40, 80, 3), dtype=np.uint8)  # 80 wide: the centre 40 columns are red
    pixels[:, 20:60, 0] = 255
    Image.fromarray(pixels).save(tmp_path / "wide.png")
    image = images.decode((tmp_path / "wide.png").read_bytes(), 20)
    assert image.shape == (3, 20, 20) and float(image[0].mean()) > 0.95  # no black sides


def test_drop_page_cache_runs_without_root(dataset: list[Path]) -> None:
    images.drop_page_cache(dataset)
    assert images.fetch(dataset[:2])[0] == dataset[0].read_bytes()


def test_missing_or_empty_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DataFileError, match="no such directory"):
        images.list_dataset(tmp_path / "nope")
    with pytest.raises(DataFileError, match=r"no images: want class folders"):
        images.list_dataset(tmp_path)
    (tmp_path / "7.png").write_bytes(b"")
    with pytest.raises(DataFileError, match=r"name must be NNNNNN_LABEL\.png"):
        images.read_dataset(tmp_path)
