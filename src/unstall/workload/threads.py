"""Torch's intra-op thread count for a section of code, restored after it (the parameter
server's reference run and the structured LSTM's streams both run sections on one thread)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """Run torch on ``count`` threads inside the block, then restore the caller's count (also
    when the block raises). The count is per thread for MKL/OpenMP but ``torch.get_num_threads``
    reads the process-wide value, so a block run on one thread shows ``count`` to others too."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)
