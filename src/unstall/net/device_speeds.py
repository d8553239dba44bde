"""How fast a GPU trains a model of a given family, relative to a V100 in fp32: from measurements.

Three sources, in this order:

1. **Measured, K80 / P100 / V100**: the package's data file ``net/data/device_speeds.json``, fitted
   on Gavel's measured throughputs by ``python benchmarks/device_speeds.py --write`` (which also
   reports the held-out error, :mod:`unstall.net.device_fit`). A model of no fitted family gets
   the step-time roofline fitted on the same measurements (:mod:`unstall.net.device_roofline`)
   when its step is known (:class:`StepFeatures`: FLOPs, parameter bytes, layer calls, the share
   of 3x3 convolutions, parameter tensors; :meth:`JobPerfSpec.from_facts` knows it for every
   zoo model), else the median of the families' speeds.
2. **Public figures, T4 / A10G / A100 / H100 / H200** (:data:`PUBLIC_FIGURES`): one ratio to a
   V100 per mode, from the sources named there. "fp32" means PyTorch's defaults: convolutions run
   in TF32 on Ampere and Hopper (``torch.backends.cudnn.allow_tf32 = True``) while matmuls stay in
   full fp32 (``torch.backends.cuda.matmul.allow_tf32 = False`` since PyTorch 1.12), so
   convolutional families and the rest get different ratios; "fp16" is automatic mixed precision.
3. **Anything else** (the P40): the flat datasheet model, peak x a flat efficiency
   (:meth:`DevicePreset.achieved_tflops`), as a ratio to the V100's in fp32; a FLOP estimate on
   such a GPU is exactly what it was before the measured speeds (:func:`has_figures`).

A family's speed scales only the part of a step the GPU computes; :func:`compute_time_scale`
turns a compute time on one GPU into one on another.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

from unstall.config import check
from unstall.errors import ConfigError, DataFileError
from unstall.net.device_fit import REFERENCE_DEVICE
from unstall.net.device_roofline import GpuFigures, RooflineModel, StepFeatures
from unstall.net.hardware import device

SPEEDS_FILE = "device_speeds.json"
PRECISION_MODES = ("fp32", "fp16")

# The kind of compute of each family: convolutions (TF32 by default on Ampere+) or matmuls.
FAMILY_KINDS: dict[str, str] = {
    "resnet18": "conv",
    "resnet50": "conv",
    "cyclegan": "conv",
    "a3c": "conv",
    "transformer": "matmul",
    "lm": "matmul",
    "recommendation": "matmul",
}

# Zoo models and Pollux applications -> the measured family that stands for them. Gavel's
# ResNet-18 trains on CIFAR-10 (32 px images), so only CIFAR-sized jobs take it; every
# ImageNet-sized CNN of the zoo takes ResNet-50's speeds.
MODEL_FAMILIES: dict[str, str] = {
    "resnet18": "resnet18",
    "cifar10": "resnet18",
    "resnet34": "resnet50",
    "resnet50": "resnet50",
    "resnet101": "resnet50",
    "resnet152": "resnet50",
    "resnet": "resnet50",
    "vgg": "resnet50",
    "vgg11": "resnet50",
    "vgg13": "resnet50",
    "vgg16": "resnet50",
    "vgg19": "resnet50",
    "alexnet": "resnet50",
    "mobilenet_v2": "resnet50",
    "imagenet": "resnet50",
    "yolov3": "resnet50",
    "transformer": "transformer",
    "bert": "transformer",
    "lstm_lm": "lm",
    "deepspeech2": "lm",
    "ncf": "recommendation",
}


def model_family(model: str) -> str | None:
    """The measured family of a zoo model or Pollux application name; None when none is known."""
    return MODEL_FAMILIES.get(model.strip().lower())


@dataclass(frozen=True, kw_only=True)
class PublicFigures:
    """A GPU Gavel did not measure: its speed relative to a V100 in fp32, per mode and kind."""

    conv_fp32: float  # convolutional families, PyTorch defaults (TF32 convolutions on Ampere+)
    matmul_fp32: float  # other families, PyTorch defaults (full fp32 matmuls)
    amp: float  # automatic mixed precision, every family
    source: str

    def __post_init__(self) -> None:
        for name in ("conv_fp32", "matmul_fp32", "amp"):
            check(getattr(self, name) > 0, self, name, "must be > 0")

    def speed(self, kind: str, precision: str) -> float:
        if precision == "fp16":
            return self.amp
        return self.conv_fp32 if kind == "conv" else self.matmul_fp32


# ResNet-50 v1.5 training on one GPU, PyTorch (NVIDIA DeepLearningExamples,
# PyTorch/Classification/ConvNets/resnet50v1.5/README.md, pytorch-21.03 container):
# V100 16GB FP32 367 img/s, AMP 1200 img/s; A100 80GB TF32 938 img/s, AMP 2470 img/s. T4 from
# the same README's inference tables (batch 128): T4 FP32 426, AMP 1190 img/s against V100 FP32
# 1229 img/s (training on a T4 is assumed to keep the inference ratio). H100 80GB HBM3: measured
# in this project with benchmarks/profile_gpu.py (PyTorch 2.11, TF32 convolutions), ResNet-50 at
# batch 128: 88.85 ms a step = 1441 img/s; its AMP gain is assumed to be the A100's (2470/938).
# Matmul families in fp32: no published training figure; the geometric mean of the datasheet
# fp32-peak ratio and the memory-bandwidth ratio to a V100 (15.7 TFLOPS, 900 GB/s): A100 19.5
# TFLOPS / 2039 GB/s, H100 SXM 67 / 3350, T4 8.1 / 320, A10G 31.2 / 600 (NVIDIA datasheets).
# A10G (AWS g5) has no published training figure: the A100's, scaled by the geometric mean of
# the A10/A100 datasheet ratios (dense tensor peak 125/312 TFLOPS fp16, 62.5/156 TF32; memory
# bandwidth 600/2039 GB/s).
_V100 = 367.0
# H200 SXM (67 TFLOPS fp32, 4800 GB/s): the H100's compute with 1.43x its memory bandwidth. Its
# convolution and AMP figures are the H100's times the geometric mean of the H200/H100 datasheet
# ratios (fp32 peak 1, bandwidth 4800/3350), 1.197, the rule used for the matmul families. On a
# lent H200 (2026-11-27) benchmarks/profile_gpu.py timed ResNet-50 at batch 64 at 45.15 ms a step
# against the H100's 53.76 ms (1.19x), which agrees.
_H200_OVER_H100 = (67.0 / 67.0 * 4800.0 / 3350.0) ** 0.5
PUBLIC_FIGURES: dict[str, PublicFigures] = {
    "t4": PublicFigures(
        conv_fp32=426.0 / 1229.0,
        matmul_fp32=(8.1 / 15.7 * 320.0 / 900.0) ** 0.5,
        amp=1190.0 / 1229.0,
        source="NVIDIA DeepLearningExamples ResNet-50 v1.5 (PyTorch) inference tables, T4 vs V100",
    ),
    "a10g": PublicFigures(
        conv_fp32=938.0 / _V100 * (62.5 / 156.0 * 600.0 / 2039.0) ** 0.5,
        matmul_fp32=(31.2 / 15.7 * 600.0 / 900.0) ** 0.5,
        amp=2470.0 / _V100 * (125.0 / 312.0 * 600.0 / 2039.0) ** 0.5,
        source="A100 figures scaled by A10/A100 datasheet ratios (no published A10G training)",
    ),
    "a100": PublicFigures(
        conv_fp32=938.0 / _V100,
        matmul_fp32=(19.5 / 15.7 * 2039.0 / 900.0) ** 0.5,
        amp=2470.0 / _V100,
        source="NVIDIA DeepLearningExamples ResNet-50 v1.5 (PyTorch), DGX A100 vs DGX-1 V100",
    ),
    "h100": PublicFigures(
        conv_fp32=1441.0 / _V100,
        matmul_fp32=(67.0 / 15.7 * 3350.0 / 900.0) ** 0.5,
        amp=1441.0 / _V100 * 2470.0 / 938.0,
        source="measured here (benchmarks/profile_gpu.py, H100 80GB HBM3) vs NVIDIA's V100",
    ),
    "h200": PublicFigures(
        conv_fp32=1441.0 / _V100 * _H200_OVER_H100,
        matmul_fp32=(67.0 / 15.7 * 4800.0 / 900.0) ** 0.5,
        amp=1441.0 / _V100 * _H200_OVER_H100 * 2470.0 / 938.0,
        source="the H100's figures x the geometric mean of the H200/H100 datasheet ratios",
    ),
}

# Mixed precision on the measured GPUs, relative to their fp32: a V100's tensor cores give
# ResNet-50 1200/367 (NVIDIA DeepLearningExamples, as above); a K80 and a P100 have none, and
# no gain is assumed for them.
AMP_GAIN: dict[str, float] = {"v100": 1200.0 / _V100, "p100": 1.0, "k80": 1.0}


@dataclass(frozen=True, kw_only=True)
class SpeedTable:
    """The fitted speeds: family -> device -> throughput relative to the reference device."""

    families: dict[str, dict[str, float]]
    generic: dict[str, float]
    roofline: RooflineModel | None
    source: str
    command: str

    def speed(self, family: str | None, name: str, step: StepFeatures | None = None) -> float:
        """A fitted family's speed; else the roofline's for ``step``; else the median's."""
        if family in self.families:
            return self.families[family].get(name, self.generic[name])
        if step is not None and self.roofline is not None and name in self.roofline.figures:
            return self.roofline.speeds(step, REFERENCE_DEVICE)[name]
        return self.generic[name]


