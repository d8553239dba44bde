"""Forward/backward sparsity of a CNN in training, layer by layer, from real SGD steps.

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
(:mod:`unstall.sparse.accelerator`) exploits ``dL/dZ``'s zeros by default (``bn_gradient =
"folded"``): that is exact when BN acts as a per-channel affine map in the backward pass (BN folded
into the conv, frozen statistics, or normalisation-free nets), where ``dL/dY = (gamma/sigma) dZ``
has the same zeros. ``bn_gradient = "exact"`` uses autograd's dense ``dL/dY`` instead.

**GEMM shapes** (per convolution group ``g``; ``P = N * Ho * Wo`` output pixels of the batch):

=================  ===============  ==================  ====================
GEMM               M (rows of A)    K (reduction)       N (columns of B)
=================  ===============  ==================  ====================
forward            P                Cin/g * kh * kw     Cout/g
input gradient     P                Cout/g              Cin/g * kh * kw
weight gradient    Cout/g           P                   Cin/g * kh * kw
=================  ===============  ==================  ====================

The input gradient is taken in its col2im form (``dcols = dY @ W^T``, then scatter-add into
``dX``), which does the same multiply-accumulates as the forward pass; a Linear layer is the case
``kh = kw = Ho = Wo = 1`` (with ``N`` the rows of its input). The first layer computes no input
gradient (the images need none).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from unstall.config import check
from unstall.errors import ConfigError
from unstall.results import JsonResult
from unstall.sparse.cnn_data import FolderImages, ImageSource, PatternConfig, PatternImages
from unstall.workload import zoo

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


# --- what the hooks record ------------------------------------------------------------------------

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


# --- the training run ----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class AnalyzerConfig:
    """A short real training run of a zoo CNN whose last ``steps`` steps are recorded.

    ``data`` is a ``root/<class>/<images>`` folder; None trains on learnable synthetic classes
    (:class:`unstall.sparse.cnn_data.PatternImages`). ``warmup_steps`` of plain SGD run first, so
    that the recorded sparsity is that of a network that has trained for a while.
    """

    model: str = "resnet18"
    image_size: int = 64
    num_classes: int = 10
    batch_size: int = 8
    warmup_steps: int = 0
    steps: int = 1
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 5e-4
    clip_grad_norm: float | None = 5.0
    data: Path | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        model = zoo.spec(self.model)
        check(model.input_kind == "image", self, "model", f"{self.model} is not an image CNN")
        check(self.image_size >= 32, self, "image_size", "must be >= 32 (the zoo's minimum)")
        check(self.num_classes >= 2, self, "num_classes", "must be >= 2")
        check(self.batch_size >= 1, self, "batch_size", "must be >= 1")
        check(self.warmup_steps >= 0, self, "warmup_steps", "must be >= 0")
        check(self.steps >= 1, self, "steps", "must be >= 1 (recorded steps)")
        check(self.lr > 0, self, "lr", "must be > 0")
        check(0 <= self.momentum < 1, self, "momentum", "must be in [0, 1)")
        check(self.weight_decay >= 0, self, "weight_decay", "must be >= 0")
        clip = self.clip_grad_norm
        check(clip is None or clip > 0, self, "clip_grad_norm", "must be > 0 or None")


@dataclass(frozen=True, kw_only=True)
class LayerSparsity(JsonResult):
    """Densities of one layer, averaged over the recorded steps (None: not applicable)."""

    index: int
    name: str
    kind: LayerKind
    activation: str  # path from the output to its activation, e.g. "bn+relu"; "none"
    input_density: float
    grad_density: float  # dL/dY as autograd gives it
    relu_grad_density: float | None  # dL/dZ at the activation's input
    mask_zero_fraction: float | None  # share of outputs whose gradient the forward mask zeroes
    known_zero_share: float | None  # share of dL/dZ's zeros that the forward mask predicts
    input_dead_fraction: float | None  # share of inputs whose gradient is known to be unused
    gemms: LayerGemms


@dataclass(frozen=True, kw_only=True)
class TrainingSummary(JsonResult):
    """Evidence that the network trained: loss at the start and end of the warm-up."""

    warmup_steps: int
    warmup_loss_start: float | None  # mean over the first tenth of the warm-up steps
    warmup_loss_end: float | None  # mean over the last tenth
    recorded_loss: float
    recorded_accuracy: float  # training-batch accuracy over the recorded steps
    chance_loss: float  # ln(classes): the loss of a uniform guess


@dataclass(frozen=True, kw_only=True)
class SparsityProfile(JsonResult):
    """Per-layer sparsity of a CNN's training step."""

    model: str
    image_size: int
    batch_size: int
    data: str
    layers: tuple[LayerSparsity, ...]
    training: TrainingSummary


