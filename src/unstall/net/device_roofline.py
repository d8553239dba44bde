"""A roofline model of one training step on a GPU, for models of no measured family (pure).

A model outside the fitted families (:mod:`unstall.net.device_fit`) would otherwise get the
median family's speeds, which know nothing about the model. The roofline predicts its step time
on each GPU from what is known about the model without running it there, and the GPUs'
datasheet figures. A step is two streams of work that run at the same time::

    host(step)     = param_tensors x tensor_s + layer_calls x launch_s      # same on every GPU
    gpu(step, g)   = flops x (1 - w + w / winograd(g)) / (fp32 peak(g) x efficiency(g))
                   + memory_passes x weight_bytes / bandwidth(g)
    t(step, g)     = (host^k + gpu^k)^(1/k)                                  # k = overlap_power

``flops`` are the step's training FLOPs (3 x forward FLOPs x samples), ``w`` the share of them
in 3x3 stride-1 convolutions, ``weight_bytes`` the parameter bytes, ``layer_calls`` the weight
layers run per step (a layer run at 20 time steps counts 20) and ``param_tensors`` the parameter
tensors the optimizer updates.

Why two streams and a soft maximum: CUDA kernel launches are asynchronous, so the host (Python,
autograd, the framework, the driver; an optimizer of that era loops over the parameter tensors
in Python) enqueues work while the GPU runs what it was given. A step is as long as the slower of
the two, plus a little where neither hides the other; the soft maximum with ``k = 4`` adds 19%
when both are equal and next to nothing when one is twice the other. A step bound by its host
therefore runs about as fast on every GPU (Gavel's ResNet-18 and Transformer at 16 samples), and
one bound by its arithmetic differs by the GPUs' FLOP rates. The host cost is one for every GPU:
a launch time per GPU, fitted on Gavel's data, came out *larger* on its V100 than on its K80
(fitted with the two streams added, A3C held out): it measured Gavel's hosts, not the GPUs.

Why ``w``: cuDNN can run 3x3 stride-1 convolutions with Winograd's minimal filtering (Lavin &
Gray 2016, "Fast Algorithms for Convolutional Neural Networks": 2.25x fewer multiplies for
F(2x2, 3x3)), and what that gains depends on the GPU generation, so a 3x3-heavy CNN gains more
from a newer GPU than its FLOPs say; the fitted ``winograd(gpu)`` is about 0.9 on a K80 (none)
and 2 on a P100 or V100. The memory term stands for every per-step GPU cost that grows with the
parameters (optimizer update, gradient zeroing and clipping).

The constants (``efficiency`` and ``winograd`` per GPU; one ``launch_s``, ``tensor_s`` and
``memory_passes``) are fitted on measured step times (:func:`fit_roofline`: least squares on log
step times with a soft-L1 loss, so that one odd job does not pull the fit); ``overlap_power`` is
fixed, not fitted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from unstall.config import check, check_non_negative, check_positive
from unstall.net.hardware import device

# Training FLOPs of a sample ~ 3 x its forward FLOPs: the backward pass computes gradients with
# respect to both activations and weights, each about as costly as the forward pass.
TRAIN_FLOPS_PER_FORWARD = 3.0
BYTES_PER_PARAM = 4.0  # fp32 weights
# The soft maximum of host and GPU time (see the module docstring): fixed, not fitted.
OVERLAP_POWER = 4.0


@dataclass(frozen=True, kw_only=True)
class StepFeatures:
    """What the roofline knows about one training step of a model at a batch size."""

    flops: float  # training FLOPs of the step
    weight_bytes: float  # parameter bytes
    layer_calls: float  # weight layers run in the step (forward)
    winograd_share: float = 0.0  # share of the FLOPs in 3x3 stride-1 convolutions
    param_tensors: float = 0.0  # parameter tensors the optimizer updates in the step

    def __post_init__(self) -> None:
        check_positive(self, flops=self.flops, layer_calls=self.layer_calls)
        check_non_negative(self, weight_bytes=self.weight_bytes, param_tensors=self.param_tensors)
        share = self.winograd_share
        check(0.0 <= share <= 1.0, self, "winograd_share", f"must be in [0, 1], got {share}")

    @classmethod
    def of_model(
        cls,
        *,
        forward_flops: float,
        params: float,
        layer_calls: float,
        batch: float,
        winograd_share: float = 0.0,
        param_tensors: float = 0.0,
    ) -> StepFeatures:
        """A step of ``batch`` samples of a model with ``forward_flops`` per sample."""
        return cls(
            flops=TRAIN_FLOPS_PER_FORWARD * forward_flops * batch,
            weight_bytes=BYTES_PER_PARAM * params,
            layer_calls=layer_calls,
            winograd_share=winograd_share,
            param_tensors=param_tensors,
        )


@dataclass(frozen=True, kw_only=True)
class GpuFigures:
    """A GPU's datasheet figures the roofline reads: fp32 peak and memory bandwidth."""

    fp32_flops: float  # FLOP/s
    memory_bytes_s: float  # bytes/s

    def __post_init__(self) -> None:
        check_positive(self, fp32_flops=self.fp32_flops, memory_bytes_s=self.memory_bytes_s)

    @classmethod
    def datasheet(cls, name: str) -> GpuFigures:
        """The figures of GPU preset ``name`` (:mod:`unstall.net.hardware`)."""
        gpu = device(name)
        return cls(fp32_flops=gpu.fp32_tflops * 1e12, memory_bytes_s=gpu.memory_gbs * 1e9)


