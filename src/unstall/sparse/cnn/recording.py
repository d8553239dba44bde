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

**GEMM shapes**: see :mod:`unstall.sparse.gemms` (im2col; the input gradient in col2im form).
The first layer computes no input gradient (the images need none).

:func:`record_step` runs one forward/backward pass of any model with the hooks attached;
:func:`profile_training` trains a zoo CNN (``warmup_steps``, then ``steps`` recorded ones).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from unstall.config import check
from unstall.results import JsonResult
from unstall.sparse import train_cache
from unstall.sparse.cnn_data import FolderImages, ImageSource, PatternConfig, PatternImages
from unstall.sparse.gemms import (
    LayerGemms,
    LayerGeometry,
    LayerKind,
    gemm_shapes,
    geometry_of,
    im2col_mask,
)
from unstall.workload import zoo

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
    output as separate tensors (see :func:`build_model`).
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
    padding_share: float = 0.0  # share of the im2col operand (forward A) that is zero padding
    gemms: LayerGemms


class SparsityCounter:
    """Non-zero counts of one layer over recorded steps, turned into a :class:`LayerSparsity`."""

    def __init__(self) -> None:
        self.sums: dict[str, list[float]] = {}
        # what the result names, not the masks (they are large: one step's are let go)
        self.about: tuple[str, LayerKind, str, LayerGemms] | None = None

    def _add(self, key: str, part: torch.Tensor, whole: torch.Tensor | None = None) -> None:
        total = float(whole.sum().item()) if whole is not None else float(part.numel())
        acc = self.sums.setdefault(key, [0.0, 0.0])
        acc[0] += float(part.sum().item())
        acc[1] += total

    def _ratio(self, key: str) -> float | None:
        acc = self.sums.get(key)
        return acc[0] / acc[1] if acc is not None and acc[1] > 0 else None

    def observe(self, t: LayerTensors) -> None:
        assert t.dy_nz is not None, "backward pass not recorded"
        self.about = (t.name, t.geometry.kind, t.activation, t.gemms)
        self._add("input", t.x_nz)
        if "padding" not in self.sums:  # geometry only: the same every step
            self._add("padding", ~im2col_mask(torch.ones_like(t.x_nz[:1]), t.geometry))
        self._add("grad", t.dy_nz)
        if t.x_alive is not None:
            self._add("input_dead", ~t.x_alive)
        if t.dz_nz is not None and t.known_dead is not None:
            self._add("relu_grad", t.dz_nz)
            self._add("mask_zero", t.known_dead)
            self._add("known_share", t.known_dead & ~t.dz_nz, ~t.dz_nz)

    def result(self, index: int) -> LayerSparsity:
        assert self.about is not None, "no step observed"
        name, kind, activation, gemms = self.about
        return LayerSparsity(
            index=index,
            name=name,
            kind=kind,
            activation=activation,
            input_density=self._ratio("input") or 0.0,
            grad_density=self._ratio("grad") or 0.0,
            relu_grad_density=self._ratio("relu_grad"),
            mask_zero_fraction=self._ratio("mask_zero"),
            known_zero_share=self._ratio("known_share"),
            input_dead_fraction=self._ratio("input_dead"),
            padding_share=self._ratio("padding") or 0.0,
            gemms=gemms,
        )


def summarize(records: Sequence[LayerTensors]) -> list[LayerSparsity]:
    """Per-layer densities of the records of one or more steps, in first-seen order."""
    counters: dict[str, SparsityCounter] = {}
    for record in records:
        counters.setdefault(record.name, SparsityCounter()).observe(record)
    return [c.result(i) for i, c in enumerate(counters.values())]


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
    eval_images: int = 128  # accuracy after the warm-up, on this many fresh images (eval mode)

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
        check(self.eval_images >= 1, self, "eval_images", "must be >= 1")


