"""What the perf model knows about a job (:class:`JobPerfSpec`), and the spec of a trace's model
name (:func:`spec_for`: a zoo model, or one of Pollux's applications, with the framework's fixed
overhead per iteration).

The zoo (and with it torch) is imported only inside the functions that read a model's facts, so
that the perf model and the simulator's hot path load without torch.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Protocol

from unstall.config import check, check_non_negative, check_positive
from unstall.errors import ConfigError, did_you_mean
from unstall.net.device_fit import REFERENCE_DEVICE
from unstall.net.device_roofline import StepFeatures
from unstall.net.device_speeds import (
    FAMILY_KINDS,
    compute_time_scale,
    has_figures,
    model_family,
    relative_speed,
)
from unstall.net.hardware import DEVICE_PRESETS, device

COMM_KINDS = ("allreduce", "ps")
PRECISIONS = ("fp32", "fp16")
DDP_BUCKET_BYTES = 25 * 2**20  # torch.nn.parallel.DistributedDataParallel(bucket_cap_mb=25)
# Training FLOPs per sample ~ 3 x forward FLOPs: the backward pass computes gradients with respect
# to both activations and weights, each about as costly as the forward pass.
TRAIN_FLOPS_PER_FORWARD = 3.0


class FactsLike(Protocol):
    """What :meth:`JobPerfSpec.from_facts` reads (``zoo.ModelFacts`` has it)."""

    @property
    def gradient_bytes(self) -> int: ...
    @property
    def gradient_tensors(self) -> int: ...
    @property
    def layers(self) -> int: ...
    @property
    def flops_per_sample(self) -> float: ...
    @property
    def winograd_flops_per_sample(self) -> float: ...


@dataclass(frozen=True, kw_only=True)
class JobPerfSpec:
    """What the perf model needs to know about a job.

    ``compute_s``: forward + backward + optimizer time of one iteration on ``device`` at
    ``local_batch`` samples per GPU, of which ``fixed_compute_s`` does not grow with the batch.
    ``overlap``: the fraction of compute time behind which communication can hide (0 = none,
    1 = all of it). ``data_s``: time the input pipeline needs per iteration (prefetched, so it only
    matters when it is the slowest part). ``family``: the measured model family whose GPU
    speeds scale the compute time between GPU types (:mod:`unstall.net.device_speeds`; None:
    the median family's).
    """

    name: str = "job"
    device: str = "v100"
    compute_s: float
    local_batch: int = 32
    fixed_compute_s: float = 0.0
    gradient_bytes: float
    gradient_tensors: int = 1
    layers: int = 1
    comm: str = "allreduce"
    overlap: float = 0.5
    bucket_bytes: float = DDP_BUCKET_BYTES
    data_s: float = 0.0
    precision: str = "fp32"
    family: str | None = None
    step: StepFeatures | None = None

    def __post_init__(self) -> None:
        check_positive(
            self,
            compute_s=self.compute_s,
            local_batch=self.local_batch,
            gradient_tensors=self.gradient_tensors,
            layers=self.layers,
            bucket_bytes=self.bucket_bytes,
        )
        check_non_negative(
            self,
            fixed_compute_s=self.fixed_compute_s,
            gradient_bytes=self.gradient_bytes,
            data_s=self.data_s,
        )
        check(
            self.fixed_compute_s <= self.compute_s,
            self,
            "fixed_compute_s",
            f"must be <= compute_s ({self.compute_s}), got {self.fixed_compute_s}",
        )
        check(0.0 <= self.overlap <= 1.0, self, "overlap", f"must be in [0, 1], got {self.overlap}")
        check(
            self.comm in COMM_KINDS, self, "comm", f"must be one of {COMM_KINDS}, got {self.comm!r}"
        )
        check(
            self.precision in PRECISIONS,
            self,
            "precision",
            f"must be one of {PRECISIONS}, got {self.precision!r}",
        )
        check(
            self.family is None or self.family in FAMILY_KINDS,
            self,
            "family",
            f"unknown model family {self.family!r}; known: {sorted(FAMILY_KINDS)} or None",
        )
        check(
            self.device.lower() in DEVICE_PRESETS,
            self,
            "device",
            f"unknown device {self.device!r}; known: {sorted(DEVICE_PRESETS)}",
        )

    @property
    def buckets(self) -> int:
        """Gradient buckets reduced one after the other (never more than there are tensors)."""
        by_bytes = max(1, math.ceil(self.gradient_bytes / self.bucket_bytes))
        return min(self.gradient_tensors, by_bytes)

    def compute_at(self, local_batch: int) -> float:
        """Compute seconds per iteration at another local batch (linear in the batch)."""
        per_sample = (self.compute_s - self.fixed_compute_s) / self.local_batch
        return self.fixed_compute_s + per_sample * local_batch

    def on_device(self, name: str) -> JobPerfSpec:
        """The same job with its compute times scaled to GPU ``name``."""
        scale = compute_time_scale(self.device, name, self.precision, self.family, self.step)
        return dataclasses.replace(
            self,
            device=device(name).name,
            compute_s=self.compute_s * scale,
            fixed_compute_s=self.fixed_compute_s * scale,
        )

    @classmethod
    def from_facts(
        cls,
        facts: FactsLike,
        *,
        device_name: str = "v100",
        local_batch: int = 32,
        precision: str = "fp32",
        family: str | None = None,
        **fields: Any,
    ) -> JobPerfSpec:
        """Estimate from a model's static facts: ``3 x forward FLOPs x batch`` at the V100's
        typical achieved fp32 rate, then scaled to ``device_name`` and ``precision`` by the
        measured speed of ``family`` there, or by the roofline's for the model's step when the
        family is not fitted (:func:`unstall.net.device_speeds.relative_speed`); a GPU with no
        figures takes its flat datasheet rate."""
        work = TRAIN_FLOPS_PER_FORWARD * facts.flops_per_sample * local_batch
        step = step_of(facts, local_batch)
        if has_figures(device_name):
            rate = device(REFERENCE_DEVICE).achieved_tflops("fp32") * 1e12
            compute_s = work / rate / relative_speed(device_name, family, precision, step)
        else:  # no figures for this GPU: its flat datasheet rate, as relative_speed says
            compute_s = work / (device(device_name).achieved_tflops(precision) * 1e12)
        return cls(
            device=device(device_name).name,
            compute_s=max(compute_s, 1e-9),
            local_batch=local_batch,
            gradient_bytes=float(facts.gradient_bytes),
            gradient_tensors=max(1, int(facts.gradient_tensors)),
            layers=max(1, int(facts.layers)),
            precision=precision,
            family=family,
            step=step,
            **fields,
        )

    @classmethod
    def from_zoo(
        cls,
        model: str,
        *,
        device_name: str = "v100",
        local_batch: int = 32,
        precision: str = "fp32",
        **fields: Any,
    ) -> JobPerfSpec:
        """:meth:`from_facts` on ``zoo.facts(model)`` (the zoo is imported only here)."""
        from unstall.workload import zoo

        return cls.from_facts(
            zoo.facts(model),
            device_name=device_name,
            local_batch=local_batch,
            precision=precision,
            family=model_family(model),
            **{"name": model, **fields},
        )


def step_of(facts: FactsLike, local_batch: int) -> StepFeatures:
    """What the GPU-speed roofline needs of a model's training step at ``local_batch``."""
    flops = max(facts.flops_per_sample, 1e-9)  # a model of look-ups only still takes a step
    return StepFeatures.of_model(
        forward_flops=flops,
        params=facts.gradient_bytes / 4.0,  # fp32 parameters
        layer_calls=max(1, int(facts.layers)),
        batch=local_batch,
        winograd_share=min(1.0, facts.winograd_flops_per_sample / flops),
        param_tensors=facts.gradient_tensors,
    )


# Pollux's workloads name applications, not models: the zoo model (and options) standing in for
# each, after the Pollux paper's Table 1 (ResNet-50 on ImageNet, ResNet-18 on CIFAR-10, ...).
APPLICATION_MODELS: dict[str, tuple[str, dict[str, object]]] = {
    "imagenet": ("resnet50", {}),
    "cifar10": ("resnet18", {"image_size": 32, "num_classes": 10}),
    "yolov3": ("resnet50", {"image_size": 416}),
    "bert": (
        "transformer",
        {"d_model": 768, "layers": 12, "heads": 12, "ff": 3072, "vocab": 30522, "seq_len": 128},
    ),
    "deepspeech2": (
        "lstm_lm",
        {"embed_dim": 800, "hidden": 800, "num_layers": 5, "vocab": 29, "tie_weights": False},
    ),
    "ncf": ("ncf", {}),
}


# Per-iteration time that does not shrink with FLOPs (kernel launches, optimizer step, Python):
# the smallest fixed compute time `unstall sim calibrate` fits on Pollux's data (NCF on a T4).
# Without it a FLOP-based estimate puts tiny models at microseconds per iteration, which would
# make their network sensitivity absurdly large.
FRAMEWORK_OVERHEAD_S = 0.007


def known_models() -> list[str]:
    """The model names :func:`spec_for` knows: the zoo's and the Pollux applications'."""
    from unstall.workload import zoo

    return sorted({*zoo.names(), *APPLICATION_MODELS})  # a set: "ncf" is in both


def spec_for(model: str, device: str) -> JobPerfSpec:
    """The perf spec of a trace's model name: a zoo model, or a Pollux application."""
    from unstall.workload import zoo

    if model in APPLICATION_MODELS:
        name, options = APPLICATION_MODELS[model]
        facts = zoo.facts(name, **options)
    elif model in zoo.MODEL_REGISTRY:
        facts = zoo.facts(model)
    else:
        raise ConfigError(
            "trace",
            "model",
            f"unknown model {model!r}{did_you_mean(model, known_models())}; known: "
            f"{known_models()}, or a measured one given as a "
            "JobProfile (`sim run --job-profile`)",
        )
    spec = JobPerfSpec.from_facts(facts, device_name=device, name=model, family=model_family(model))
    return dataclasses.replace(
        spec,
        compute_s=spec.compute_s + FRAMEWORK_OVERHEAD_S,
        fixed_compute_s=FRAMEWORK_OVERHEAD_S,
    )
