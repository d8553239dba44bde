"""``unstall sparse analyze``'s options to its run: the config built once, the names resolved."""

from __future__ import annotations

from pathlib import Path

from unstall.cli.resolvers import sparse as resolve
from unstall.sparse.cnn import FolderImages


def test_analyze_run_labels_what_the_user_typed(tmp_path: Path) -> None:
    from PIL import Image

    for label in ("a", "b"):
        (tmp_path / label).mkdir()
        Image.new("RGB", (8, 8)).save(tmp_path / label / "0.png")
    run = resolve.analyze_run(
        model="resnet18", image_size=32, steps=1, warmup_steps=0, batch_size=2, array="8x8",
        dataflow="os", skipping="lockstep", lookahead=None, compare="ws/per-row",
        bn_gradient="folded", data=str(tmp_path) + "/", lr=0.01, seed=0,
    )  # fmt: skip
    assert isinstance(run.data, FolderImages) and run.data.num_classes == 2
    assert run.config.analyzer.model == "resnet18"
    assert run.config.analyzer.data == str(tmp_path)  # as a path, like the folder's label
    assert run.data.label == run.config.analyzer.data
    assert run.config.compare[0].label == "8x8 ws, per-row unbounded, bn=folded"
    assert run.model().fc.out_features == 2  # type: ignore[union-attr]
