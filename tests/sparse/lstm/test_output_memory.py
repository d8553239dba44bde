"""Output memory kept from call to call (``OutputMemory``, the language model's logits): the
values and gradients equal those of new memory to the bit, in every mode and over calls of
different shapes (a shorter last batch included); the memory is allocated once; every output
is a tensor of its own (version counter, autograd history) whose memory the next call reuses."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from unstall.sparse.lstm.kernels import OutputMemory, masked_linear
from unstall.sparse.lstm.masks import sample_mask

pytestmark = pytest.mark.usefixtures("one_torch_thread")

VOCAB, HID = 23, 6


def linear_run(
    mode: str | None, steps: int, seed: int, memory: OutputMemory | None, split: bool | None
) -> list[Tensor]:
    """Output, input gradient, weight gradient and bias gradient of one decoder call."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(steps, 3, HID, generator=gen).requires_grad_()
    weight = torch.randn(VOCAB, HID, generator=gen).requires_grad_()
    bias = torch.randn(VOCAB, generator=gen).requires_grad_()
    mask = None if mode is None else sample_mask(mode, steps, 3, HID, 0.5, gen)
    out = masked_linear(x, weight, bias, mask, split, memory)
    values = out.detach().clone()  # the next call with this memory overwrites out
    out.backward(torch.randn(out.shape, generator=gen))
    assert x.grad is not None and weight.grad is not None and bias.grad is not None
    return [values, x.grad, weight.grad, bias.grad]


CASES = [
    ("standard", None),
    ("locked", None),
    ("structured", False),
    ("structured", True),
    ("structured-window", None),
    (None, None),
]


@pytest.mark.parametrize(("mode", "split"), CASES)
def test_kept_memory_gives_the_values_and_gradients_of_new_memory(
    mode: str | None, split: bool | None
) -> None:
    memory = OutputMemory()
    for seed, steps in enumerate((5, 2, 5, 4)):  # shorter, then as long again
        fresh = linear_run(mode, steps, seed, None, split)
        kept = linear_run(mode, steps, seed, memory, split)
        for name, got, want in zip(("out", "dx", "dw", "db"), kept, fresh, strict=True):
            assert torch.equal(got, want), (mode, steps, name)


def test_the_largest_shape_is_allocated_once_and_smaller_ones_use_its_start() -> None:
    memory, like = OutputMemory(), torch.empty(0)
    first = memory.take((4, 3, 5), like)
    first.fill_(1.0)
    second = memory.take((2, 3, 5), like)
    assert second.data_ptr() == first.data_ptr()
    assert second.is_contiguous() and second.shape == (2, 3, 5)
    assert torch.equal(second, torch.ones(2, 3, 5))  # the same memory, not a copy
    larger = memory.take((5, 3, 5), like)
    assert larger.shape == (5, 3, 5) and larger.is_contiguous()
    assert memory.take((4, 3, 5), like).data_ptr() == larger.data_ptr()


def test_a_new_dtype_gets_new_memory() -> None:
    memory = OutputMemory()
    floats = memory.take((2, 3), torch.empty(0))
    doubles = memory.take((2, 3), torch.empty(0, dtype=torch.float64))
    assert doubles.dtype == torch.float64 and doubles.data_ptr() != floats.data_ptr()


@pytest.mark.parametrize("mode", ["standard", "structured"])
def test_each_output_has_a_version_and_history_of_its_own(mode: str) -> None:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(4, 3, HID, generator=gen).requires_grad_()
    weight = torch.randn(VOCAB, HID, generator=gen).requires_grad_()
    bias = torch.zeros(VOCAB, requires_grad=True)
    memory = OutputMemory()
    outs = []
    for _ in range(2):
        mask = sample_mask(mode, 4, 3, HID, 0.5, gen)
        outs.append(masked_linear(x, weight, bias, mask, None, memory))
    first, second = outs
    assert first.data_ptr() == second.data_ptr()  # the second call reused the memory
    assert first.grad_fn is not second.grad_fn
    version = first._version
    second.detach().zero_()  # a write through the second output's alias
    assert first._version == version
    assert not first._is_view() and not second._is_view()
