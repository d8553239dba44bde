"""Train a CNN for a while, record its forward/backward sparsity, predict a zero-skipping array's
speed-ups: the ``unstall sparse analyze`` run, as :func:`analyze_cnn`.

The front door :mod:`unstall.sparse.cnn` shows a run end to end.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from unstall.results import JsonResult
from unstall.sparse.cnn.accelerator import (
    AcceleratorConfig,
    CycleCounter,
    LayerSpeed,
    ModelSpeed,
    model_speed,
)
from unstall.sparse.cnn.data import ImageSource
from unstall.sparse.cnn.densities import LayerSparsity
from unstall.sparse.cnn.names import cnn_loss, cnn_model, image_source
from unstall.sparse.cnn.recording import LayerTensors
from unstall.sparse.cnn.training import (
    AnalyzerConfig,
    CNNModel,
    LossFn,
    TrainingSummary,
    profile_training,
)

# The published figures this model is compared with: Sarma et al., "Exploiting Activation based
# Gradient Output Sparsity to Accelerate Backpropagation in CNNs" (arXiv:2109.07710, 2021),
# five CNNs on ImageNet on their micro-architecture.
PUBLISHED_BACKPROP_SPEEDUP_VS_DENSE = (1.69, 5.43)
PUBLISHED_SPEEDUP_VS_SPARSITY_AGNOSTIC = (1.68, 3.30)


@dataclass(frozen=True, kw_only=True)
class CNNSparsityConfig:
    """What to train and record, and the array to predict for."""

    analyzer: AnalyzerConfig = field(default_factory=AnalyzerConfig)
    accelerator: AcceleratorConfig = field(default_factory=AcceleratorConfig)
    # Other dataflows or skipping models to predict from the same recorded steps (model totals).
    compare: tuple[AcceleratorConfig, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Comparison(JsonResult):
    """The model's speed-ups on another dataflow or skipping model."""

    accelerator: str  # AcceleratorConfig.label
    dataflow: str
    skipping: str  # AcceleratorConfig.skipping_label
    summary: ModelSpeed
    conv_summary: ModelSpeed  # the convolution layers only (at small image sizes the fully
    # connected layers of AlexNet and VGG hold most of the work; at 224 px they do not)


@dataclass(frozen=True, kw_only=True)
class LayerRecord(JsonResult):
    """One layer: its measured sparsity and its predicted cycles and speed-ups."""

    sparsity: LayerSparsity
    speed: LayerSpeed


@dataclass(frozen=True, kw_only=True)
class CNNSparsityResult(JsonResult):
    """Per-layer records and the model's predicted speed-ups (full sparsity over dense and over
    input sparsity only, for back-propagation)."""

    model: str
    image_size: int
    batch_size: int
    data: str
    array: str
    skipping: str  # AcceleratorConfig.skipping_label
    bn_gradient: str
    backprop_speedup_vs_dense: float
    speedup_vs_input_only: float
    summary: ModelSpeed
    conv_summary: ModelSpeed  # the convolution layers only
    comparisons: tuple[Comparison, ...]
    training: TrainingSummary
    layers: tuple[LayerRecord, ...]


def analyze_cnn(
    model: CNNModel | str,
    data: ImageSource | str | Path | None = None,
    *,
    config: CNNSparsityConfig | None = None,
    loss: LossFn | None = None,
    progress: Callable[[int], None] | None = None,
    cache_dir: Path | None = None,
) -> CNNSparsityResult:
    """Train ``model`` on ``data`` as ``config.analyzer`` says, record its last steps, and predict
    the speed-ups of ``config.accelerator`` (and of each of ``config.compare``) from them.

    ``model``, ``data`` and ``loss`` are as for
    :func:`~unstall.sparse.cnn.training.profile_training` (a model or a function that builds one;
    default synthetic classes; default cross-entropy), or names (:mod:`unstall.sparse.cnn.names`):
    a zoo image CNN (``"resnet18"``, built for the config's image size and the data's classes,
    with its own loss) or user code ``FILE.py:NAME``; an image folder's path. ``progress(n)`` is
    called as steps finish; with ``cache_dir`` the training resumes from (and saves) checkpoints
    there.
    """
    config = config if config is not None else CNNSparsityConfig()
    if isinstance(data, str | Path):
        data = image_source(str(data), config.analyzer.image_size)
    if isinstance(model, str):
        classes = data.num_classes if data is not None else config.analyzer.num_classes
        loss = loss if loss is not None else cnn_loss(model)
        model = cnn_model(model, image_size=config.analyzer.image_size, num_classes=classes)
    counter = CycleCounter(config.accelerator)
    others = [CycleCounter(acc) for acc in config.compare]

    def observe(record: LayerTensors) -> None:
        for c in (counter, *others):
            c.observe(record)

    profile = profile_training(
        model,
        data,
        config=config.analyzer,
        loss=loss,
        on_layer=observe,
        progress=progress,
        cache_dir=cache_dir,
    )
    records = tuple(
        LayerRecord(sparsity=layer, speed=counter.layer_speed(layer.name))
        for layer in profile.layers
    )
    summary = model_speed([r.speed for r in records])
    convs = [layer.name for layer in profile.layers if layer.kind == "conv"]
    acc = config.accelerator
    return CNNSparsityResult(
        model=profile.model,
        image_size=profile.image_size,
        batch_size=profile.batch_size,
        data=profile.data,
        array=acc.array.label,
        skipping=acc.skipping_label,
        bn_gradient=acc.bn_gradient,
        backprop_speedup_vs_dense=summary.backprop_speedup_vs_dense,
        speedup_vs_input_only=summary.speedup_vs_input_only,
        summary=summary,
        conv_summary=model_speed([counter.layer_speed(name) for name in convs]),
        comparisons=tuple(
            Comparison(
                accelerator=c.config.label,
                dataflow=c.config.array.dataflow,
                skipping=c.config.skipping_label,
                summary=model_speed([c.layer_speed(layer.name) for layer in profile.layers]),
                conv_summary=model_speed([c.layer_speed(name) for name in convs]),
            )
            for c in others
        ),
        training=profile.training,
        layers=records,
    )
