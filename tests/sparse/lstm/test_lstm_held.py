"""Structured dropout sets held for several steps (``steps_per_set``): the sets repeat in blocks,
the held input connection is one large product per block, and values and gradients still equal
the dense masked reference (and float64 gradcheck) for the LSTM layer and the decoder, also when
the decoder runs in column tiles."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

from unstall.errors import ConfigError
from unstall.sparse.lstm import StructuredDropoutLSTM, projections
from unstall.sparse.lstm.kernels import LSTMLayerFn, masked_linear, reference_lstm_layer
from unstall.sparse.lstm.masks import LayerMasks, StructuredMask, WindowMask, sample_mask
from unstall.sparse.lstm.projections import TiledCompactProjection, make_projection

F64 = torch.float64
STRUCTURED = ["structured", "structured-window"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("mode", STRUCTURED)
def test_a_held_set_repeats_for_its_steps_and_changes_between_blocks(mode: str) -> None:
    mask = sample_mask(mode, 7, 4, 40, 0.5, gen(1), steps_per_set=3)
    assert isinstance(mask, StructuredMask | WindowMask)
    kept = mask.dense(7, 4)[:, 0] > 0  # (steps, units); the batch shares it
    for block in ((0, 1, 2), (3, 4, 5), (6,)):
        assert all(torch.equal(kept[t], kept[block[0]]) for t in block)
    assert not torch.equal(kept[0], kept[3]) and not torch.equal(kept[3], kept[6])
    if isinstance(mask, StructuredMask):
        assert len(mask.keep) == 3
        assert [(s.start, s.stop) for s, _ in mask.blocks(7)] == [(0, 3), (3, 6), (6, 7)]


def test_one_step_per_set_draws_what_the_fresh_mask_always_drew() -> None:
    fresh = sample_mask("structured", 6, 2, 30, 0.5, gen(2))
    held = sample_mask("structured", 6, 2, 30, 0.5, gen(2), steps_per_set=1)
    assert isinstance(fresh, StructuredMask) and isinstance(held, StructuredMask)
    assert all(torch.equal(a, b) for a, b in zip(fresh.keep, held.keep, strict=True))


def test_a_mask_with_the_wrong_number_of_sets_is_refused() -> None:
    mask = sample_mask("structured", 6, 2, 30, 0.5, gen(3), steps_per_set=2)
    assert isinstance(mask, StructuredMask)
    with pytest.raises(ConfigError, match="keep"):
        mask.dense(9, 2)  # 9 steps need 5 sets of 2, the mask has 3
    with pytest.raises(ConfigError, match="steps_per_set"):
        sample_mask("structured", 6, 2, 30, 0.5, gen(3), steps_per_set=0)
    with pytest.raises(ConfigError, match="input_mask_steps"):
        StructuredDropoutLSTM(4, 4, input_mask_steps=0)


def layer_tensors(steps: int, batch: int, inp: int, hid: int) -> list[Tensor]:
    g = gen(9)
    shapes = ((steps, batch, inp), (batch, hid), (batch, hid), (4 * hid, inp), (4 * hid, hid))
    tensors = [torch.randn(*s, generator=g, dtype=F64, requires_grad=True) for s in shapes]
    return [*tensors, torch.randn(4 * hid, generator=g, dtype=F64, requires_grad=True)]


@pytest.mark.parametrize("mode", STRUCTURED)
@pytest.mark.parametrize("held", [2, 5])
def test_held_input_layer_matches_the_dense_reference_and_gradcheck(mode: str, held: int) -> None:
    steps, batch, inp, hid = 5, 3, 6, 4
    masks = LayerMasks(
        input=sample_mask(mode, steps, batch, inp, 0.5, gen(7), steps_per_set=held),
        recurrent=sample_mask(mode, steps, batch, hid, 0.5, gen(8)),
    )
    tensors = layer_tensors(steps, batch, inp, hid)
    x, h0, c0, w_ih, w_hh, b = tensors
    out, h_n, c_n = LSTMLayerFn.apply(*tensors, masks)
    dense = [m.dense(steps, batch).to(F64) for m in (masks.input, masks.recurrent)]  # type: ignore[union-attr]
    ref = reference_lstm_layer(x, h0, c0, (w_ih, w_hh, b, torch.zeros_like(b)), *dense)
    for a, r in zip((out, h_n, c_n), ref, strict=True):
        torch.testing.assert_close(a, r, rtol=1e-12, atol=1e-12)
    weight = torch.randn(out.shape, generator=gen(4), dtype=F64)
    mine = torch.autograd.grad((out * weight).sum(), tensors)
    theirs = torch.autograd.grad((ref[0] * weight).sum(), tensors)
    for a, r in zip(mine, theirs, strict=True):
        torch.testing.assert_close(a, r, rtol=1e-10, atol=1e-12)

    def layer(*args: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return LSTMLayerFn.apply(*args, masks)  # type: ignore[no-any-return]

    assert torch.autograd.gradcheck(layer, tuple(tensors), fast_mode=True)


@pytest.mark.parametrize(("held", "tiles"), [(4, False), (1, True), (4, True)])
def test_decoder_matches_the_dense_reference_and_gradcheck(
    held: int, tiles: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fresh or held sets; with ``tiles``, one thread and W^T in column tiles (4, 4, 3 words)."""
    if tiles:
        monkeypatch.setattr(projections, "TILED_MIN_COLUMNS", 8)
        monkeypatch.setattr(projections, "TILE_COLUMNS", 4)
    steps, batch, hid, vocab = 6, 3, 8, 11
    g = gen(5)
    x = torch.randn(steps, batch, hid, generator=g, dtype=F64, requires_grad=True)
    weight = torch.randn(vocab, hid, generator=g, dtype=F64, requires_grad=True)
    bias = torch.randn(vocab, generator=g, dtype=F64, requires_grad=True)
    mask = sample_mask("structured", steps, batch, hid, 0.5, gen(6), steps_per_set=held)
    assert isinstance(mask, StructuredMask)
    tiled = isinstance(make_projection(weight, mask, steps), TiledCompactProjection)
    assert tiled == tiles
    out = masked_linear(x, weight, bias, mask)
    ref = torch.nn.functional.linear(x * mask.dense(steps, batch), weight, bias)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    d_out = torch.randn(out.shape, generator=g, dtype=F64)
    mine = torch.autograd.grad(out, (x, weight, bias), d_out)
    theirs = torch.autograd.grad(ref, (x, weight, bias), d_out)
    for a, r in zip(mine, theirs, strict=True):
        torch.testing.assert_close(a, r, rtol=1e-10, atol=1e-12)
    assert torch.autograd.gradcheck(
        lambda *t: masked_linear(*t, mask), (x, weight, bias), fast_mode=True
    )


class ProductShapes(TorchDispatchMode):
    """Records (rows, inner) of the left operand of every addmm (the forward products)."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[int, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func.overloadpacket.__name__ in ("addmm", "addmm_"):
            self.shapes.append(tuple(args[1].shape))
        return func(*args, **(kwargs or {}))


def test_held_input_is_one_product_per_block_on_the_kept_columns() -> None:
    steps, batch, width = 12, 4, 32
    model = StructuredDropoutLSTM(width, width, 1, dropout=0.5, input_mask_steps=6)
    with torch.no_grad(), ProductShapes() as seen:
        model(torch.randn(steps, batch, width, generator=gen(10)))
    masks = model.last_masks
    assert masks is not None and isinstance(masks[0].input, StructuredMask)
    kept = [int(k.numel()) for k in masks[0].input.keep]
    # Two input products of 6 steps x 4 samples on each block's kept units; then the recurrence,
    # one small product per step on a fresh set.
    assert seen.shapes[:2] == [(24, kept[0]), (24, kept[1])]
    assert len(seen.shapes) == 2 + steps
    assert all(rows == batch and inner < width for rows, inner in seen.shapes[2:])
