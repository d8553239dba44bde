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
    rng = np.random.default_rng(0)
    for feed in (images.file_feed(dataset, 5, rng), images.cached_feed(dataset, 5)):
        batch, labels = feed(2)  # wraps around the 12 files
        assert batch.shape == (5, 3, 32, 32) and labels.dtype == torch.int64
        expected = [images.label_of(p) for p in images.batch_paths(dataset, 2, 5)]
        assert labels.tolist() == expected


def test_cached_feed_equals_unaugmented_decode(dataset: list[Path]) -> None:
    batch, _ = images.cached_feed(dataset, 2)(0)
    direct = (images.decode(dataset[0].read_bytes()) - 0.5) / 0.25
    assert torch.allclose(batch[0], direct)


def test_drop_page_cache_runs_without_root(dataset: list[Path]) -> None:
    images.drop_page_cache(dataset)
    assert images.fetch(dataset[:2])[0] == dataset[0].read_bytes()


def test_missing_or_empty_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DataFileError, match="no such directory"):
        images.list_dataset(tmp_path / "nope")
    with pytest.raises(DataFileError, match=r"no \.png files"):
        images.list_dataset(tmp_path)
