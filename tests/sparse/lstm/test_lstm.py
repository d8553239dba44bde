"""StructuredDropoutLSTM: equal to nn.LSTM without dropout, equal to a dense masked reference
with dropout (values and gradients, float64 gradcheck), mask statistics, real skipping, errors."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

from unstall.errors import ConfigError
from unstall.sparse.lstm import StructuredDropoutLSTM, projections
from unstall.sparse.lstm.kernels import LSTMLayerFn, reference_lstm_layer
from unstall.sparse.lstm.masks import (
    DenseMask,
    LayerMasks,
    StructuredMask,
    WindowMask,
    sample_mask,
)

MODES = ["standard", "locked", "structured", "structured-window"]
F64 = torch.float64


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def make(mode: str, p: float, *, inp: int = 5, hid: int = 6, layers: int = 2, **kw: object):
    model = StructuredDropoutLSTM(inp, hid, layers, dropout=p, mode=mode, generator=gen(), **kw)
    return model.to(F64)


def twin(model: StructuredDropoutLSTM) -> nn.LSTM:
    ref = nn.LSTM(
        model.input_size, model.hidden_size, model.num_layers, batch_first=model.batch_first
    ).to(F64)
    ref.load_state_dict(model.state_dict())
    return ref


def grads(out: Tensor, tensors: list[Tensor], seed: int = 1) -> list[Tensor]:
    weight = torch.randn(out.shape, generator=gen(seed), dtype=F64)
    return list(torch.autograd.grad((out * weight).sum(), tensors))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("batch_first", [False, True])
def test_p_zero_equals_nn_lstm_values_and_gradients(mode: str, batch_first: bool) -> None:
    model = make(mode, 0.0, batch_first=batch_first)
    ref = twin(model)
    shape = (3, 4, 5) if batch_first else (4, 3, 5)  # batch 3, 4 steps
    x = torch.randn(*shape, generator=gen(2), dtype=F64, requires_grad=True)
    h0 = torch.randn(2, 3, 6, generator=gen(3), dtype=F64)
    c0 = torch.randn(2, 3, 6, generator=gen(4), dtype=F64)
    out, (hn, cn) = model(x, (h0, c0))
    ref_out, (ref_hn, ref_cn) = ref(x, (h0, c0))
    for a, b in ((out, ref_out), (hn, ref_hn), (cn, ref_cn)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    mine = grads(out, [x, *model.parameters()])
    theirs = grads(ref_out, [x, *ref.parameters()])
    for a, b in zip(mine, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("mode", MODES)
def test_eval_mode_drops_nothing_and_matches_nn_lstm(mode: str) -> None:
    model = make(mode, 0.5).eval()
    x = torch.randn(7, 3, 5, generator=gen(5), dtype=F64)
    out, (hn, cn) = model(x)
    ref_out, (ref_hn, ref_cn) = twin(model)(x)
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(hn, ref_hn, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(cn, ref_cn, rtol=1e-12, atol=1e-12)


def reference_forward(model: StructuredDropoutLSTM, x: Tensor, masks: tuple[LayerMasks, ...]):
    """Plain autograd, full-size products, the same masks turned dense."""
    steps, batch, _ = x.shape
    zeros = x.new_zeros(batch, model.hidden_size)
    out = x
    for layer, m in enumerate(masks):
        weights = tuple(
            getattr(model, f"{kind}_l{layer}")
            for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        )
        dense = [
            None if k is None else k.dense(steps, batch).to(F64) for k in (m.input, m.recurrent)
        ]
        out, _, _ = reference_lstm_layer(out, zeros, zeros, weights, dense[0], dense[1])  # type: ignore[arg-type]
    return out


@pytest.mark.parametrize("mode", MODES)
def test_matches_dense_masked_reference_with_the_same_masks(mode: str) -> None:
    model = make(mode, 0.4, inp=7, hid=8)
    x = torch.randn(6, 4, 7, generator=gen(6), dtype=F64, requires_grad=True)
    out, _ = model(x)
    assert model.last_masks is not None
    ref_out = reference_forward(model, x, model.last_masks)
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12)
    params = [x, *model.parameters()]
    for a, b in zip(grads(out, params), grads(ref_out, params), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("threads", [1, 2])
def test_structured_chunked_gathers_match_the_reference(
    threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One thread: kept rows gathered 16 at a time (several chunks a step); two: all at once."""
    monkeypatch.setattr(projections, "GATHER_CHUNK_BYTES", 1)  # the 16-row floor
    torch.set_num_threads(threads)
    model = make("structured", 0.3, inp=40, hid=40, layers=2)
    x = torch.randn(5, 3, 40, generator=gen(17), dtype=F64, requires_grad=True)
    out, _ = model(x)
    assert model.last_masks is not None
    assert max(k.numel() for k in model.last_masks[0].recurrent.keep) > 16  # type: ignore[union-attr]
    ref_out = reference_forward(model, x, model.last_masks)
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12)
    params = [x, *model.parameters()]
    for a, b in zip(grads(out, params), grads(ref_out, params), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_structured_layers_in_column_tiles_match_the_reference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One thread and gate outputs wider than the threshold: every structured product (input, and
    the recurrence step by step) runs in tiles of 7 columns, the last tile narrower."""
    monkeypatch.setattr(projections, "TILED_MIN_COLUMNS", 8)
    monkeypatch.setattr(projections, "TILE_COLUMNS", 7)
    model = make("structured", 0.4, inp=6, hid=5, layers=2)  # 20 gate columns: tiles 7, 7, 6
    x = torch.randn(5, 3, 6, generator=gen(18), dtype=F64, requires_grad=True)
    out, _ = model(x)
    assert model.last_masks is not None
    mask = model.last_masks[0].recurrent
    assert isinstance(mask, StructuredMask)
    weight = model.state_dict()["weight_hh_l0"]
    assert isinstance(
        projections.make_projection(weight, mask, 5), projections.TiledCompactProjection
    )
    ref_out = reference_forward(model, x, model.last_masks)
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12)
    params = [x, *model.parameters()]
    for a, b in zip(grads(out, params), grads(ref_out, params), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_column_tiles_only_with_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(projections, "TILED_MIN_COLUMNS", 8)
    mask = sample_mask("structured", 4, 3, 5, 0.5, gen(19))
    assert isinstance(mask, StructuredMask)
    weight = torch.zeros(8, 5)
    assert isinstance(
        projections.make_projection(weight, mask, 4), projections.TiledCompactProjection
    )
    assert type(projections.make_projection(weight[:7], mask, 4)) is projections.CompactProjection
    torch.set_num_threads(2)
    assert type(projections.make_projection(weight, mask, 4)) is projections.CompactProjection


@pytest.mark.parametrize("mode", MODES)
def test_gradcheck_float64(mode: str) -> None:
    steps, batch, inp, hid = 4, 3, 5, 4
    masks = LayerMasks(
        input=sample_mask(mode, steps, batch, inp, 0.5, gen(7)),
        recurrent=sample_mask(mode, steps, batch, hid, 0.5, gen(8)),
    )
    if isinstance(masks.input, DenseMask):
        masks = LayerMasks(
            input=DenseMask(masks.input.values.to(F64)),
            recurrent=DenseMask(masks.recurrent.values.to(F64)),  # type: ignore[union-attr]
        )
    g = gen(9)
    tensors = [
        torch.randn(*shape, generator=g, dtype=F64, requires_grad=True)
        for shape in ((steps, batch, inp), (batch, hid), (batch, hid), (4 * hid, inp),
                      (4 * hid, hid), (4 * hid,))
    ]  # fmt: skip

    def layer(*args: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return LSTMLayerFn.apply(*args, masks)  # type: ignore[no-any-return]

    assert torch.autograd.gradcheck(layer, tuple(tensors), fast_mode=True)


def test_structured_masks_shared_by_the_batch_and_fresh_every_step() -> None:
    mask = sample_mask("structured", 30, 8, 64, 0.5, gen(10))
    assert isinstance(mask, StructuredMask)
    dense = mask.dense(30, 8)
    assert torch.equal(dense, dense[:, :1].expand_as(dense))  # every sample, same units
    kept = (dense[:, 0] > 0).to(torch.int64)
    assert len({tuple(row.tolist()) for row in kept}) == 30  # a new set every step
    assert 0.4 < kept.double().mean() < 0.6
    assert set(dense.unique().tolist()) == {0.0, 2.0}


def test_window_masks_keep_a_fixed_share_shared_by_the_batch() -> None:
    mask = sample_mask("structured-window", 20, 5, 40, 0.25, gen(11))
    assert isinstance(mask, WindowMask)
    dense = mask.dense(20, 5)
    assert torch.equal(dense, dense[:, :1].expand_as(dense))
    kept = dense[:, 0] > 0
    assert (kept.sum(1) == 30).all()  # exactly 75% of 40 kept at every step
    assert torch.allclose(dense[:, 0].sum(1), torch.full((20,), 40.0, dtype=F64))  # unbiased
    assert len({tuple(row.tolist()) for row in kept}) > 15


def test_locked_masks_fixed_over_time_and_per_sample() -> None:
    mask = sample_mask("locked", 12, 6, 50, 0.5, gen(12))
    assert isinstance(mask, DenseMask)
    dense = mask.dense(12, 6)
    assert torch.equal(dense, dense[:1].expand_as(dense))  # same mask at every step
    assert not torch.equal(dense[0, 0], dense[0, 1])  # samples differ


def test_standard_masks_are_elementwise() -> None:
    mask = sample_mask("standard", 10, 6, 50, 0.3, gen(13))
    assert isinstance(mask, DenseMask)
    dense = mask.dense(10, 6)
    assert not torch.equal(dense[0, 0], dense[0, 1])
    assert not torch.equal(dense[0, 0], dense[1, 0])
    assert abs(float(dense.mean()) - 1.0) < 0.1
    assert sample_mask("standard", 10, 6, 50, 0.0, gen(13)) is None


class MatmulFlops(TorchDispatchMode):
    """Counts 2*M*N*K of every matrix product, in-place and out= variants included."""

    OPS = ("mm", "addmm", "addmm_")

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func.overloadpacket.__name__ in self.OPS:
            a, b = (args[0], args[1]) if func.overloadpacket.__name__ == "mm" else args[1:3]
            self.flops += 2 * a.shape[0] * a.shape[1] * b.shape[1]
        return func(*args, **(kwargs or {}))


def matmul_flops(model: StructuredDropoutLSTM, x: Tensor) -> int:
    with MatmulFlops() as counter:
        out, _ = model(x)
        out.sum().backward()
    return counter.flops


@pytest.mark.parametrize("mode", ["structured", "structured-window"])
def test_structured_modes_really_shrink_the_products(mode: str) -> None:
    """Forward and backward products at p=0.5 cost about half of the standard mode's."""
    x = torch.randn(6, 8, 48, generator=gen(14))
    dense = matmul_flops(StructuredDropoutLSTM(48, 48, 2, dropout=0.5, mode="standard"), x)
    sparse = matmul_flops(StructuredDropoutLSTM(48, 48, 2, dropout=0.5, mode=mode), x)
    assert 0.4 < sparse / dense < 0.6


def test_two_graphs_backward_in_any_order() -> None:
    model = make("structured", 0.5)
    x1 = torch.randn(4, 3, 5, generator=gen(15), dtype=F64, requires_grad=True)
    x2 = torch.randn(4, 3, 5, generator=gen(16), dtype=F64, requires_grad=True)
    out1, _ = model(x1)
    masks1 = model.last_masks
    out2, _ = model(x2)
    (g1,) = grads(out1, [x1])  # the first graph's backward after a second forward pass
    assert masks1 is not None
    (r1,) = grads(reference_forward(model, x1, masks1), [x1])
    torch.testing.assert_close(g1, r1, rtol=1e-10, atol=1e-12)
    assert out2.shape == out1.shape


def test_shapes_batch_first_unbatched_and_state() -> None:
    model = StructuredDropoutLSTM(5, 6, 3, batch_first=True, dropout=0.2)
    out, (hn, cn) = model(torch.randn(4, 7, 5))
    assert out.shape == (4, 7, 6) and hn.shape == (3, 4, 6) and cn.shape == (3, 4, 6)
    out, (hn, cn) = model(torch.randn(7, 5))  # unbatched: (T, I)
    assert out.shape == (7, 6) and hn.shape == (3, 6)
    out2, _ = model(torch.randn(7, 5), (hn, cn))
    assert out2.shape == (7, 6)
    assert set(dict(model.named_parameters())) == set(dict(nn.LSTM(5, 6, 3).named_parameters()))


def test_same_generator_seed_same_masks() -> None:
    x = torch.randn(5, 3, 4, generator=gen(17))
    a = StructuredDropoutLSTM(4, 6, dropout=0.5, generator=gen(3))
    b = StructuredDropoutLSTM(4, 6, dropout=0.5, generator=gen(3))
    torch.testing.assert_close(a(x)[0], b(x)[0])


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"dropout": 1.0}, "dropout"),
        ({"dropout": -0.1}, "dropout"),
        ({"dropout": 0.2, "recurrent_dropout": 1.5}, "recurrent_dropout"),
        ({"mode": "bogus"}, "mode"),
        ({"hidden_size": 0}, "hidden_size"),
    ],
)
def test_bad_arguments_name_the_field(kwargs: dict[str, object], field: str) -> None:
    args: dict[str, object] = {"input_size": 4, "hidden_size": 6, **kwargs}
    with pytest.raises(ConfigError) as info:
        StructuredDropoutLSTM(**args)  # type: ignore[arg-type]
    assert info.value.field == field


def test_wrong_input_width_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="input_size"):
        StructuredDropoutLSTM(4, 6)(torch.randn(3, 2, 5))
