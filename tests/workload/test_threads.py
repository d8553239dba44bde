"""torch_threads: the block runs on the count asked for, and the caller's count comes back,
also when the block raises."""

from __future__ import annotations

import pytest
import torch

from unstall.workload.threads import torch_threads


def test_the_block_runs_on_the_count_asked_and_the_count_comes_back() -> None:
    before = torch.get_num_threads()
    other = 1 if before != 1 else 2
    with torch_threads(other):
        assert torch.get_num_threads() == other
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError, match="inside"), torch_threads(other):
        raise RuntimeError("inside")
    assert torch.get_num_threads() == before
