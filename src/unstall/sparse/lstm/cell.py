"""The LSTM cell and the two loops over time that every mode and both schedules share.

The loops take the recurrent connection as a projection (see
:mod:`unstall.sparse.lstm.projections`) and, for the pipelined schedule
(:mod:`unstall.sparse.lstm.pipelined`), a hook per step: ``wait(t)`` before step t's forward
(its input connection may still be computed by the other stream) and ``done(t)`` after step t's
gate gradients are final (the other stream turns them into the input connection's gradients).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from unstall.sparse.lstm.projections import Projection


def cell_forward(
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


def cell_backward(
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


def recurrence_forward(
    rec: Projection,
    acts: Tensor,
    cs: Tensor,
    tanh_c: Tensor,
    out: Tensor,
    h0: Tensor,
    wait: Callable[[int], None] | None = None,
) -> None:
    """Steps 0..T-1: ``acts[t]`` holds the bias and input connection (once ``wait(t)`` returns);
    the recurrent product is added, then the cell writes c_{t+1}, tanh(c) and h_t in place."""
    h = h0
    for t in range(acts.shape[0]):
        if wait is not None:
            wait(t)
        rec.project_step(t, h, acts[t])
        cell_forward(acts[t], cs[t], cs[t + 1], tanh_c[t], out[t])
        h = out[t]


def recurrence_backward(
    rec: Projection,
    saved: tuple[Tensor, Tensor, Tensor],
    grads: tuple[Tensor, Tensor, Tensor],
    d_gates: Tensor,
    done: Callable[[int], None] | None = None,
) -> tuple[Tensor, Tensor]:
    """Steps T-1..0 of backpropagation through time: ``saved`` is (acts, cs, tanh_c), ``grads``
    (d_out, d_hT, d_cT); writes ``d_gates``; returns the gradients of h0 and c0."""
    acts, cs, tanh_c = saved
    d_out, dh, dc = grads
    dc = dc.clone()
    for t in reversed(range(acts.shape[0])):
        dc = cell_backward(d_out[t] + dh, dc, acts[t], cs[t], tanh_c[t], d_gates[t])
        dh = rec.backward_step(t, d_gates[t])
        if done is not None:
            done(t)
    return dh, dc