@dataclass(frozen=True, kw_only=True)
class TrainingSummary(JsonResult):
    """Evidence that the network trained: loss at the start and end of the warm-up."""

    warmup_steps: int
    warmup_loss_start: float | None  # mean over the first tenth of the warm-up steps
    warmup_loss_end: float | None  # mean over the last tenth
    warmup_accuracy_end: float | None  # training-batch accuracy over the last tenth
    recorded_loss: float
    recorded_accuracy: float  # training-batch accuracy over the recorded steps
    chance_loss: float  # ln(classes): the loss of a uniform guess
    eval_accuracy: float | None = None  # eval mode, fresh images, after the warm-up


@dataclass(frozen=True, kw_only=True)
class SparsityProfile(JsonResult):
    """Per-layer sparsity of a CNN's training step."""

    model: str
    image_size: int
    batch_size: int
    data: str
    layers: tuple[LayerSparsity, ...]
    training: TrainingSummary


def build_model(config: AnalyzerConfig, num_classes: int) -> nn.Module:
    """The zoo model with its activations made out-of-place (same maths; the hooks need the
    activation's input and output as separate tensors)."""
    model = zoo.build(config.model, image_size=config.image_size, num_classes=num_classes)
    for module in model.modules():
        if type(module) in ACTIVATION_DEAD:
            module.inplace = False  # type: ignore[assignment]
    return model


def _source(config: AnalyzerConfig, seed: int) -> ImageSource:
    if config.data is not None:
        return FolderImages(config.data, config.image_size)
    pattern = PatternConfig(num_classes=config.num_classes, image_size=config.image_size)
    return PatternImages(pattern, seed)


def profile_training(
    config: AnalyzerConfig,
    *,
    on_layer: Callable[[LayerTensors], None] | None = None,
    progress: Callable[[int], None] | None = None,
    cache_dir: Path | None = None,
    checkpoint_every: int = 100,
) -> SparsityProfile:
    """Train ``config.model`` for ``warmup_steps`` + ``steps`` SGD steps; record the last
    ``steps``. ``on_layer`` sees every layer's masks of every recorded step (the speed model
    uses them); ``progress(n)`` is called as steps finish. With ``cache_dir`` the warm-up
    resumes from the newest checkpoint of the same training (:mod:`unstall.sparse.train_cache`)
    and saves one every ``checkpoint_every`` steps and at its end."""
    seeds = np.random.SeedSequence(config.seed).generate_state(4)
    init_seed, data_seed, dropout_seed, eval_seed = (int(s) for s in seeds)
    source = _source(config, data_seed)
    data_gen = torch.Generator().manual_seed(data_seed)
    loss_fn = zoo.loss_fn(config.model)
    with torch.random.fork_rng(devices=[]):  # model init and dropout, without touching the caller
        torch.manual_seed(init_seed)
        model = build_model(config, source.num_classes)
        torch.manual_seed(dropout_seed)
        model.train()
        optimizer = torch.optim.SGD(
            model.parameters(),
            lr=config.lr,
            momentum=config.momentum,
            weight_decay=config.weight_decay,
        )
        run = _Run(model, optimizer, loss_fn, source, data_gen, config, progress)
        warmup = run.warm_up(cache_dir, checkpoint_every)
        eval_accuracy = (
            _eval_accuracy(model, source, eval_seed, config.eval_images) if warmup.losses else None
        )
        counters, losses, correct = _recorded_steps(run, on_layer)
    layers = tuple(c.result(i) for i, c in enumerate(counters.values()))
    training = _training_summary(warmup, losses, correct, config, source.num_classes)
    training = dataclasses.replace(training, eval_accuracy=eval_accuracy)
    data = str(config.data) if config.data is not None else "synthetic patterns"
    return SparsityProfile(
        model=config.model,
        image_size=config.image_size,
        batch_size=config.batch_size,
        data=data,
        layers=layers,
        training=training,
    )


