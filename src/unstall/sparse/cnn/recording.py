"""Hooks that record the forward/backward sparsity of a CNN training step, layer by layer.

For every ``Conv2d`` and ``Linear`` layer a training step records:

- **input-activation density**: the share of non-zero elements of the layer's input ``X`` (zeros
  come from a ReLU before it, possibly through max-pooling or dropout);
- **output-gradient density**: the share of non-zero elements of ``dL/dY``, the gradient with
  respect to the layer's output, exactly as autograd delivers it;
- the **ReLU-masked gradient**: when the layer's output reaches a ReLU (or ReLU6) through
  BatchNorm and/or a residual addition, the gradient at that ReLU's input ``dL/dZ``, its density,
  and the share of its zeros that the forward pass already knows: positions where the ReLU's
  output was zero (for ReLU6: zero or saturated at 6) get a zero gradient whatever comes back;
- which input positions have a gradient that will be thrown away (the input came from a ReLU,
  directly or through pooling/dropout, and was zero there): outputs the input-gradient GEMM need
  not compute;
- the GEMM shapes of the forward, input-gradient and weight-gradient computations (im2col).

**BatchNorm between the layer and its ReLU.** ``conv -> BN -> ReLU`` is the common case (ResNet,
MobileNetV2). The ReLU mask zeroes ``dL/dZ`` at the BN output, but BN's training-mode backward
``dL/dY = (gamma/sigma) (dZ - mean(dZ) - Yhat * mean(dZ * Yhat))`` subtracts per-channel batch
means, so the conv's own output gradient is dense. Both are recorded. The speed model
(:mod:`unstall.sparse.cnn.accelerator`) exploits ``dL/dZ``'s zeros by default (``bn_gradient =
"folded"``): that is exact when BN acts as a per-channel affine map in the backward pass (BN folded
into the conv, frozen statistics, or normalisation-free nets), where ``dL/dY = (gamma/sigma) dZ``
has the same zeros. ``bn_gradient = "exact"`` uses autograd's dense ``dL/dY`` instead.

**GEMM shapes**: see :mod:`unstall.sparse.cnn.gemms` (im2col; the input gradient in col2im form).
The first layer computes no input gradient (the images need none).

:func:`record_step` runs one forward/backward pass of any model with the hooks attached and
returns each layer's masks (:class:`LayerTensors`); :mod:`unstall.sparse.cnn.densities` turns
them into densities, :mod:`unstall.sparse.cnn.training` runs the training whose steps it records.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from unstall.config import check
from unstall.sparse.cnn.gemms import LayerGemms, LayerGeometry, gemm_shapes, geometry_of

# Forward masks of the activations: True where the gradient through the activation is zero.
ACTIVATION_DEAD: dict[type[nn.Module], Callable[[torch.Tensor], torch.Tensor]] = {
    nn.ReLU: lambda y: y <= 0,
    nn.ReLU6: lambda y: (y <= 0) | (y >= 6),
}
# Autograd nodes between a layer's output and a ReLU that keep the ReLU's mask meaningful for the
# layer (the tag names the path in the report). BatchNorm is per-element affine in the folded view.
_TOWARD_RELU = {
    "NativeBatchNormBackward0": "bn",
    "CudnnBatchNormBackward0": "bn",
    "AddBackward0": "add",
}
# Nodes between a ReLU's output and a layer's input that keep "zero input => gradient unused".
_FROM_RELU_PASS = frozenset(
    {
        "MaxPool2DWithIndicesBackward0",
        "AdaptiveAvgPool2DBackward0",
        "AvgPool2DBackward0",
        "ViewBackward0",
        "ReshapeAliasBackward0",
        "UnsafeViewBackward0",
        "CloneBackward0",
    }
)
# Products with a constant on the way from a ReLU (dropout's mask, a scale).
_SCALING = frozenset({"MulBackward0", "NativeDropoutBackward0"})
_RELU_NODES = {"ReluBackward0": "relu", "HardtanhBackward0": "relu6"}


@dataclass
class LayerTensors:
    """The masks one training step produced for one layer (all boolean, on CPU)."""

    name: str
    geometry: LayerGeometry
    gemms: LayerGemms
    x_nz: torch.Tensor  # input != 0, input-shaped
    x_alive: torch.Tensor | None  # False where the input's gradient is known to be unused
    dy_nz: torch.Tensor | None = None  # dL/dY != 0, output-shaped (set in the backward pass)
    dz_nz: torch.Tensor | None = None  # dL/dZ != 0 at the following ReLU's input, if any
    known_dead: torch.Tensor | None = None  # the ReLU's forward mask: True = gradient zero
    activation: str = "none"  # path to the activation: "relu", "bn+relu", "bn+add+relu", ...

    def grad_nz(self, bn_gradient: str) -> torch.Tensor:
        """The output-gradient mask the speed model exploits (see the module docstring)."""
        assert self.dy_nz is not None, "backward pass not recorded"
        if bn_gradient == "folded" and self.dz_nz is not None:
            return self.dz_nz
        return self.dy_nz


def _walk_to_layers(node: object, layer_nodes: dict[object, str]) -> list[tuple[str, list[str]]]:
    """Layers whose outputs reach ``node`` through BatchNorm/add nodes only, with the path."""
    found: list[tuple[str, list[str]]] = []
    stack: list[tuple[object, list[str]]] = [(node, [])]
    while stack:
        current, path = stack.pop()
        if current is None:
            continue
        if current in layer_nodes:
            found.append((layer_nodes[current], path))
            continue
        tag = _TOWARD_RELU.get(type(current).__name__)
        if tag is None:
            continue
        nexts = current.next_functions  # type: ignore[attr-defined]
        inputs = nexts[:1] if tag == "bn" else nexts
        stack.extend((nxt, [tag, *path]) for nxt, _ in inputs)
    return found


def _input_source(node: object) -> tuple[str, bool]:
    """Whether a layer's input came from a ReLU/ReLU6 through pass-through nodes; and whether
    the path scales values (dropout), which hides ReLU6 saturation."""
    scaled = False
    while node is not None:
        name = type(node).__name__
        if name in _RELU_NODES:
            return _RELU_NODES[name], scaled
        nexts = [n for n, _ in node.next_functions if n is not None]  # type: ignore[attr-defined]
        if name in _SCALING and len(nexts) == 1:
            # A product with a constant (dropout's mask): a zero stays zero, and a zero factor
            # kills the gradient of the other, so "zero input => gradient unused" still holds.
            scaled = True
        elif name not in _FROM_RELU_PASS:
            break
        node = nexts[0] if nexts else None
    return "none", scaled


def _alive_mask(x: torch.Tensor, source: str, scaled: bool) -> torch.Tensor | None:
    """True where the input's gradient is used; None when nothing is known."""
    if source == "relu" or (source == "relu6" and scaled):
        return x != 0
    if source == "relu6":
        return (x > 0) & (x < 6)
    return None