def _roofline(data: object) -> RooflineModel | None:
    """The roofline's constants as the data file stores them, on the GPUs' datasheet figures."""
    if data is None:
        return None
    if not isinstance(data, dict):
        raise TypeError("roofline must be an object")
    gpus = sorted(data["efficiency"])
    return RooflineModel(
        figures={g: GpuFigures.datasheet(g) for g in gpus},
        launch_s=float(data["launch_s"]),
        efficiency={g: float(data["efficiency"][g]) for g in gpus},
        winograd={g: float(data["winograd"][g]) for g in gpus},
        memory_passes=float(data["memory_passes"]),
        tensor_s=float(data["tensor_s"]),
        overlap_power=float(data["overlap_power"]),
    )


@cache
def speed_table() -> SpeedTable:
    """The package's fitted speeds (read once)."""
    resource = resources.files("unstall") / "net" / "data" / SPEEDS_FILE
    try:
        data = json.loads(resource.read_text(encoding="utf-8"))
        return SpeedTable(
            families={f: dict(s) for f, s in data["families"].items()},
            generic=dict(data["generic"]),
            roofline=_roofline(data.get("roofline")),
            source=str(data["source"]),
            command=str(data["command"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise DataFileError(str(resource), f"not a device speed table: {exc}") from exc


def relative_speed(
    name: str,
    family: str | None = None,
    precision: str = "fp32",
    step: StepFeatures | None = None,
) -> float:
    """How fast GPU ``name`` trains a model of ``family`` in ``precision``, relative to a V100
    training it in fp32 (see the module docstring for the sources); ``step`` is the model's step
    for the roofline when ``family`` is not fitted."""
    if precision not in PRECISION_MODES:
        raise ConfigError("relative_speed", "precision", f"must be one of {PRECISION_MODES}")
    gpu = device(name).name
    if gpu in PUBLIC_FIGURES:
        return PUBLIC_FIGURES[gpu].speed(FAMILY_KINDS.get(family or "", "conv"), precision)
    table = speed_table()
    if gpu in table.generic:
        fp32 = table.speed(family, gpu, step)
        return fp32 * AMP_GAIN.get(gpu, 1.0) if precision == "fp16" else fp32
    return gpu_flat_ratio(gpu, precision)


def has_figures(name: str) -> bool:
    """Whether GPU ``name`` has measured or published speeds (else the flat datasheet model)."""
    gpu = device(name).name
    return gpu in PUBLIC_FIGURES or gpu in speed_table().generic


def gpu_flat_ratio(name: str, precision: str = "fp32") -> float:
    """The flat datasheet model's speed of ``name`` in ``precision`` relative to the reference
    GPU in fp32 (typical achieved FLOP rates, :meth:`DevicePreset.achieved_tflops`)."""
    reference = device(REFERENCE_DEVICE).achieved_tflops("fp32")
    return device(name).achieved_tflops(precision) / reference


def compute_time_scale(
    from_device: str,
    to_device: str,
    precision: str = "fp32",
    family: str | None = None,
    step: StepFeatures | None = None,
) -> float:
    """Factor that turns a compute time measured on ``from_device`` into one on ``to_device``
    for a model of ``family`` (or, of no fitted family, with ``step``): ``t_to = t_from *
    compute_time_scale(from, to, ...)``."""
    return relative_speed(from_device, family, precision, step) / relative_speed(
        to_device, family, precision, step
    )
