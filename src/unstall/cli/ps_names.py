"""The parameter server's names and defaults that `unstall ps --help` shows, written out here so
that the command line starts without importing :mod:`unstall.ps` (which imports torch, Ray and
SciPy: 1.7 s of every `unstall` command, `trace show` and `sim run` included). The ``ps``
commands import the package when they run. tests/cli/test_ps_names.py checks every value
against the registries and configs it stands for."""

from __future__ import annotations

STRATEGY_NAMES = ("mxnet", "byteps", "tf-greedy", "round-robin", "oracle", "psld")
SCENARIO_NAMES = ("none", "bandwidth", "interference", "imbalance", "dynamic", "mixed")
LOSS_NAMES = ("cross_entropy", "mse")
OPTIMIZER_NAMES = ("sgd", "adam")
DATA_SOURCE_NAMES = ("synthetic", "digits")
SGD_LR = 0.05
SGD_MOMENTUM = 0.9
ADAM_LR = 0.001
