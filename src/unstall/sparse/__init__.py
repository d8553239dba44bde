"""Sparse training: structured-dropout LSTM that skips the dropped units; CNN sparsity analysis."""