@dataclass
class _StepRecorder:
    """Hooks on a model's layers and activations for one or more recorded steps."""

    model: nn.Module
    names: dict[nn.Module, str]
    pending: dict[str, LayerTensors] = field(default_factory=dict)
    layer_nodes: dict[object, str] = field(default_factory=dict)
    handles: list[torch.utils.hooks.RemovableHandle] = field(default_factory=list)

    def attach(self) -> None:
        for module in self.model.modules():
            if isinstance(module, nn.Conv2d | nn.Linear):
                self.handles.append(module.register_forward_hook(self._on_layer))
            elif type(module) in ACTIVATION_DEAD:
                self.handles.append(module.register_forward_hook(self._on_activation))

    def detach(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def start_step(self) -> None:
        self.pending.clear()
        self.layer_nodes.clear()

    def _on_layer(
        self, module: nn.Module, inputs: tuple[torch.Tensor, ...], out: torch.Tensor
    ) -> None:
        name = self.names[module]
        check(name not in self.pending, "analyzer", "model", f"layer {name} runs twice a step")
        x = inputs[0].detach()
        geom = geometry_of(module)
        source, scaled = _input_source(inputs[0].grad_fn)
        record = LayerTensors(
            name=name,
            geometry=geom,
            gemms=gemm_shapes(geom, tuple(out.shape), input_grad=inputs[0].requires_grad),
            x_nz=x != 0,
            x_alive=_alive_mask(x, source, scaled),
        )
        self.pending[name] = record
        self.layer_nodes[out.grad_fn] = name

        def grab(grad: torch.Tensor) -> None:
            record.dy_nz = grad.detach() != 0

        out.register_hook(grab)

    def _on_activation(
        self, module: nn.Module, inputs: tuple[torch.Tensor, ...], out: torch.Tensor
    ) -> None:
        z = inputs[0]
        feeders = _walk_to_layers(z.grad_fn, self.layer_nodes)
        if not feeders:
            return
        dead = ACTIVATION_DEAD[type(module)](out.detach())
        kind = "relu6" if isinstance(module, nn.ReLU6) else "relu"
        records = [self.pending[name] for name, _ in feeders]
        for record, (_, path) in zip(records, feeders, strict=True):
            record.known_dead = dead
            record.activation = "+".join([*path, kind])

        def grab(grad: torch.Tensor) -> None:
            nz = grad.detach() != 0
            for record in records:
                record.dz_nz = nz

        z.register_hook(grab)


def layer_names(model: nn.Module) -> dict[nn.Module, str]:
    """The model's Conv2d and Linear layers by their qualified names, in registration order."""
    return {m: n for n, m in model.named_modules() if isinstance(m, nn.Conv2d | nn.Linear)}


def record_step(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor, list[LayerTensors]]:
    """One forward and backward pass with the hooks on: ``(loss, logits, layer masks)`` in the
    order the layers ran. Parameter gradients are left in place for an optimizer step.

    Activations must be out-of-place (``inplace=False``): the hooks need a ReLU's input and
    output as separate tensors (see :func:`out_of_place`).
    """
    recorder = _StepRecorder(model, layer_names(model))
    recorder.attach()
    try:
        logits = model(images)
        loss = loss_fn(logits, labels)
        loss.backward()
    finally:
        recorder.detach()
    return loss, logits, list(recorder.pending.values())


def out_of_place(model: nn.Module) -> nn.Module:
    """``model`` with its ReLU/ReLU6 activations made out-of-place (same maths; the hooks need an
    activation's input and output as separate tensors). Changes ``model`` and returns it."""
    for module in model.modules():
        if type(module) in ACTIVATION_DEAD:
            module.inplace = False  # type: ignore[assignment]
    return model
