"""Device, interconnect and NIC presets."""

from __future__ import annotations

import pytest

from unstall.errors import ConfigError
from unstall.net.hardware import (
    DEVICE_PRESETS,
    INTERCONNECT_PRESETS,
    NIC_PRESETS,
    DevicePreset,
    device,
    interconnect,
    nic,
)


def test_registries_hold_the_named_devices() -> None:
    assert {"k80", "t4", "v100", "a10g", "a100", "h100"} <= set(DEVICE_PRESETS)
    assert {"pcie3", "pcie4", "pcie5", "nvlink2", "nvlink3", "nvlink4", "nvswitch"} <= set(
        INTERCONNECT_PRESETS
    )
    assert {"10g", "25g", "100g", "200g", "400g", "efa"} <= set(NIC_PRESETS)
    for registry in (DEVICE_PRESETS, INTERCONNECT_PRESETS, NIC_PRESETS):
        for key, preset in registry.items():
            assert preset.name == key and preset.source


def test_datasheet_figures() -> None:
    assert device("V100").fp32_tflops == 15.7 and device("v100").fp16_tflops == 125.0
    assert device("a100").memory_gb == 80.0
    # the H200 is the H100's compute with more, faster memory
    h100, h200 = device("h100"), device("h200")
    assert (h200.fp32_tflops, h200.fp16_tflops) == (h100.fp32_tflops, h100.fp16_tflops)
    assert (h200.memory_gb, h200.memory_gbs) == (141.0, 4800.0)
    # newer GPUs are faster at both precisions
    order = ["k80", "t4", "v100", "a100", "h100"]
    fp16 = [device(d).fp16_tflops for d in order]
    assert fp16 == sorted(fp16)
    assert interconnect("pcie4").bandwidth_gbps == 2 * interconnect("pcie3").bandwidth_gbps
    assert nic("efa").bandwidth_gbps == 400.0


def test_unknown_names_and_bad_presets() -> None:
    with pytest.raises(ConfigError, match="known"):
        device("tpu-v4")
    with pytest.raises(ConfigError, match="precision"):
        device("t4").achieved_tflops("int8")
    with pytest.raises(ConfigError, match="fp32_efficiency"):
        DevicePreset(
            name="x",
            fp32_tflops=1,
            fp16_tflops=1,
            memory_gb=1,
            memory_gbs=1,
            fp32_efficiency=1.5,
            fp16_efficiency=0.5,
            intra_link="pcie3",
            source="-",
        )
    with pytest.raises(ConfigError, match="intra_link"):
        DevicePreset(
            name="x",
            fp32_tflops=1,
            fp16_tflops=1,
            memory_gb=1,
            memory_gbs=1,
            fp32_efficiency=0.5,
            fp16_efficiency=0.5,
            intra_link="cable",
            source="-",
        )


def test_cuda_names_map_to_presets() -> None:
    from unstall.net.hardware import preset_for_gpu

    names = {
        "NVIDIA H100 80GB HBM3": "h100",
        "NVIDIA A100-SXM4-80GB": "a100",
        "Tesla V100-SXM2-32GB": "v100",
        "Tesla T4": "t4",
        "NVIDIA A10G": "a10g",
        "Tesla K80": "k80",
        "NVIDIA H200": "h200",
        "NVIDIA GeForce RTX 4090": None,
    }
    assert {name: preset_for_gpu(name) for name in names} == names
