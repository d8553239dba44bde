"""Static facts of a ``torch.nn`` model, measured from the module itself: its parameter tensors,
gradient bytes, weight layers and forward FLOPs.

Definitions (the comm-stall model and the simulator read these, so they are fixed here):

- ``params``: elements of all parameters; a tensor shared by two modules (tied weights) counts
  once, as it has one gradient.
- ``gradient_tensors`` / ``gradient_bytes``: the trainable parameter tensors and their bytes
  (``numel * element_size``; 4 bytes an element in float32). Buffers (BatchNorm running
  statistics) carry no gradient and are not counted.
- ``layers``: weight layers. Each convolution, ``Linear`` and ``Embedding`` counts 1; an
  RNN/LSTM/GRU counts ``num_layers`` (a bidirectional layer counts once); a ``MultiheadAttention``
  counts 1 for its packed Q/K/V input projection, and its ``out_proj`` is a ``Linear`` that counts
  1 more, so a transformer encoder layer counts 4 (attention in, attention out, two feed-forward
  linears). Normalisation layers, activations and pooling have no count.
- ``flops_per_sample``: forward FLOPs of one sample, as 2 x multiply-accumulates of the dense
  layers, counted by forward hooks during one real forward pass: convolutions, ``Linear``,
  recurrent layers (gates x (input + hidden) x hidden per time step and layer), multi-head
  attention (Q/K/V and output projections plus QK^T and attention x V, dense even under a causal
  mask); embeddings are look-ups and count 0. Elementwise work (activations, normalisation, biases,
  pooling, residual additions, softmax) is ignored: it is a few percent of a CNN's FLOPs.
- ``winograd_flops_per_sample``: the part of ``flops_per_sample`` in 2-D convolutions with a 3x3
  kernel, stride 1, no dilation and no groups: the ones cuDNN can run with Winograd's minimal
  filtering, which the GPU-speed roofline treats apart (:mod:`unstall.net.device_roofline`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from unstall.results import JsonResult


@dataclass(frozen=True, kw_only=True)
class TensorFact(JsonResult):
    """One parameter tensor: its qualified name, shape, elements and bytes."""

    name: str
    shape: tuple[int, ...]
    numel: int
    bytes: int


@dataclass(frozen=True, kw_only=True)
class ModelFacts(JsonResult):
    """What a model is, statically: see the module docstring for every definition.

    ``options`` are the model's full options (defaults filled in) as sorted ``(name, value)``
    pairs; ``tensors`` are the parameter tensors in module registration order.
    """

    name: str
    options: tuple[tuple[str, object], ...]
    input_kind: str
    input_shape: tuple[int, ...]
    params: int
    gradient_bytes: int
    gradient_tensors: int
    layers: int
    flops_per_sample: float
    largest_tensor_bytes: int
    tensors: tuple[TensorFact, ...]
    winograd_flops_per_sample: float = 0.0

    @property
    def options_dict(self) -> dict[str, object]:
        return dict(self.options)


# --- layers -------------------------------------------------------------------------------------


def _one(_: nn.Module) -> int:
    return 1


def _rnn_layers(m: nn.Module) -> int:
    assert isinstance(m, nn.RNNBase)
    return m.num_layers


# Module type -> weight layers it counts for; looked up along the module's class hierarchy.
LAYER_COUNTS: dict[type[nn.Module], Callable[[nn.Module], int]] = {
    nn.Conv1d: _one,
    nn.Conv2d: _one,
    nn.Conv3d: _one,
    nn.ConvTranspose1d: _one,
    nn.ConvTranspose2d: _one,
    nn.ConvTranspose3d: _one,
    nn.Linear: _one,
    nn.Bilinear: _one,
    nn.Embedding: _one,
    nn.EmbeddingBag: _one,
    nn.RNNBase: _rnn_layers,
    nn.MultiheadAttention: _one,
}


def _lookup(table: Mapping[type[nn.Module], Any], module: nn.Module) -> Any:
    """The entry for the nearest class of ``module`` found in ``table``, or None."""
    for cls in type(module).__mro__:
        if cls in table:
            return table[cls]
    return None


def count_layers(model: nn.Module) -> int:
    """Weight layers of ``model`` (see the module docstring)."""
    total = 0
    for m in model.modules():
        counter = _lookup(LAYER_COUNTS, m)
        total += counter(m) if counter is not None else 0
    return total


# --- FLOPs --------------------------------------------------------------------------------------

# A counter gets (module, positional inputs, keyword inputs, output) and returns forward FLOPs.
FlopCounter = Callable[[nn.Module, tuple[Any, ...], dict[str, Any], Any], float]


def _conv_flops(m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> float:
    assert isinstance(m, nn.Conv1d | nn.Conv2d | nn.Conv3d)
    macs_per_output = math.prod(m.kernel_size) * (m.in_channels // m.groups)
    return 2.0 * out.numel() * macs_per_output


def _linear_flops(m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> float:
    assert isinstance(m, nn.Linear)
    return 2.0 * m.in_features * out.numel()  # out.numel() = rows x out_features


RNN_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


def _rnn_flops(m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> float:
    assert isinstance(m, nn.RNNBase)
    x = args[0] if args else kwargs["input"]
    data = x.data if isinstance(x, nn.utils.rnn.PackedSequence) else x
    steps = data.numel() // m.input_size  # time steps x sequences
    directions = 2 if m.bidirectional else 1
    per_step, in_size = 0, m.input_size
    for _ in range(m.num_layers):
        per_step += directions * RNN_GATES[m.mode] * (in_size + m.hidden_size) * m.hidden_size
        in_size = m.hidden_size * directions
    return 2.0 * steps * per_step


def _attention_flops(
    m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
) -> float:
    assert isinstance(m, nn.MultiheadAttention)
    query = args[0] if args else kwargs["query"]
    key = args[1] if len(args) > 1 else kwargs["key"]
    if query.dim() == 2:  # unbatched (L, E)
        batch, lq, lk = 1, query.shape[0], key.shape[0]
    elif m.batch_first:
        batch, lq, lk = query.shape[0], query.shape[1], key.shape[1]
    else:
        batch, lq, lk = query.shape[1], query.shape[0], key.shape[0]
    e = m.embed_dim
    projections = lq * e * e + lk * m.kdim * e + lk * m.vdim * e + lq * e * e  # q, k, v, out
    scores_and_mix = 2 * lq * lk * e  # QK^T and attention x V over all heads
    return 2.0 * batch * (projections + scores_and_mix)


def _no_flops(m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> float:
    return 0.0


# Module type -> FLOP counter. MultiheadAttention calls its out_proj's weight directly (that
# Linear's own hook never fires), so the attention counter includes the output projection.
FLOP_COUNTERS: dict[type[nn.Module], FlopCounter] = {
    nn.Conv1d: _conv_flops,
    nn.Conv2d: _conv_flops,
    nn.Conv3d: _conv_flops,
    nn.Linear: _linear_flops,
    nn.RNNBase: _rnn_flops,
    nn.MultiheadAttention: _attention_flops,
    nn.Embedding: _no_flops,
}


def count_flops(model: nn.Module, inputs: torch.Tensor) -> float:
    """Forward FLOPs per sample of ``model`` on the batch ``inputs`` (first dimension = samples).

    Runs one forward pass in eval mode (dropout off, BatchNorm on running statistics, so a batch
    of one works) with autograd on: PyTorch's fused inference path for transformer layers would
    otherwise skip the hooks. Works on the ``meta`` device, where nothing is computed.
    """
    return sum(f for _, f in _flops_by_call(model, inputs)) / inputs.shape[0]


def is_winograd_conv(m: nn.Module) -> bool:
    """A 2-D convolution cuDNN can run with Winograd's minimal filtering: 3x3, stride 1, no
    dilation, no groups."""
    return (
        isinstance(m, nn.Conv2d)
        and tuple(m.kernel_size) == (3, 3)
        and tuple(m.stride) == (1, 1)
        and tuple(m.dilation) == (1, 1)
        and m.groups == 1
    )


def _flops_by_call(model: nn.Module, inputs: torch.Tensor) -> list[tuple[nn.Module, float]]:
    """Every counted layer call of one forward pass on ``inputs`` with its FLOPs (all samples)."""
    flops: list[tuple[nn.Module, float]] = []
    handles = []
    for m in model.modules():
        counter = _lookup(FLOP_COUNTERS, m)
        if counter is not None:
            handles.append(m.register_forward_hook(_recorder(counter, flops), with_kwargs=True))
    was_training = model.training
    model.eval()
    try:
        with torch.enable_grad():
            model(inputs)
    finally:
        model.train(was_training)
        for h in handles:
            h.remove()
    return flops


def _recorder(counter: FlopCounter, flops: list[tuple[nn.Module, float]]) -> Callable[..., None]:
    """A forward hook that appends the module and what ``counter`` says the call cost."""

    def hook(m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        flops.append((m, counter(m, args, kwargs, out)))

    return hook


# --- tensors and the whole -----------------------------------------------------------------------


def tensor_facts(model: nn.Module) -> tuple[TensorFact, ...]:
    """Every parameter tensor in registration order (shared tensors once)."""
    return tuple(
        TensorFact(
            name=name,
            shape=tuple(p.shape),
            numel=p.numel(),
            bytes=p.numel() * p.element_size(),
        )
        for name, p in model.named_parameters()
    )


def measure_model(
    model: nn.Module,
    inputs: torch.Tensor,
    *,
    name: str,
    options: tuple[tuple[str, object], ...],
    input_kind: str,
) -> ModelFacts:
    """All static facts of ``model``; ``inputs`` is a batch of its default input."""
    tensors = tensor_facts(model)
    trainable = [p for p in model.parameters() if p.requires_grad]
    calls = _flops_by_call(model, inputs)
    samples = inputs.shape[0]
    return ModelFacts(
        name=name,
        options=options,
        input_kind=input_kind,
        input_shape=tuple(inputs.shape[1:]),
        params=sum(t.numel for t in tensors),
        gradient_bytes=sum(p.numel() * p.element_size() for p in trainable),
        gradient_tensors=len(trainable),
        layers=count_layers(model),
        flops_per_sample=sum(f for _, f in calls) / samples,
        largest_tensor_bytes=max((t.bytes for t in tensors), default=0),
        tensors=tensors,
        winograd_flops_per_sample=sum(f for m, f in calls if is_winograd_conv(m)) / samples,
    )
