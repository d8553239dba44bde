"""The simulator commands' own text: ``KEY=VALUE`` pairs and ``--model-mix``."""

from __future__ import annotations

import pytest

from unstall.cli.sim_text import parse_model_mix, parse_pairs
from unstall.errors import ConfigError


def test_text_pairs_and_model_mix() -> None:
    assert parse_pairs(["a=1", " b = two "], "--opt", "KEY=VALUE") == (("a", "1"), ("b", "two"))
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        parse_pairs(["a"], "--opt", "KEY=VALUE")
    assert parse_model_mix("resnet18=3, vgg16=1") == (("resnet18", 3.0), ("vgg16", 1.0))
    assert parse_model_mix(None) is None
    with pytest.raises(ConfigError, match="NAME=SHARE"):
        parse_model_mix("resnet18=lots")