@dataclass
class _Run:
    """A training run's parts: the model, its optimizer and loss, and where batches come from."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    source: ImageSource
    data_gen: torch.Generator
    config: AnalyzerConfig
    progress: Callable[[int], None] | None

    def warm_up(self, cache_dir: Path | None, checkpoint_every: int) -> train_cache.TrainState:
        """The unrecorded SGD steps, resumed from and saved to ``cache_dir`` when given."""
        check(checkpoint_every >= 1, "profile_training", "checkpoint_every", "must be >= 1")
        total = self.config.warmup_steps
        state = (
            None if cache_dir is None else train_cache.load_latest(cache_dir, self.config, total)
        )
        if state is not None:
            self.model.load_state_dict(state.model)
            self.optimizer.load_state_dict(state.optimizer)
            self.data_gen.set_state(state.data_rng)
            torch.set_rng_state(state.torch_rng)
            if self.progress is not None and state.steps:
                self.progress(state.steps)
        else:
            state = train_cache.TrainState(
                0, {}, {}, self.data_gen.get_state(), torch.get_rng_state(), [], []
            )
        for step in range(state.steps, total):
            loss, correct = self.plain_step()
            state.losses.append(loss)
            state.correct.append(correct)
            done = step + 1
            if cache_dir is not None and (done % checkpoint_every == 0 or done == total):
                state.steps = done
                state.model, state.optimizer = self.model.state_dict(), self.optimizer.state_dict()
                state.data_rng, state.torch_rng = self.data_gen.get_state(), torch.get_rng_state()
                train_cache.save(cache_dir, self.config, state)
        state.steps = total
        return state

    def plain_step(self) -> tuple[float, int]:
        """One unrecorded SGD step; returns its loss and its correct predictions."""
        images, labels = self.source.batch(self.config.batch_size, self.data_gen)
        self.optimizer.zero_grad(set_to_none=True)
        logits = self.model(images)
        loss = self.loss_fn(logits, labels)
        loss.backward()
        self.sgd_step()
        if self.progress is not None:
            self.progress(1)
        return float(loss.item()), int((logits.argmax(dim=1) == labels).sum().item())

    def sgd_step(self) -> None:
        if self.config.clip_grad_norm is not None:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.config.clip_grad_norm)
        self.optimizer.step()


def _eval_accuracy(model: nn.Module, source: ImageSource, seed: int, count: int) -> float:
    """Accuracy in eval mode on ``count`` images drawn with their own generator (fresh samples
    for the synthetic classes; for a folder, images of the training set)."""
    gen = torch.Generator().manual_seed(seed)
    model.eval()
    correct = 0
    with torch.no_grad():
        for lo in range(0, count, 32):
            images, labels = source.batch(min(32, count - lo), gen)
            correct += int((model(images).argmax(dim=1) == labels).sum().item())
    model.train()
    return correct / count


def _recorded_steps(
    run: _Run, on_layer: Callable[[LayerTensors], None] | None
) -> tuple[dict[str, SparsityCounter], list[float], int]:
    """The recorded SGD steps: per-layer counters, losses, correct predictions."""
    counters: dict[str, SparsityCounter] = {}
    losses, correct = [], 0
    for _ in range(run.config.steps):
        images, labels = run.source.batch(run.config.batch_size, run.data_gen)
        run.optimizer.zero_grad(set_to_none=True)
        loss, logits, records = record_step(run.model, images, labels, run.loss_fn)
        run.sgd_step()
        losses.append(float(loss.item()))
        correct += int((logits.argmax(dim=1) == labels).sum().item())
        for record in records:
            counters.setdefault(record.name, SparsityCounter()).observe(record)
            if on_layer is not None:
                on_layer(record)
        del records  # the masks of a big model are hundreds of MB: free them before the next
        if run.progress is not None:
            run.progress(1)
    return counters, losses, correct


def _training_summary(
    warmup: train_cache.TrainState,
    losses: list[float],
    correct: int,
    config: AnalyzerConfig,
    classes: int,
) -> TrainingSummary:
    w = warmup.losses
    tenth = max(1, len(w) // 10)
    last_correct = sum(warmup.correct[-tenth:])
    return TrainingSummary(
        warmup_steps=len(w),
        warmup_loss_start=sum(w[:tenth]) / tenth if w else None,
        warmup_loss_end=sum(w[-tenth:]) / tenth if w else None,
        warmup_accuracy_end=last_correct / (tenth * config.batch_size) if w else None,
        recorded_loss=sum(losses) / len(losses),
        recorded_accuracy=correct / (len(losses) * config.batch_size),
        chance_loss=math.log(classes),
    )
