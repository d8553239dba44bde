"""Batches on a device: what every part that trains on a GPU (the parameter server's workers,
the live backend's jobs) does to a batch before its forward pass."""

from __future__ import annotations

from typing import Any

import torch


def to_device(value: Any, device: torch.device) -> Any:
    """``value`` (a batch's inputs or targets) with its tensors on ``device``: a tensor, or
    one inside lists, tuples (named ones too) and dicts; anything else as it is."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(to_device(v, device) for v in value))
    if isinstance(value, list | tuple):
        return type(value)(to_device(v, device) for v in value)
    return value
