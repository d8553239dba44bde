"""CNN sparsity analyser: how sparse a CNN's forward and backward passes are in training, and what
a systolic array that skips the zeros would gain.

What this offers:

- :func:`analyze_cnn` (model, images, :class:`CNNSparsityConfig`) -> :class:`CNNSparsityResult`:
  trains the model for ``warmup_steps`` SGD steps, records the next ``steps`` layer by layer
  (input-activation density, output-gradient density, the share of its zeros the forward ReLU
  mask predicts; :class:`LayerSparsity`) and predicts the cycles and speed-ups of every GEMM of
  the step on an :class:`AcceleratorConfig` (forward, input gradient, weight gradient,
  back-propagation over dense and over input sparsity only; :class:`ModelSpeed`), and on each
  other array of ``compare``.
- :func:`profile_training` does the training and recording only (:class:`SparsityProfile`);
  :func:`record_step` records one forward/backward pass of any model.
- The accelerator model: an :class:`ArrayConfig` (rows x cols, dataflow of :data:`DATAFLOWS`)
  with SCALE-Sim v3's dense cycles (:func:`dense_gemm_cycles`), and a zero-skipping model of
  :data:`SKIPPING_MODELS` (``lockstep`` or ``per-row`` with a lookahead buffer).
- Images: :class:`PatternImages` (learnable synthetic classes, the default) or
  :class:`FolderImages` (a ``root/<class>/<image>`` tree); any :class:`ImageSource` works.

The model is an ``nn.Module`` or a function that builds one (called under the run's seed); the
configs are plain data (their ``model`` and ``data`` fields are labels for the result).

>>> from torch import nn
>>> from unstall.sparse.cnn import AcceleratorConfig, AnalyzerConfig, ArrayConfig
>>> from unstall.sparse.cnn import CNNSparsityConfig, analyze_cnn
>>> def small_cnn() -> nn.Module:
...     return nn.Sequential(
...         nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
...         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10),
...     )
>>> config = CNNSparsityConfig(
...     analyzer=AnalyzerConfig(model="small", image_size=8, batch_size=4),
...     accelerator=AcceleratorConfig(array=ArrayConfig(rows=8, cols=8), skipping="per-row"),
... )
>>> result = analyze_cnn(small_cnn, config=config)
>>> [(r.sparsity.name, r.sparsity.activation) for r in result.layers]
[('0', 'relu'), ('2', 'relu'), ('6', 'none')]
>>> 0 < result.layers[1].sparsity.input_density < 1  # the first ReLU's zeros
True
>>> result.array, result.skipping, result.backprop_speedup_vs_dense > 1
('8x8 os', 'per-row unbounded', True)
"""

from unstall.sparse.cnn.accelerator import (
    SKIPPING_MODELS,
    AcceleratorConfig,
    LayerSpeed,
    ModelSpeed,
)
from unstall.sparse.cnn.analysis import (
    PUBLISHED_BACKPROP_SPEEDUP_VS_DENSE,
    PUBLISHED_SPEEDUP_VS_SPARSITY_AGNOSTIC,
    CNNSparsityConfig,
    CNNSparsityResult,
    Comparison,
    LayerRecord,
    analyze_cnn,
)
from unstall.sparse.cnn.data import FolderImages, ImageSource, PatternConfig, PatternImages
from unstall.sparse.cnn.densities import LayerSparsity
from unstall.sparse.cnn.recording import LayerTensors, record_step
from unstall.sparse.cnn.scalesim_adapter import DATAFLOWS, ArrayConfig, dense_gemm_cycles
from unstall.sparse.cnn.training import (
    AnalyzerConfig,
    SparsityProfile,
    TrainingSummary,
    profile_training,
)

__all__ = [
    "DATAFLOWS",
    "PUBLISHED_BACKPROP_SPEEDUP_VS_DENSE",
    "PUBLISHED_SPEEDUP_VS_SPARSITY_AGNOSTIC",
    "SKIPPING_MODELS",
    "AcceleratorConfig",
    "AnalyzerConfig",
    "ArrayConfig",
    "CNNSparsityConfig",
    "CNNSparsityResult",
    "Comparison",
    "FolderImages",
    "ImageSource",
    "LayerRecord",
    "LayerSparsity",
    "LayerSpeed",
    "LayerTensors",
    "ModelSpeed",
    "PatternConfig",
    "PatternImages",
    "SparsityProfile",
    "TrainingSummary",
    "analyze_cnn",
    "dense_gemm_cycles",
    "profile_training",
    "record_step",
]
