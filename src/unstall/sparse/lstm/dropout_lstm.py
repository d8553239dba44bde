"""``StructuredDropoutLSTM``: an nn.LSTM drop-in whose dropout can really skip the dropped units.

Where dropout acts (each layer, each step t):

- on the layer's input x_t (the embedding for layer 0, the layer below's output otherwise), with
  probability ``dropout``; nn.LSTM instead drops only between layers, never its own input;
- on the recurrent state h_{t-1} as it enters the gates, with probability ``recurrent_dropout``
  (default: ``dropout``). The carried state and the returned outputs are not masked.

With ``mode="structured"`` the batch shares the dropped units at each step (a fresh set every
step), so the gate products only see the kept units and shrink in forward and backward (see
:mod:`unstall.sparse.lstm.projections`). ``input_mask_steps=k`` holds each input set for k
steps, so the input connection (which does not depend on the recurrence) is one large product
per k steps on the kept columns; the recurrent set stays fresh every step. ``standard``
(elementwise) and ``locked`` (one mask per sample for the whole sequence) run the same loop with
full-size products.
In eval mode, or at p = 0, nothing is dropped and the result equals nn.LSTM with the same weights.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from unstall.config import check, check_positive
from unstall.sparse.lstm.kernels import LSTMLayerFn
from unstall.sparse.lstm.masks import (
    LayerMasks,
    MaskGenerators,
    check_dropout,
    check_mask_source,
    check_mode,
    mask_to,
    sample_mask,
)
from unstall.sparse.lstm.streams import use_streams

__all__ = ["LSTMDropoutConfig", "StructuredDropoutLSTM"]


@dataclass(frozen=True, kw_only=True)
class LSTMDropoutConfig:
    """Which dropout a :class:`StructuredDropoutLSTM` applies, and how strongly."""

    mode: str = "structured"
    dropout: float = 0.0
    recurrent_dropout: float = 0.0
    input_mask_steps: int = 1  # steps that share one input-dropout set (structured modes)
    # Structured modes on a CPU: run each layer as two single-threaded streams (recurrence |
    # input connection, see unstall.sparse.lstm.pipelined); None: where that measured faster
    # (two torch threads, hidden >= 1024: unstall.sparse.lstm.streams.use_streams).
    pipeline: bool | None = None
    # On a GPU, where the elementwise modes draw their masks: "device" (as nn.Dropout) or "cpu"
    # (the same masks on any device); see unstall.sparse.lstm.masks.MASK_SOURCES.
    mask_source: str = "device"

    def __post_init__(self) -> None:
        check_mode(self, "mode", self.mode)
        check_mask_source(self, "mask_source", self.mask_source)
        check_dropout(self, "dropout", self.dropout)
        check_dropout(self, "recurrent_dropout", self.recurrent_dropout)
        check_positive(self, input_mask_steps=self.input_mask_steps)


class StructuredDropoutLSTM(nn.Module):
    """Multi-layer LSTM with ``standard``, ``locked`` or ``structured`` dropout.

    Same constructor and call as ``nn.LSTM`` for ``input_size, hidden_size, num_layers, bias,
    batch_first, dropout``; parameters have nn.LSTM's names and shapes, so
    ``load_state_dict(lstm.state_dict())`` works both ways. Not supported: bidirectional, proj_size.

    Masks come from ``generator`` (a private one seeded with 0 when not given; on a GPU the
    elementwise modes draw there, seeded from it, unless ``mask_source="cpu"``). ``forward`` takes
    ``masks=`` (one :class:`LayerMasks` per layer) to replay given masks; the masks of the last
    training forward pass are in ``last_masks``.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        *,
        mode: str = "structured",
        recurrent_dropout: float | None = None,
        input_mask_steps: int = 1,
        pipeline: bool | None = None,
        mask_source: str = "device",
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        check_positive(name, input_size=input_size, hidden_size=hidden_size, num_layers=num_layers)
        self.config = LSTMDropoutConfig(
            mode=mode,
            dropout=float(dropout),
            recurrent_dropout=float(dropout if recurrent_dropout is None else recurrent_dropout),
            input_mask_steps=input_mask_steps,
            pipeline=pipeline,
            mask_source=mask_source,
        )
        self.mask_generators = MaskGenerators(mask_source)
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.generator = generator if generator is not None else torch.Generator().manual_seed(0)
        self.last_masks: tuple[LayerMasks, ...] | None = None
        for layer in range(num_layers):
            width = input_size if layer == 0 else hidden_size
            self.register_parameter(
                f"weight_ih_l{layer}", nn.Parameter(torch.empty(4 * hidden_size, width))
            )
            self.register_parameter(
                f"weight_hh_l{layer}", nn.Parameter(torch.empty(4 * hidden_size, hidden_size))
            )
            if bias:
                self.register_parameter(
                    f"bias_ih_l{layer}", nn.Parameter(torch.empty(4 * hidden_size))
                )
                self.register_parameter(
                    f"bias_hh_l{layer}", nn.Parameter(torch.empty(4 * hidden_size))
                )
        self.reset_parameters(self.generator)

    @property
    def mode(self) -> str:
        return self.config.mode

    @property
    def dropout(self) -> float:
        return self.config.dropout

    @property
    def recurrent_dropout(self) -> float:
        return self.config.recurrent_dropout

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """nn.LSTM's initialisation: uniform in +-1/sqrt(hidden_size)."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for weight in self.parameters():
            nn.init.uniform_(weight, -bound, bound, generator=generator)

    def layer_weights(self, layer: int) -> tuple[Tensor, Tensor, Tensor]:
        """(w_ih, w_hh, summed bias) of one layer; the bias is zeros when ``bias=False``."""
        w_ih: Tensor = getattr(self, f"weight_ih_l{layer}")
        w_hh: Tensor = getattr(self, f"weight_hh_l{layer}")
        if self.bias:
            b = getattr(self, f"bias_ih_l{layer}") + getattr(self, f"bias_hh_l{layer}")
        else:
            b = w_ih.new_zeros(4 * self.hidden_size)
        return w_ih, w_hh, b

    def sample_masks(
        self, steps: int, batch: int, device: torch.device | None = None
    ) -> tuple[LayerMasks, ...]:
        """Draw every layer's masks for a (steps, batch) sequence from ``self.generator`` (on
        ``device`` where the mask source says so)."""
        cfg = self.config
        gen = self.mask_generators.for_draw(self.generator, cfg.mode, device)
        return tuple(
            LayerMasks(
                input=sample_mask(
                    cfg.mode,
                    steps,
                    batch,
                    self._width(layer),
                    cfg.dropout,
                    gen,
                    steps_per_set=cfg.input_mask_steps,
                ),
                recurrent=sample_mask(
                    cfg.mode, steps, batch, self.hidden_size, cfg.recurrent_dropout, gen
                ),
            )
            for layer in range(self.num_layers)
        )

    def _width(self, layer: int) -> int:
        return self.input_size if layer == 0 else self.hidden_size

    def forward(
        self,
        input: Tensor,
        hx: tuple[Tensor, Tensor] | None = None,
        *,
        masks: Sequence[LayerMasks] | None = None,
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """As nn.LSTM: ``output, (h_n, c_n)``; ``masks`` replays given masks (training only)."""
        unbatched = input.dim() == 2
        x = self._time_major(input)
        steps, batch, _ = x.shape
        h0, c0 = self._initial_state(hx, batch, x, unbatched)
        layer_masks = self._masks_for(steps, batch, masks, x)
        pipelined = use_streams(self.config.pipeline, x.device, self.hidden_size)
        h_n, c_n = [], []
        for layer in range(self.num_layers):
            w_ih, w_hh, b = self.layer_weights(layer)
            x, h, c = LSTMLayerFn.apply(
                x, h0[layer], c0[layer], w_ih, w_hh, b, layer_masks[layer], pipelined
            )
            h_n.append(h)
            c_n.append(c)
        out = x.squeeze(1) if unbatched else (x.transpose(0, 1) if self.batch_first else x)
        hn, cn = torch.stack(h_n), torch.stack(c_n)
        if unbatched:
            hn, cn = hn.squeeze(1), cn.squeeze(1)
        return out, (hn, cn)

    def _time_major(self, input: Tensor) -> Tensor:
        check(input.dim() in (2, 3), self, "input", f"must be 2-D or 3-D, got {input.dim()}-D")
        check(
            input.shape[-1] == self.input_size,
            self,
            "input",
            f"last dimension {input.shape[-1]} != input_size {self.input_size}",
        )
        if input.dim() == 2:
            return input.unsqueeze(1)
        return input.transpose(0, 1).contiguous() if self.batch_first else input

    def _initial_state(
        self, hx: tuple[Tensor, Tensor] | None, batch: int, x: Tensor, unbatched: bool
    ) -> tuple[Tensor, Tensor]:
        shape = (self.num_layers, batch, self.hidden_size)
        if hx is None:
            zeros = x.new_zeros(shape)
            return zeros, zeros
        h0, c0 = (s.unsqueeze(1) if unbatched else s for s in hx)
        for label, s in (("h0", h0), ("c0", c0)):
            check(
                tuple(s.shape) == shape,
                self,
                "hx",
                f"{label} has shape {tuple(s.shape)}, need {shape}",
            )
        return h0, c0

    def _masks_for(
        self, steps: int, batch: int, masks: Sequence[LayerMasks] | None, x: Tensor
    ) -> tuple[LayerMasks, ...]:
        if not self.training:
            return tuple(LayerMasks(input=None, recurrent=None) for _ in range(self.num_layers))
        if masks is None:
            masks = self.sample_masks(steps, batch, x.device)
        check(
            len(masks) == self.num_layers,
            self,
            "masks",
            f"need {self.num_layers}, got {len(masks)}",
        )
        self.last_masks = tuple(masks)
        return tuple(
            LayerMasks(
                input=mask_to(m.input, x.device, x.dtype),
                recurrent=mask_to(m.recurrent, x.device, x.dtype),
            )
            for m in masks
        )

    def extra_repr(self) -> str:
        cfg = self.config
        return (
            f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}, "
            f"batch_first={self.batch_first}, mode={cfg.mode!r}, dropout={cfg.dropout}, "
            f"recurrent_dropout={cfg.recurrent_dropout}, input_mask_steps={cfg.input_mask_steps}, "
            f"pipeline={cfg.pipeline}, mask_source={cfg.mask_source!r}"
        )
