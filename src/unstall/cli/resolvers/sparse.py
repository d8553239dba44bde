"""Command-line options of ``unstall sparse analyze`` into what :func:`unstall.sparse.analyze_cnn`
takes: a model function, an image source, a loss and a plain :class:`CNNSparsityConfig`, built
once from the options (the names in them are :mod:`unstall.sparse.cnn.names`'s).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import cast

from unstall.sparse.cnn import AcceleratorConfig, AnalyzerConfig, CNNSparsityConfig, ImageSource
from unstall.sparse.cnn.accelerator import BnGradient, SkippingModel
from unstall.sparse.cnn.names import (
    accelerators,
    array_config,
    check_zoo_cnn,
    cnn_loss,
    cnn_model,
    image_source,
)
from unstall.sparse.cnn.training import CNNModel, LossFn
from unstall.usercode import is_reference


@dataclass(frozen=True, kw_only=True)
class AnalyzeRun:
    """What ``unstall sparse analyze`` hands :func:`unstall.sparse.analyze_cnn`."""

    model: CNNModel
    data: ImageSource | None
    loss: LossFn | None
    config: CNNSparsityConfig


def analyze_run(
    *,
    model: str,
    image_size: int,
    steps: int,
    warmup_steps: int,
    batch_size: int,
    array: str,
    dataflow: str,
    skipping: str,
    lookahead: int | None,
    compare: str,
    bn_gradient: str,
    data: str | None,
    lr: float,
    seed: int,
) -> AnalyzeRun:
    """The objects and config of an ``analyze`` run from its options; the cheap checks first,
    the image folder (read here) last."""
    main = AcceleratorConfig(
        array=array_config(array, dataflow),
        skipping=cast(SkippingModel, skipping),
        lookahead=lookahead,
        bn_gradient=cast(BnGradient, bn_gradient),
    )
    config = CNNSparsityConfig(
        analyzer=AnalyzerConfig(
            model=model,
            image_size=image_size,
            batch_size=batch_size,
            steps=steps,
            warmup_steps=warmup_steps,
            data=str(Path(data)) if data is not None else None,
            lr=lr,
            seed=seed,
        ),
        accelerator=main,
        compare=accelerators(compare, main),
    )
    if not is_reference(model):
        check_zoo_cnn(model, image_size)
    source = image_source(data, image_size)
    classes = source.num_classes if source is not None else config.analyzer.num_classes
    return AnalyzeRun(
        model=cnn_model(model, image_size=image_size, num_classes=classes),
        data=source,
        loss=cnn_loss(model),
        config=config,
    )
