"""The decoder as two single-threaded streams of column tiles (``SplitDecoder``): values and
gradients equal the dense masked reference and float64 gradcheck, the output and the weight
gradient equal the one-thread tiled decoder's to the bit (the input gradient, summed in two
halves, within rounding), runs repeat to the bit, the thread count comes back, and the default
turns it on only where it is meant to."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from unstall.sparse.lstm import projections, streams
from unstall.sparse.lstm.kernels import masked_linear
from unstall.sparse.lstm.masks import StructuredMask, sample_mask
from unstall.sparse.lstm.pipelined import SplitDecoder
from unstall.workload.threads import torch_threads

F64 = torch.float64


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def decoder_inputs(
    steps: int, batch: int, hid: int, vocab: int, dtype: torch.dtype = F64
) -> list[Tensor]:
    g = gen(5)
    shapes = ((steps, batch, hid), (vocab, hid), (vocab,))
    return [torch.randn(*s, generator=g, dtype=dtype).requires_grad_() for s in shapes]


def structured(steps: int, batch: int, hid: int, held: int = 1) -> StructuredMask:
    mask = sample_mask("structured", steps, batch, hid, 0.5, gen(6), steps_per_set=held)
    assert isinstance(mask, StructuredMask)
    return mask


def run(tensors: list[Tensor], mask: StructuredMask, split: bool) -> list[Tensor]:
    out = masked_linear(*tensors, mask, split=split)
    d_out = torch.randn(out.shape, generator=gen(4), dtype=out.dtype)
    return [out, *torch.autograd.grad(out, tensors, d_out)]


@pytest.mark.parametrize(("vocab", "held"), [(11, 1), (11, 3), (4, 1), (1, 1)])
def test_split_decoder_matches_the_dense_reference_and_gradcheck(
    vocab: int, held: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tiles of 4 words: 11 words split 8 | 3 (two tiles and one); 4 words (one tile) 2 | 2;
    one word 0 | 1 (one half empty)."""
    monkeypatch.setattr(projections, "TILE_COLUMNS", 4)
    steps, batch, hid = 6, 3, 8
    tensors = decoder_inputs(steps, batch, hid, vocab)
    x, weight, bias = tensors
    mask = structured(steps, batch, hid, held)
    ref = torch.nn.functional.linear(x * mask.dense(steps, batch), weight, bias)
    d_out = torch.randn(ref.shape, generator=gen(4), dtype=F64)
    theirs = [ref, *torch.autograd.grad(ref, tensors, d_out)]
    for got, want in zip(run(tensors, mask, split=True), theirs, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    assert torch.autograd.gradcheck(
        lambda *t: masked_linear(*t, mask, split=True), tuple(tensors), fast_mode=True
    )


def test_the_halves_own_disjoint_tiles_split_on_a_tile_boundary(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(projections, "TILE_COLUMNS", 4)
    weight = torch.randn(21, 8, generator=gen(1))  # 6 tiles: 3 | 3, the last 1 word wide
    decoder = SplitDecoder(weight, structured(4, 2, 8))
    a, b = decoder.halves
    assert (a.columns, b.columns) == (slice(0, 12), slice(12, 21))
    assert [c.stop - c.start for c in a.cols + b.cols] == [4, 4, 4, 4, 4, 1]


def test_split_equals_the_one_thread_tiled_decoder_and_repeats_to_the_bit() -> None:
    # The PTB shapes' vocabulary (10k words: ten 1,024-word tiles, 5 | 5) on a short sequence.
    steps, batch, hid, vocab = 4, 8, 64, 10_000
    tensors = decoder_inputs(steps, batch, hid, vocab, torch.float32)
    mask = structured(steps, batch, hid)
    with torch_threads(1):
        assert isinstance(
            projections.make_projection(tensors[1], mask, steps),
            projections.TiledCompactProjection,
        )
        tiled = run(tensors, mask, split=False)
    split, again = run(tensors, mask, split=True), run(tensors, mask, split=True)
    for name, got, want, repeat in zip(["out", "dx", "dw", "db"], split, tiled, again, strict=True):
        assert torch.equal(got, repeat), name  # deterministic
        if name == "dx":  # sums of 10k products, two halves summed once at the end: rounding
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        else:
            assert torch.equal(got, want), name


@pytest.mark.parametrize("threads", [1, 2])
def test_the_callers_thread_count_comes_back(threads: int) -> None:
    with torch_threads(threads):
        tensors = decoder_inputs(3, 2, 6, 9)
        out = masked_linear(*tensors, structured(3, 2, 6), split=True)
        assert torch.get_num_threads() == threads
        out.sum().backward()
        assert torch.get_num_threads() == threads


def test_split_by_default_only_with_two_threads_on_a_vocabulary_wide_output() -> None:
    cpu, wide = torch.device("cpu"), projections.TILED_MIN_COLUMNS
    with torch_threads(2):
        assert streams.use_split_decoder(None, cpu, wide)
        assert not streams.use_split_decoder(None, cpu, wide - 1)
        assert not streams.use_split_decoder(False, cpu, wide)
        assert streams.use_split_decoder(True, cpu, 11)
    with torch_threads(1):
        assert not streams.use_split_decoder(None, cpu, wide)
    assert not streams.use_split_decoder(True, torch.device("meta"), wide)


@pytest.mark.parametrize("split", [True, False])
def test_a_step_that_keeps_no_unit_outputs_the_bias(
    split: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step with nothing kept outputs the bias, and no gradient reaches its inputs."""
    monkeypatch.setattr(projections, "TILE_COLUMNS", 4)
    monkeypatch.setattr(projections, "TILED_MIN_COLUMNS", 8)  # one thread: tiles without split
    steps, batch, hid, vocab = 3, 2, 5, 11
    tensors = decoder_inputs(steps, batch, hid, vocab)
    keep = (torch.tensor([0, 3]), torch.tensor([], dtype=torch.long), torch.arange(5))
    mask = StructuredMask(keep=keep, size=hid, scale=2.0)
    x, weight, bias = tensors
    ref = torch.nn.functional.linear(x * mask.dense(steps, batch), weight, bias)
    d_out = torch.randn(ref.shape, generator=gen(4), dtype=F64)
    theirs = [ref, *torch.autograd.grad(ref, tensors, d_out)]
    with torch_threads(1):
        ours = run(tensors, mask, split=split)
    torch.testing.assert_close(ours[0][1], bias.detach().expand(batch, vocab))
    for got, want in zip(ours, theirs, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
