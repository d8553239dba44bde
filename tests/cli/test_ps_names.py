"""The names and defaults `unstall ps --help` shows without importing unstall.ps are the
registries' and configs' own."""

from __future__ import annotations

import subprocess
import sys

from unstall.cli import ps_names


def test_the_help_names_are_the_registries() -> None:
    from unstall.ps import LOSSES, OPTIMIZERS, SCENARIOS, STRATEGIES, AdamConfig, SGDConfig
    from unstall.ps.names import DATA_SOURCES

    assert tuple(STRATEGIES) == ps_names.STRATEGY_NAMES
    assert tuple(SCENARIOS) == ps_names.SCENARIO_NAMES
    assert tuple(LOSSES) == ps_names.LOSS_NAMES
    assert tuple(OPTIMIZERS) == ps_names.OPTIMIZER_NAMES
    assert tuple(DATA_SOURCES) == ps_names.DATA_SOURCE_NAMES
    assert (SGDConfig.lr, SGDConfig.momentum) == (ps_names.SGD_LR, ps_names.SGD_MOMENTUM)
    assert AdamConfig.lr == ps_names.ADAM_LR


def test_the_command_line_starts_without_torch_or_ray() -> None:
    # Every command paid for importing the parameter server's torch, Ray and SciPy.
    code = "import sys, unstall.cli.app; print(sorted({'torch', 'ray'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
