"""Sparse training: compute that skips the values that are zero or dropped.

Two subjects, one subpackage each (their front doors list everything they offer):

- :mod:`unstall.sparse.lstm`, the structured-dropout LSTM. :class:`StructuredDropoutLSTM` is a
  drop-in for ``nn.LSTM`` whose dropout, in ``mode="structured"``, drops the same hidden units
  for the whole batch at each step (a fresh set every step) and computes only the kept units: the
  GEMMs shrink in forward and backward. :data:`DROPOUT_MODES`: ``standard`` (elementwise),
  ``locked`` (variational), ``structured``, ``structured-window``. :func:`train_lm` trains a
  word-level language model on Penn Treebank (:func:`load_ptb`); :func:`bench_lstm_step` times
  a training step per mode.
- :mod:`unstall.sparse.cnn`, the CNN sparsity analyser. :func:`analyze_cnn` trains a CNN (a
  model, or a function that builds one) for a while on images (default: learnable synthetic
  classes), records per layer the input-activation and output-gradient densities, and predicts
  the speed-ups of a zero-skipping systolic array (:class:`AcceleratorConfig`: an
  :class:`ArrayConfig` with SCALE-Sim v3 dense cycles, a skipping model of
  :data:`SKIPPING_MODELS`); it returns a :class:`CNNSparsityResult`.

>>> import torch
>>> from torch import nn
>>> from unstall.sparse import StructuredDropoutLSTM, AnalyzerConfig, CNNSparsityConfig, analyze_cnn
>>> lstm = StructuredDropoutLSTM(8, 16, dropout=0.5, mode="structured")
>>> out, (h, c) = lstm(torch.randn(5, 3, 8))  # (steps, batch, features), as nn.LSTM
>>> tuple(out.shape)
(5, 3, 16)
>>> def small_cnn() -> nn.Module:
...     return nn.Sequential(
...         nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
...         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10),
...     )
>>> config = CNNSparsityConfig(analyzer=AnalyzerConfig(model="small", image_size=8, batch_size=4))
>>> result = analyze_cnn(small_cnn, config=config)  # default: a 32x32 os array, lockstep skipping
>>> result.model, len(result.layers), result.array
('small', 3, '32x32 os')
>>> result.summary.cycles["forward"]["dense"] >= result.summary.cycles["forward"]["full"]
True
"""

from unstall.sparse.cnn import (
    DATAFLOWS,
    SKIPPING_MODELS,
    AcceleratorConfig,
    AnalyzerConfig,
    ArrayConfig,
    CNNSparsityConfig,
    CNNSparsityResult,
    FolderImages,
    ImageSource,
    ModelSpeed,
    PatternImages,
    SparsityProfile,
    analyze_cnn,
    profile_training,
)
from unstall.sparse.lstm import (
    DROPOUT_MODES,
    LMConfig,
    LMTrainResult,
    LSTMBenchConfig,
    LSTMBenchResult,
    StructuredDropoutLSTM,
    bench_lstm_step,
    load_ptb,
    train_lm,
)

__all__ = [
    "DATAFLOWS",
    "DROPOUT_MODES",
    "SKIPPING_MODELS",
    "AcceleratorConfig",
    "AnalyzerConfig",
    "ArrayConfig",
    "CNNSparsityConfig",
    "CNNSparsityResult",
    "FolderImages",
    "ImageSource",
    "LMConfig",
    "LMTrainResult",
    "LSTMBenchConfig",
    "LSTMBenchResult",
    "ModelSpeed",
    "PatternImages",
    "SparsityProfile",
    "StructuredDropoutLSTM",
    "analyze_cnn",
    "bench_lstm_step",
    "load_ptb",
    "profile_training",
    "train_lm",
]
