"""GEMM shapes of a layer's training step, and its operands as boolean GEMM matrices (im2col).

Per convolution group ``g`` (``P = N * Ho * Wo`` output pixels of the batch):

=================  ===============  ==================  ====================
GEMM               M (rows of A)    K (reduction)       N (columns of B)
=================  ===============  ==================  ====================
forward            P                Cin/g * kh * kw     Cout/g
input gradient     P                Cout/g              Cin/g * kh * kw
weight gradient    Cout/g           P                   Cin/g * kh * kw
=================  ===============  ==================  ====================

The input gradient is taken in its col2im form (``dcols = dY @ W^T``, then scatter-add into
``dX``), which does the same multiply-accumulates as the forward pass; a Linear layer is the case
``kh = kw = Ho = Wo = 1`` (with ``N`` the rows of its input).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from unstall.config import check
from unstall.errors import ConfigError
from unstall.results import JsonResult

LayerKind = Literal["conv", "linear"]


@dataclass(frozen=True, kw_only=True)
class GemmShape(JsonResult):
    """``C[m, n] = A[m, k] @ B[k, n]``, repeated for each of ``groups`` convolution groups."""

    m: int
    n: int
    k: int
    groups: int = 1

    @property
    def macs(self) -> int:
        return self.groups * self.m * self.n * self.k


@dataclass(frozen=True, kw_only=True)
class LayerGemms(JsonResult):
    """The three GEMMs of a layer's training step; ``input_grad`` is None for the first layer."""

    forward: GemmShape
    input_grad: GemmShape | None
    weight_grad: GemmShape


@dataclass(frozen=True, kw_only=True)
class LayerGeometry:
    """What im2col needs to know about a layer (a Linear is a 1x1 convolution on 1x1 images)."""

    kind: LayerKind
    in_channels: int
    out_channels: int
    kernel: tuple[int, int] = (1, 1)
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1


def geometry_of(module: nn.Module) -> LayerGeometry:
    """The geometry of a ``Conv2d`` or ``Linear``."""
    if isinstance(module, nn.Conv2d):
        pad = module.padding
        check(isinstance(pad, tuple), "analyzer", "padding", "string paddings are not supported")
        return LayerGeometry(
            kind="conv",
            in_channels=module.in_channels,
            out_channels=module.out_channels,
            kernel=_pair(module.kernel_size),
            stride=_pair(module.stride),
            padding=_pair(pad),
            dilation=_pair(module.dilation),
            groups=module.groups,
        )
    if isinstance(module, nn.Linear):
        return LayerGeometry(
            kind="linear", in_channels=module.in_features, out_channels=module.out_features
        )
    raise ConfigError("analyzer", "layer", f"not a Conv2d or Linear: {type(module).__name__}")


def _pair(v: object) -> tuple[int, int]:
    t = tuple(v) if isinstance(v, tuple | list) else (v, v)
    return (int(t[0]), int(t[1]))


def gemm_shapes(
    geom: LayerGeometry, output_shape: tuple[int, ...], *, input_grad: bool
) -> LayerGemms:
    """The im2col GEMMs of a layer whose output has ``output_shape`` (see the module docstring)."""
    g = geom.groups
    window = geom.in_channels // g * geom.kernel[0] * geom.kernel[1]
    pixels = math.prod(output_shape) // geom.out_channels  # N * Ho * Wo (or the Linear's rows)
    cout = geom.out_channels // g
    return LayerGemms(
        forward=GemmShape(m=pixels, n=cout, k=window, groups=g),
        input_grad=GemmShape(m=pixels, n=window, k=cout, groups=g) if input_grad else None,
        weight_grad=GemmShape(m=cout, n=window, k=pixels, groups=g),
    )


def im2col_mask(mask: torch.Tensor, geom: LayerGeometry) -> torch.Tensor:
    """The boolean im2col matrix of an input mask, by convolution group: ``(g, M, Cin/g*kh*kw)``.

    Padding positions come out False (they hold no data and need no gradient).
    """
    g = geom.groups
    if geom.kind == "linear":
        rows = mask.reshape(-1, geom.in_channels)
        return rows.reshape(rows.shape[0], g, -1).transpose(0, 1).contiguous()
    cols = F.unfold(
        mask.to(torch.uint8 if mask.dtype == torch.bool else mask.dtype).float(),
        geom.kernel,
        dilation=geom.dilation,
        padding=geom.padding,
        stride=geom.stride,
    )  # (N, Cin*kh*kw, L), channel-major so each group's block is contiguous
    cols = cols.transpose(1, 2).reshape(-1, g, cols.shape[1] // g) > 0
    return cols.transpose(0, 1).contiguous()


def output_rows_mask(mask: torch.Tensor, geom: LayerGeometry) -> torch.Tensor:
    """An output-shaped mask as GEMM rows by group: ``(g, N*Ho*Wo, Cout/g)``."""
    g = geom.groups
    rows = mask.movedim(1, -1).reshape(-1, geom.out_channels) if mask.dim() > 2 else mask
    return rows.reshape(rows.shape[0], g, -1).transpose(0, 1).contiguous()
