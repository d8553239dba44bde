"""The LSTM layer and the masked linear layer as hand-written autograd Functions.

A layer is one Python loop over time (a fused cuDNN/oneDNN kernel cannot skip units). Every mode
runs the same loop and the same cell code; they differ only in how a masked product
``(v * mask) @ W^T`` is computed, which a projection of :mod:`unstall.sparse.lstm.projections`
does (dense products for the elementwise modes, products on the kept units only for the
structured ones). :func:`reference_lstm_layer` is the dense masked reference the kernels must
match.

Gate order and parameter shapes follow ``torch.nn.LSTM`` (i, f, g, o), so weights copy across.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from unstall.sparse.lstm.masks import DenseMask, LayerMasks, Mask, StructuredMask, WindowMask
from unstall.sparse.lstm.projections import make_projection


def _cell_forward(
    acts: Tensor, c_prev: Tensor, c_next: Tensor, tanh_c: Tensor, h_out: Tensor
) -> None:
    """Gate pre-activations in ``acts`` (B x 4H) become activations in place; then c and h."""
    hid = c_prev.shape[1]
    acts[:, : 2 * hid].sigmoid_()
    acts[:, 2 * hid : 3 * hid].tanh_()
    acts[:, 3 * hid :].sigmoid_()
    i, f, g, o = acts.chunk(4, 1)
    torch.mul(f, c_prev, out=c_next).addcmul_(i, g)
    torch.tanh(c_next, out=tanh_c)
    torch.mul(o, tanh_c, out=h_out)


def _cell_backward(
    dh: Tensor, dc: Tensor, acts: Tensor, c_prev: Tensor, tanh_c: Tensor, d_gates: Tensor
) -> Tensor:
    """Write the gate pre-activation gradients into ``d_gates``; return the gradient of c_prev.

    Few, wide operations on purpose: at these sizes each elementwise call costs about as much as
    its arithmetic, so the activation derivatives are formed once over all four gates.
    """
    hid = c_prev.shape[1]
    i, f, g, o = acts.chunk(4, 1)
    di, df, dg, do = d_gates.chunk(4, 1)
    dc = dc.addcmul(dh, torch.mul(tanh_c, tanh_c).neg_().add_(1.0).mul_(o))
    torch.mul(dc, g, out=di)
    torch.mul(dc, c_prev, out=df)
    torch.mul(dc, i, out=dg)
    torch.mul(dh, tanh_c, out=do)
    # sigmoid' = s - s^2 (gates i, f, o); tanh' = 1 - g^2 (gate g)
    square = torch.mul(acts, acts)
    deriv = torch.sub(acts, square)
    deriv[:, 2 * hid : 3 * hid].copy_(square[:, 2 * hid : 3 * hid]).neg_().add_(1.0)
    d_gates.mul_(deriv)
    return dc.mul_(f)


class LSTMLayerFn(torch.autograd.Function):
    """One LSTM layer over a (T, B, I) sequence with the given masks; returns (out, h_T, c_T)."""

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
    ) -> tuple[Tensor, Tensor, Tensor]:
        steps, batch, _ = x.shape
        hid = h0.shape[1]
        inp = make_projection(w_ih, masks.input, steps)
        rec = make_projection(w_hh, masks.recurrent, steps)
        acts = bias.expand(steps, batch, 4 * hid).contiguous()
        inp.project_all(x, acts)
        cs = x.new_empty(steps + 1, batch, hid)
        cs[0] = c0
        tanh_c = x.new_empty(steps, batch, hid)
        out = x.new_empty(steps, batch, hid)
        h = h0
        for t in range(steps):
            rec.project_step(t, h, acts[t])
            _cell_forward(acts[t], cs[t], cs[t + 1], tanh_c[t], out[t])
            h = out[t]
        ctx.projections = (inp, rec)
        ctx.save_for_backward(acts, cs, tanh_c)
        return out, out[steps - 1].clone(), cs[steps].clone()

    @staticmethod
    def backward(ctx: Any, d_out: Tensor, d_hn: Tensor, d_cn: Tensor) -> tuple[Tensor | None, ...]:
        acts, cs, tanh_c = ctx.saved_tensors
        inp, rec = ctx.projections
        inp.begin_backward()
        rec.begin_backward()
        steps = acts.shape[0]
        d_gates = torch.empty_like(acts)
        dh, dc = d_hn, d_cn.clone()
        for t in reversed(range(steps)):
            dc = _cell_backward(d_out[t] + dh, dc, acts[t], cs[t], tanh_c[t], d_gates[t])
            dh = rec.backward_step(t, d_gates[t])
        need = ctx.needs_input_grad
        dx = inp.backward_all(d_gates, need_input=need[0])
        dw_ih = inp.grad_weight(d_gates) if need[3] else None
        dw_hh = rec.grad_weight(d_gates) if need[4] else None
        db = d_gates.sum((0, 1)) if need[5] else None
        return dx, dh, dc, dw_ih, dw_hh, db, None


class MaskedLinearFn(torch.autograd.Function):
    """``(mask(x) @ W^T + b)`` over a (T, B, N) sequence with a structured mask, compactly."""

    @staticmethod
    def forward(
        ctx: Any, x: Tensor, weight: Tensor, bias: Tensor, mask: StructuredMask | WindowMask
    ) -> Tensor:
        steps, batch, _ = x.shape
        out = bias.expand(steps, batch, weight.shape[0]).contiguous()
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
        return dx, dw, db, None


def masked_linear(x: Tensor, weight: Tensor, bias: Tensor, mask: Mask) -> Tensor:
    """A linear layer on a (T, B, N) sequence after dropout with ``mask`` (any mode)."""
    if isinstance(mask, StructuredMask | WindowMask):
        out: Tensor = MaskedLinearFn.apply(x, weight, bias, mask)
        return out
    if isinstance(mask, DenseMask):
        x = x * mask.values
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
