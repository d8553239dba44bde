"""The pipelined structured layer (two single-threaded streams): values and gradients equal the
dense masked reference and float64 gradcheck, equal the serial one-thread kernels to the bit (the
input weight gradient within rounding), the caller's thread count comes back, a failure in the
worker stream is raised instead of hanging, and the default turns it on only where it measured
faster."""

from __future__ import annotations

import multiprocessing

import pytest
import torch
from torch import Tensor

from unstall.sparse.lstm import StructuredDropoutLSTM, pipelined, streams
from unstall.sparse.lstm.kernels import LSTMLayerFn, reference_lstm_layer
from unstall.sparse.lstm.masks import LayerMasks, StructuredMask, sample_mask
from unstall.workload.threads import torch_threads

F64 = torch.float64


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def layer_inputs(
    steps: int, batch: int, inp: int, hid: int, dtype: torch.dtype = F64
) -> list[Tensor]:
    g = gen(9)
    shapes = ((steps, batch, inp), (batch, hid), (batch, hid), (4 * hid, inp), (4 * hid, hid))
    tensors = [torch.randn(*s, generator=g, dtype=dtype) for s in shapes]
    tensors.append(torch.randn(4 * hid, generator=g, dtype=dtype))
    return [t.requires_grad_() for t in tensors]


def structured_masks(steps: int, batch: int, inp: int, hid: int, held: int = 1) -> LayerMasks:
    return LayerMasks(
        input=sample_mask("structured", steps, batch, inp, 0.5, gen(7), steps_per_set=held),
        recurrent=sample_mask("structured", steps, batch, hid, 0.5, gen(8)),
    )


@pytest.mark.parametrize("held", [1, 3])
def test_pipelined_layer_matches_the_dense_reference_and_gradcheck(held: int) -> None:
    steps, batch, inp, hid = 7, 3, 6, 5
    masks = structured_masks(steps, batch, inp, hid, held)
    tensors = layer_inputs(steps, batch, inp, hid)
    x, h0, c0, w_ih, w_hh, b = tensors
    out, h_n, c_n = LSTMLayerFn.apply(*tensors, masks, True)
    dense = [m.dense(steps, batch).to(F64) for m in (masks.input, masks.recurrent)]  # type: ignore[union-attr]
    ref = reference_lstm_layer(x, h0, c0, (w_ih, w_hh, b, torch.zeros_like(b)), *dense)
    for got, want in zip((out, h_n, c_n), ref, strict=True):
        torch.testing.assert_close(got, want)
    weights = torch.randn(steps, batch, hid, generator=gen(3), dtype=F64)
    mine = torch.autograd.grad((out * weights).sum() + h_n.sum() + c_n.sum(), tensors)
    theirs = torch.autograd.grad((ref[0] * weights).sum() + ref[1].sum() + ref[2].sum(), tensors)
    for got, want in zip(mine, theirs, strict=True):
        torch.testing.assert_close(got, want)

    def layer(*args: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return LSTMLayerFn.apply(*args, masks, True)  # type: ignore[no-any-return]

    assert torch.autograd.gradcheck(layer, tuple(tensors), fast_mode=True)


def run_layer(tensors: list[Tensor], masks: LayerMasks, pipe: bool) -> list[Tensor]:
    out, h_n, c_n = LSTMLayerFn.apply(*tensors, masks, pipe)
    grad_out = torch.randn(out.shape, generator=gen(4), dtype=out.dtype)
    grads = torch.autograd.grad((out * grad_out).sum() + h_n.sum() + c_n.sum(), tensors)
    return [out, h_n, c_n, *grads]


def test_pipelined_equals_the_serial_one_thread_layer_to_the_bit() -> None:
    # Wide enough that the one-thread kernels gather in several chunks (hidden 640: W^T has 640
    # rows of 2,560 floats, gathered 204 at a time), so the chunked products run in both streams.
    steps, batch, hid = 6, 4, 640
    masks = structured_masks(steps, batch, hid, hid)
    tensors = layer_inputs(steps, batch, hid, hid, torch.float32)
    with torch_threads(1):
        serial = run_layer(tensors, masks, pipe=False)
    piped = run_layer(tensors, masks, pipe=True)
    names = ["out", "h_n", "c_n", "dx", "dh0", "dc0", "dw_ih", "dw_hh", "db"]
    for name, got, want in zip(names, piped, serial, strict=True):
        if name == "dw_ih":  # its blocks add up in reverse order
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        else:
            assert torch.equal(got, want), name


@pytest.mark.parametrize("threads", [1, 2])
def test_the_callers_thread_count_comes_back(threads: int) -> None:
    with torch_threads(threads):
        lstm = StructuredDropoutLSTM(8, 8, 2, dropout=0.5, pipeline=True)
        out, _ = lstm(torch.randn(5, 3, 8))
        assert torch.get_num_threads() == threads
        out.sum().backward()
        assert torch.get_num_threads() == threads


def test_a_failure_in_the_worker_stream_is_raised_not_waited_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: object) -> None:
        raise ValueError("input connection failed")

    monkeypatch.setattr(pipelined, "structured_projection", broken)
    tensors = layer_inputs(5, 2, 4, 3)
    before = torch.get_num_threads()
    with pytest.raises(ValueError, match="input connection failed"):
        LSTMLayerFn.apply(*tensors, structured_masks(5, 2, 4, 3), True)
    assert torch.get_num_threads() == before


