"""The LSTM layer and the masked linear layer as hand-written autograd Functions.

A layer is one Python loop over time (a fused cuDNN/oneDNN kernel cannot skip units;
:mod:`unstall.sparse.lstm.cell` has the loops, :mod:`unstall.sparse.lstm.pipelined` the same loop
as two single-threaded streams). Every mode runs the same loop and the same cell code; they
differ only in how a masked product ``(v * mask) @ W^T`` is computed, which a projection of
:mod:`unstall.sparse.lstm.projections` does (dense products for the elementwise modes, products
on the kept units only for the structured ones). :func:`reference_lstm_layer` is the dense masked
reference the kernels must match.

Gate order and parameter shapes follow ``torch.nn.LSTM`` (i, f, g, o), so weights copy across.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from unstall.sparse.lstm import pipelined as pipelined_kernels
from unstall.sparse.lstm import streams
from unstall.sparse.lstm.cell import recurrence_backward, recurrence_forward
from unstall.sparse.lstm.masks import DenseMask, LayerMasks, Mask, StructuredMask, WindowMask
from unstall.sparse.lstm.projections import Projection, make_projection


class LSTMLayerFn(torch.autograd.Function):
    """One LSTM layer over a (T, B, I) sequence with the given masks; returns (out, h_T, c_T).

    ``pipelined`` (structured input masks only; ignored otherwise): run as two single-threaded
    streams (:mod:`unstall.sparse.lstm.pipelined`) instead of one loop at the caller's threads.
    """

    @staticmethod
    def forward(
        ctx: Any,
        x: Tensor,
        h0: Tensor,
        c0: Tensor,
        w_ih: Tensor,
        w_hh: Tensor,
        bias: Tensor,
        masks: LayerMasks,
        pipelined: bool = False,
    ) -> tuple[Tensor, Tensor, Tensor]:
        steps, batch, _ = x.shape
        hid = h0.shape[1]
        acts = bias.expand(steps, batch, 4 * hid).contiguous()
        cs = x.new_empty(steps + 1, batch, hid)
        cs[0] = c0
        tanh_c = x.new_empty(steps, batch, hid)
        out = x.new_empty(steps, batch, hid)
        ctx.pipelined = pipelined and isinstance(masks.input, StructuredMask)
        if ctx.pipelined:
            state = (acts, cs, tanh_c, out)
            ctx.projections = pipelined_kernels.layer_forward(x, h0, (w_ih, w_hh), masks, state)
        else:
            inp = make_projection(w_ih, masks.input, steps)
            rec = make_projection(w_hh, masks.recurrent, steps)
            inp.project_all(x, acts)
            recurrence_forward(rec, acts, cs, tanh_c, out, h0)
            ctx.projections = (inp, rec)
        ctx.save_for_backward(acts, cs, tanh_c)
        return out, out[steps - 1].clone(), cs[steps].clone()

    @staticmethod
    def backward(ctx: Any, d_out: Tensor, d_hn: Tensor, d_cn: Tensor) -> tuple[Tensor | None, ...]:
        acts, cs, tanh_c = ctx.saved_tensors
        inp, rec = ctx.projections
        inp.begin_backward()
        rec.begin_backward()
        saved, grads, need = (acts, cs, tanh_c), (d_out, d_hn, d_cn), ctx.needs_input_grad
        if ctx.pipelined:
            return (*pipelined_kernels.layer_backward((inp, rec), saved, grads, need), None, None)
        d_gates = torch.empty_like(acts)
        dh, dc = recurrence_backward(rec, saved, grads, d_gates)
        dx = inp.backward_all(d_gates, need_input=need[0])
        dw_ih = inp.grad_weight(d_gates) if need[3] else None
        dw_hh = rec.grad_weight(d_gates) if need[4] else None
        db = d_gates.sum((0, 1)) if need[5] else None
        return dx, dh, dc, dw_ih, dw_hh, db, None, None


class MaskedLinearFn(torch.autograd.Function):
    """``(mask(x) @ W^T + b)`` over a (T, B, N) sequence with a structured mask, compactly.

    ``split`` (structured masks only; ignored otherwise): the output's column tiles shared out
    between two single-threaded streams (:class:`unstall.sparse.lstm.pipelined.SplitDecoder`).
    """

    @staticmethod
    def forward(
        ctx: Any,
        x: Tensor,
        weight: Tensor,
        bias: Tensor,
        mask: StructuredMask | WindowMask,
        split: bool = False,
        memory: OutputMemory | None = None,
    ) -> Tensor:
        steps, batch, _ = x.shape
        full = bias.expand(steps, batch, weight.shape[0])
        out = full.contiguous() if memory is None else memory.take(full.shape, x).copy_(full)
        proj: Projection | pipelined_kernels.SplitDecoder
        if split and isinstance(mask, StructuredMask):
            proj = pipelined_kernels.SplitDecoder(weight, mask)
        else:
            proj = make_projection(weight, mask, steps)
        proj.project_all(x, out)
        ctx.projection = proj
        return out

    @staticmethod
    def backward(ctx: Any, d_out: Tensor) -> tuple[Tensor | None, ...]:
        proj = ctx.projection
        proj.begin_backward()
        need = ctx.needs_input_grad
        d_out = d_out.contiguous()
        dx = proj.backward_all(d_out, need_input=need[0])
        dw = proj.grad_weight(d_out) if need[1] else None
        db = d_out.sum((0, 1)) if need[2] else None
        return dx, dw, db, None, None, None


class OutputMemory:
    """Memory that a layer's output is written into, kept from call to call.

    A large output allocated afresh at every call (the decoder's logits: 90 MB at batch 64, 35
    steps and a 10k vocabulary) is new memory from the operating system each time, and its
    first write page-faults page by page (~20 ms a batch here). Writing into memory kept from
    the previous call skips that. :meth:`take` hands out the memory as a new tensor of the
    asked shape (the largest shape asked so far is allocated once; a smaller one uses its
    start), with a version counter and autograd history of its own.

    Each :meth:`take` overwrites what the previous one returned: an owner (a training loop)
    must be done with one output, and with everything that reads its memory (its gradient,
    when the loss writes that in place), before the next call; so one owner per loop, never
    shared between loops that may run at the same time.
    """

    def __init__(self) -> None:
        self._memory: Tensor | None = None

    def take(self, shape: Sequence[int], like: Tensor) -> Tensor:
        """A contiguous tensor of ``shape`` with ``like``'s dtype and device, in this memory
        (its values are whatever the previous call left)."""
        size = math.prod(shape)
        memory = self._memory
        if (
            memory is None
            or memory.numel() < size
            or memory.dtype != like.dtype
            or memory.device != like.device
        ):
            memory = self._memory = like.new_empty(size)
        strides = [math.prod(shape[i + 1 :]) for i in range(len(shape))]
        return like.new_empty(0).set_(memory.untyped_storage(), 0, tuple(shape), strides)


class LinearFn(torch.autograd.Function):
    """``x @ W^T + b`` over a (T, B, N) sequence, its output written into an
    :class:`OutputMemory`; the same products and the same gradients as
    ``torch.nn.functional.linear`` (one ``addmm`` over the steps and its backward)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, bias: Tensor, memory: OutputMemory) -> Tensor:
        steps, batch, width = x.shape
        out = memory.take((steps, batch, weight.shape[0]), x)
        torch.addmm(bias, x.reshape(-1, width), weight.t(), out=out.view(steps * batch, -1))
        ctx.save_for_backward(x, weight)
        return out

    @staticmethod
    def backward(ctx: Any, d_out: Tensor) -> tuple[Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        need = ctx.needs_input_grad
        rows = d_out.reshape(-1, d_out.shape[-1])
        dx = rows.mm(weight).view(x.shape) if need[0] else None
        # addmm's backward: W^T was column-major, so its gradient is computed transposed
        dw = rows.t().mm(x.reshape(rows.shape[0], -1)) if need[1] else None
        db = rows.sum(0) if need[2] else None
        return dx, dw, db, None


def masked_linear(
    x: Tensor,
    weight: Tensor,
    bias: Tensor,
    mask: Mask,
    split: bool | None = None,
    memory: OutputMemory | None = None,
) -> Tensor:
    """A linear layer on a (T, B, N) sequence after dropout with ``mask`` (any mode).

    ``split``: with a structured mask on a CPU, the output's column tiles are computed by two
    single-threaded streams, half each; None: where that has measured faster
    (:func:`unstall.sparse.lstm.streams.use_split_decoder`).

    ``memory``: write the output into this :class:`OutputMemory` (the output is then
    overwritten by the next call that takes the same memory) instead of new memory; the
    values and gradients are the same.
    """
    if isinstance(mask, StructuredMask | WindowMask):
        halves = streams.use_split_decoder(split, x.device, weight.shape[0])
        out: Tensor = MaskedLinearFn.apply(x, weight, bias, mask, halves, memory)
        return out
    if isinstance(mask, DenseMask):
        x = x * mask.values
    if memory is not None and x.dim() == 3 and x.is_contiguous():
        dense: Tensor = LinearFn.apply(x, weight, bias, memory)
        return dense
    return torch.nn.functional.linear(x, weight, bias)


def reference_lstm_layer(
    x: Tensor,
    h0: Tensor,
    c0: Tensor,
    weights: tuple[Tensor, Tensor, Tensor, Tensor],
    input_mask: Tensor | None,
    recurrent_mask: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor]:
    """The dense masked reference: plain autograd ops, full-size products, (T, B, N) masks.

    ``weights`` is (w_ih, w_hh, b_ih, b_hh) as in nn.LSTM. The fast kernels must match it.
    """
    w_ih, w_hh, b_ih, b_hh = weights
    h, c = h0, c0
    outs = []
    for t in range(x.shape[0]):
        xt = x[t] if input_mask is None else x[t] * input_mask[t]
        ht = h if recurrent_mask is None else h * recurrent_mask[t]
        gates = xt @ w_ih.t() + b_ih + ht @ w_hh.t() + b_hh
        i, f, g, o = gates.chunk(4, 1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        outs.append(h)
    return torch.stack(outs), h, c