class _Counts:
    """Running non-zero counts of one layer over the recorded steps."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}

    def add(self, key: str, part: torch.Tensor, whole: torch.Tensor | None = None) -> None:
        self.sums[key + ".n"] = self.sums.get(key + ".n", 0.0) + float(part.sum().item())
        total = float(whole.sum().item()) if whole is not None else float(part.numel())
        self.sums[key + ".d"] = self.sums.get(key + ".d", 0.0) + total

    def ratio(self, key: str) -> float | None:
        if key + ".d" not in self.sums:
            return None
        den = self.sums[key + ".d"]
        return self.sums[key + ".n"] / den if den > 0 else None

    def observe(self, t: LayerTensors) -> None:
        assert t.dy_nz is not None
        self.add("input", t.x_nz)
        self.add("grad", t.dy_nz)
        if t.x_alive is not None:
            self.add("input_dead", ~t.x_alive)
        if t.dz_nz is not None and t.known_dead is not None:
            self.add("relu_grad", t.dz_nz)
            self.add("mask_zero", t.known_dead)
            self.add("known_share", t.known_dead & ~t.dz_nz, ~t.dz_nz)


def _source(config: AnalyzerConfig, seed: int) -> ImageSource:
    if config.data is not None:
        return FolderImages(config.data, config.image_size)
    pattern = PatternConfig(num_classes=config.num_classes, image_size=config.image_size)
    return PatternImages(pattern, seed)


def build_model(config: AnalyzerConfig, num_classes: int) -> nn.Module:
    """The zoo model with its activations made out-of-place (same maths; the hooks need the
    activation's input and output as separate tensors)."""
    model = zoo.build(config.model, image_size=config.image_size, num_classes=num_classes)
    for module in model.modules():
        if type(module) in ACTIVATION_DEAD:
            module.inplace = False  # type: ignore[assignment]
    return model


def profile_training(
    config: AnalyzerConfig,
    *,
    on_layer: Callable[[LayerTensors], None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> SparsityProfile:
    """Train ``config.model`` for ``warmup_steps`` + ``steps`` SGD steps; record the last
    ``steps``. ``on_layer`` sees every layer's masks of every recorded step (the speed model
    uses them); ``progress(1)`` is called after each step."""
    init_seed, data_seed, dropout_seed = (int(s) for s in _seeds(config.seed))
    source = _source(config, data_seed)
    data_gen = torch.Generator().manual_seed(data_seed)
    with torch.random.fork_rng(devices=[]):  # model init and dropout, without touching the caller
        torch.manual_seed(init_seed)
        model = build_model(config, source.num_classes)
        torch.manual_seed(dropout_seed)
        names: dict[nn.Module, str] = {
            m: n for n, m in model.named_modules() if isinstance(m, nn.Conv2d | nn.Linear)
        }
        model.train()
        optimizer = torch.optim.SGD(
            model.parameters(),
            lr=config.lr,
            momentum=config.momentum,
            weight_decay=config.weight_decay,
        )
        loss_fn = zoo.loss_fn(config.model)
        warmup = [
            _train_step(model, optimizer, loss_fn, source, config, data_gen, progress)[0]
            for _ in range(config.warmup_steps)
        ]
        counts = {name: _Counts() for name in names.values()}
        recorder = _StepRecorder(model, names)
        recorder.attach()
        losses, correct = [], 0
        try:
            for _ in range(config.steps):
                recorder.start_step()
                loss, hits = _train_step(
                    model, optimizer, loss_fn, source, config, data_gen, progress
                )
                losses.append(loss)
                correct += hits
                for record in recorder.pending.values():
                    counts[record.name].observe(record)
                    if on_layer is not None:
                        on_layer(record)
        finally:
            recorder.detach()
        layers = _layer_rows(names, counts, recorder)
    training = _training_summary(warmup, losses, correct, config, source.num_classes)
    data = str(config.data) if config.data is not None else "synthetic patterns"
    return SparsityProfile(
        model=config.model,
        image_size=config.image_size,
        batch_size=config.batch_size,
        data=data,
        layers=layers,
        training=training,
    )


def _seeds(seed: int) -> list[int]:
    import numpy as np

    return [int(s) for s in np.random.SeedSequence(seed).generate_state(3)]


def _train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: nn.Module,
    source: ImageSource,
    config: AnalyzerConfig,
    generator: torch.Generator,
    progress: Callable[[int], None] | None,
) -> tuple[float, int]:
    """One SGD step; returns the loss and the number of correct predictions."""
    images, labels = source.batch(config.batch_size, generator)
    optimizer.zero_grad(set_to_none=True)
    logits = model(images)
    loss = loss_fn(logits, labels)
    loss.backward()
    if config.clip_grad_norm is not None:
        nn.utils.clip_grad_norm_(model.parameters(), config.clip_grad_norm)
    optimizer.step()
    if progress is not None:
        progress(1)
    return float(loss.item()), int((logits.argmax(dim=1) == labels).sum().item())


def _layer_rows(
    names: dict[nn.Module, str], counts: dict[str, _Counts], recorder: _StepRecorder
) -> tuple[LayerSparsity, ...]:
    rows = []
    for index, name in enumerate(names.values()):
        record = recorder.pending.get(name)
        c = counts[name]
        if record is None:  # a layer the forward pass never reached
            continue
        rows.append(
            LayerSparsity(
                index=index,
                name=name,
                kind=record.geometry.kind,
                activation=record.activation,
                input_density=c.ratio("input") or 0.0,
                grad_density=c.ratio("grad") or 0.0,
                relu_grad_density=c.ratio("relu_grad"),
                mask_zero_fraction=c.ratio("mask_zero"),
                known_zero_share=c.ratio("known_share"),
                input_dead_fraction=c.ratio("input_dead"),
                gemms=record.gemms,
            )
        )
    return tuple(rows)


def _training_summary(
    warmup: list[float], losses: list[float], correct: int, config: AnalyzerConfig, classes: int
) -> TrainingSummary:
    tenth = max(1, len(warmup) // 10)
    return TrainingSummary(
        warmup_steps=len(warmup),
        warmup_loss_start=sum(warmup[:tenth]) / tenth if warmup else None,
        warmup_loss_end=sum(warmup[-tenth:]) / tenth if warmup else None,
        recorded_loss=sum(losses) / len(losses),
        recorded_accuracy=correct / (len(losses) * config.batch_size),
        chance_loss=math.log(classes),
    )