def test_a_failure_in_the_calling_stream_stops_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise ValueError("recurrence failed")

    tensors = layer_inputs(5, 2, 4, 3)
    out, h_n, c_n = LSTMLayerFn.apply(*tensors, structured_masks(5, 2, 4, 3), True)
    monkeypatch.setattr(pipelined, "recurrence_backward", broken)
    with pytest.raises(ValueError, match="recurrence failed"):
        (out.sum() + h_n.sum() + c_n.sum()).backward()  # the worker waits on the recurrence


def test_the_module_runs_pipelined_by_default_only_where_it_measured_faster() -> None:
    cpu = torch.device("cpu")
    with torch_threads(2):
        assert streams.use_streams(None, cpu, streams.PIPELINE_MIN_HIDDEN)
        assert not streams.use_streams(None, cpu, 400)
        assert not streams.use_streams(False, cpu, 2048)
        assert streams.use_streams(True, cpu, 400)
    with torch_threads(1):
        assert not streams.use_streams(None, cpu, 2048)
    assert not streams.use_streams(True, torch.device("meta"), 2048)


def test_the_pipelined_module_draws_the_same_masks_and_equals_the_serial_one() -> None:
    x = torch.randn(6, 3, 10, generator=gen(1), dtype=F64)
    results = []
    for pipe in (False, True):
        lstm = StructuredDropoutLSTM(10, 12, 2, dropout=0.5, pipeline=pipe, generator=gen(2))
        lstm.double()
        out, (h_n, c_n) = lstm(x)
        out.sum().backward()
        results.append([out, h_n, c_n, *(p.grad for p in lstm.parameters())])
        assert lstm.last_masks is not None
        assert isinstance(lstm.last_masks[0].input, StructuredMask)
    for got, want in zip(*results, strict=True):
        assert got is not None and want is not None
        torch.testing.assert_close(got, want)


def _pipelined_layer_sum() -> float:
    tensors = layer_inputs(4, 2, 4, 3)
    out, _, _ = LSTMLayerFn.apply(*tensors, structured_masks(4, 2, 4, 3), True)
    return float(out.detach().sum())


def _child_runs_pipelined(queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    queue.put(_pipelined_layer_sum())


def test_a_forked_child_gets_a_worker_of_its_own() -> None:
    want = _pipelined_layer_sum()  # the parent's worker thread now exists
    assert streams._WORKER is not None
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_runs_pipelined, args=(queue,))
    child.start()
    try:
        got = queue.get(timeout=60)  # the inherited pool's queue would never be served
    finally:
        child.join(timeout=10)
        if child.is_alive():
            child.kill()
    assert got == want