@dataclass(frozen=True, kw_only=True)
class RooflineModel:
    """Fitted constants of the step-time roofline (see the module docstring), with the GPU
    figures they were fitted against."""

    figures: Mapping[str, GpuFigures]
    launch_s: float  # host seconds per weight-layer call, every GPU
    efficiency: Mapping[str, float]  # fraction of the fp32 peak reached, by GPU
    winograd: Mapping[str, float]  # speed-up of 3x3 stride-1 convolutions, by GPU
    memory_passes: float  # times the weight bytes cross memory per step, all GPUs
    tensor_s: float = 0.0  # host seconds per parameter tensor, every GPU
    overlap_power: float = OVERLAP_POWER  # k of the soft maximum of host and GPU time

    def __post_init__(self) -> None:
        gpus = set(self.figures)
        for field in ("efficiency", "winograd"):
            check(set(getattr(self, field)) == gpus, self, field, "one per GPU of figures")
        for name, value in self.winograd.items():
            check(value > 0, self, f"winograd.{name}", f"must be > 0, got {value}")
        for name, value in self.efficiency.items():
            check(0 < value <= 1, self, f"efficiency.{name}", f"must be in (0, 1], got {value}")
        check_non_negative(
            self, launch_s=self.launch_s, memory_passes=self.memory_passes, tensor_s=self.tensor_s
        )
        check(self.overlap_power >= 1.0, self, "overlap_power", "must be >= 1 (1: no overlap)")

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(sorted(self.figures))

    def host_time(self, step: StepFeatures) -> float:
        """Host seconds of ``step``: launches and per-tensor work, the same on every GPU."""
        return step.layer_calls * self.launch_s + step.param_tensors * self.tensor_s

    def gpu_time(self, name: str, step: StepFeatures) -> float:
        """GPU seconds of ``step`` on ``name``: arithmetic and parameter traffic."""
        check(name in self.figures, "RooflineModel", "device", f"not fitted on {name!r}")
        gpu = self.figures[name]
        w = step.winograd_share
        arithmetic = step.flops * (1.0 - w + w / self.winograd[name])
        return (
            arithmetic / (gpu.fp32_flops * self.efficiency[name])
            + self.memory_passes * step.weight_bytes / gpu.memory_bytes_s
        )

    def step_time(self, name: str, step: StepFeatures) -> float:
        """Predicted seconds of ``step`` on GPU ``name`` (one the model was fitted on): the soft
        maximum of its host and GPU times."""
        k = self.overlap_power
        gpu = self.gpu_time(name, step)
        host = self.host_time(step)
        top = max(host, gpu)
        return top * ((host / top) ** k + (gpu / top) ** k) ** (1.0 / k)

    def speeds(self, step: StepFeatures, reference: str) -> dict[str, float]:
        """Each fitted GPU's speed on ``step`` relative to ``reference``: ``t(ref) / t(gpu)``."""
        ref = self.step_time(reference, step)
        return {name: ref / self.step_time(name, step) for name in self.devices}


@dataclass(frozen=True, kw_only=True)
class MeasuredStep:
    """One job's step features and its measured seconds per step on each GPU."""

    step: StepFeatures
    seconds: Mapping[str, float]

    def __post_init__(self) -> None:
        for name, value in self.seconds.items():
            check(value > 0, self, f"seconds.{name}", f"must be > 0, got {value!r}")


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _unpack(
    theta: Sequence[float], figures: Mapping[str, GpuFigures], overlap_power: float
) -> RooflineModel:
    """Unconstrained parameters -> constants: log launch seconds, logit efficiency and log
    Winograd gain per GPU, log memory passes, log seconds per tensor."""
    devices = sorted(figures)
    n = len(devices)
    return RooflineModel(
        figures=figures,
        launch_s=math.exp(theta[0]),
        efficiency={d: _sigmoid(theta[1 + i]) for i, d in enumerate(devices)},
        winograd={d: math.exp(theta[1 + n + i]) for i, d in enumerate(devices)},
        memory_passes=math.exp(theta[1 + 2 * n]),
        tensor_s=math.exp(theta[2 + 2 * n]),
        overlap_power=overlap_power,
    )


def fit_roofline(
    measured: Sequence[MeasuredStep],
    *,
    figures: Mapping[str, GpuFigures] | None = None,
    loss_scale: float = 0.3,
    overlap_power: float = OVERLAP_POWER,
) -> RooflineModel:
    """Least squares on ``log t_predicted - log t_measured`` over every job and GPU, soft-L1
    beyond ``loss_scale`` (about 35% off). The GPUs are those every job was measured on, with
    ``figures`` (default: their datasheet figures, :meth:`GpuFigures.datasheet`);
    ``overlap_power`` is the soft maximum's ``k``, held fixed."""
    from scipy.optimize import least_squares  # scipy only where a fit runs

    check(len(measured) >= 3, "fit_roofline", "measured", "needs at least 3 jobs")
    devices = sorted(set.intersection(*(set(m.seconds) for m in measured)))
    check(bool(devices), "fit_roofline", "measured", "no GPU is common to every job")
    given = dict(figures or {})
    gpus = {d: given[d] if d in given else GpuFigures.datasheet(d) for d in devices}

    def residuals(theta: Sequence[float]) -> list[float]:
        model = _unpack(theta, gpus, overlap_power)
        return [
            math.log(model.step_time(d, m.step) / m.seconds[d]) for m in measured for d in devices
        ]

    # Start at 0.1 ms a layer call, half the peak, no Winograd gain, one pass over the weights,
    # 0.1 ms a parameter tensor.
    start = [math.log(1e-4)] + [0.0] * (2 * len(devices)) + [0.0, math.log(1e-4)]
    fit = least_squares(residuals, start, loss="soft_l1", f_scale=loss_scale)
    return _unpack(list(fit.x), gpus, overlap_power)
