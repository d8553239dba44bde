"""Hardware presets: GPUs, intra-node interconnects and node NICs, each figure with its source.

Peak figures are the vendors' datasheet numbers (dense, no structured sparsity). Bandwidths are
per direction, in Gbit/s, because a ring all-reduce sends and receives at once on every hop and
is limited by one direction of each link. The achieved efficiencies are typical fractions of peak
that data-parallel training reaches (our assumption, stated per device). How fast one GPU trains
a model against another comes from measurements per model family
(:mod:`unstall.net.device_speeds`); the flat efficiencies only turn a model's FLOPs into a time on
the V100 (the reference the measured speeds scale from) and on GPUs without measured figures.

A CPU is no preset (CPUs differ too much for one to stand for them): a profile measured on one
is labelled :data:`CPU_DEVICE` and carries the CPU's measured rate, which
:func:`cpu_to_gpu_factor` compares with a GPU's; :func:`preset_for_gpu` maps the name CUDA
gives a GPU to its preset.

The registries are plain dicts keyed by lower-case name; look names up with :func:`device`,
:func:`interconnect` and :func:`nic`, which raise :class:`ConfigError` naming the known keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from unstall.config import check, check_non_negative, check_positive
from unstall.errors import ConfigError
from unstall.net.link import Link

P = TypeVar("P")


@dataclass(frozen=True, kw_only=True)
class LinkPreset:
    """A kind of link: per-direction bandwidth, one-hop latency, and whether it is a switch.

    ``switched`` links (NVSwitch, a NIC into a switch) give every GPU pair the full bandwidth at
    once; point-to-point links (NVLink bridges, PCIe peer-to-peer) are modelled the same way for a
    ring, whose hops never share a GPU port, so the flag is informative only.
    """

    name: str
    bandwidth_gbps: float
    latency_us: float
    switched: bool = False
    source: str = ""

    def __post_init__(self) -> None:
        check(bool(self.name), self, "name", "must not be empty")
        check_positive(self, bandwidth_gbps=self.bandwidth_gbps)
        check_non_negative(self, latency_us=self.latency_us)

    def link(self) -> Link:
        """This kind of link at its nominal figures."""
        return Link(bandwidth_gbps=self.bandwidth_gbps, latency_us=self.latency_us)


@dataclass(frozen=True, kw_only=True)
class DevicePreset:
    """A GPU: peak FLOP rates, memory, typical achieved efficiency, default intra-node link."""

    name: str
    fp32_tflops: float
    fp16_tflops: float  # tensor-core / half-precision peak, dense; equals fp32 where no speed-up
    memory_gb: float
    memory_gbs: float  # memory bandwidth, GB/s (datasheet)
    fp32_efficiency: float  # fraction of fp32 peak that training typically achieves
    fp16_efficiency: float  # fraction of the fp16/tensor peak that mixed precision achieves
    intra_link: str  # key of INTERCONNECT_PRESETS
    source: str

    def __post_init__(self) -> None:
        check_positive(
            self,
            fp32_tflops=self.fp32_tflops,
            fp16_tflops=self.fp16_tflops,
            memory_gb=self.memory_gb,
            memory_gbs=self.memory_gbs,
            fp32_efficiency=self.fp32_efficiency,
            fp16_efficiency=self.fp16_efficiency,
        )
        for field in ("fp32_efficiency", "fp16_efficiency"):
            check(getattr(self, field) <= 1.0, self, field, "must be <= 1 (a fraction of peak)")
        check(
            self.intra_link in INTERCONNECT_PRESETS,
            self,
            "intra_link",
            f"unknown interconnect {self.intra_link!r}; known: {sorted(INTERCONNECT_PRESETS)}",
        )

    def achieved_tflops(self, precision: str = "fp32") -> float:
        """Typical achieved TFLOP/s for ``precision`` ("fp32" or "fp16")."""
        if precision == "fp32":
            return self.fp32_tflops * self.fp32_efficiency
        if precision == "fp16":
            return self.fp16_tflops * self.fp16_efficiency
        raise ConfigError(
            "DevicePreset", "precision", f"must be 'fp32' or 'fp16', got {precision!r}"
        )


# --- intra-node interconnects -------------------------------------------------------------------
# PCIe x16, per direction after 128b/130b encoding: gen3 8 GT/s -> 15.75 GB/s, gen4 16 GT/s ->
# 31.5 GB/s, gen5 32 GT/s -> 63 GB/s (PCI-SIG base specifications 3.0/4.0/5.0).
# NVLink per GPU, per direction: V100 NVLink2 6 links x 25 GB/s = 150 GB/s (300 GB/s total,
# NVIDIA V100 datasheet); A100 NVLink3 12 links x 25 GB/s = 300 GB/s (600 GB/s total, A100
# datasheet); H100 NVLink4 18 links x 25 GB/s = 450 GB/s (900 GB/s total, H100 datasheet).
# NVSwitch (HGX A100/H100 baseboards) gives every GPU its full NVLink bandwidth to every other GPU;
# the preset is the A100 generation (NVSwitch gen2, 600 GB/s total per GPU).
# Latencies are one hop of a small message through NCCL, order of magnitude only (a few us).
INTERCONNECT_PRESETS: dict[str, LinkPreset] = {
    "pcie3": LinkPreset(name="pcie3", bandwidth_gbps=126.0, latency_us=5.0, source="PCIe 3.0 x16"),
    "pcie4": LinkPreset(name="pcie4", bandwidth_gbps=252.0, latency_us=5.0, source="PCIe 4.0 x16"),
    "pcie5": LinkPreset(name="pcie5", bandwidth_gbps=504.0, latency_us=5.0, source="PCIe 5.0 x16"),
    "nvlink2": LinkPreset(
        name="nvlink2", bandwidth_gbps=1200.0, latency_us=3.0, source="NVIDIA V100 datasheet"
    ),
    "nvlink3": LinkPreset(
        name="nvlink3", bandwidth_gbps=2400.0, latency_us=3.0, source="NVIDIA A100 datasheet"
    ),
    "nvlink4": LinkPreset(
        name="nvlink4", bandwidth_gbps=3600.0, latency_us=3.0, source="NVIDIA H100 datasheet"
    ),
    "nvswitch": LinkPreset(
        name="nvswitch",
        bandwidth_gbps=2400.0,
        latency_us=3.0,
        switched=True,
        source="NVIDIA HGX A100 (NVSwitch gen2, 600 GB/s per GPU)",
    ),
}

# --- node NICs ----------------------------------------------------------------------------------
# Ethernet line rates (IEEE 802.3); InfiniBand EDR 100 Gb/s and HDR 200 Gb/s (Mellanox/NVIDIA
# ConnectX-5/-6 product briefs); AWS EFA on p4d.24xlarge: 4 x 100 Gbps = 400 Gbps per instance
# (AWS p4d instance page). NIC latency: a few us for RDMA, tens of us for TCP sockets.
NIC_PRESETS: dict[str, LinkPreset] = {
    "10g": LinkPreset(
        name="10g", bandwidth_gbps=10.0, latency_us=30.0, switched=True, source="10GbE"
    ),
    "25g": LinkPreset(
        name="25g", bandwidth_gbps=25.0, latency_us=25.0, switched=True, source="25GbE"
    ),
    "100g": LinkPreset(
        name="100g", bandwidth_gbps=100.0, latency_us=5.0, switched=True, source="100GbE / IB EDR"
    ),
    "200g": LinkPreset(
        name="200g", bandwidth_gbps=200.0, latency_us=5.0, switched=True, source="IB HDR"
    ),
    "400g": LinkPreset(
        name="400g", bandwidth_gbps=400.0, latency_us=5.0, switched=True, source="IB NDR / 400GbE"
    ),
    "efa": LinkPreset(
        name="efa",
        bandwidth_gbps=400.0,
        latency_us=15.0,
        switched=True,
        source="AWS EFA, p4d.24xlarge (4 x 100 Gbps)",
    ),
}

# --- GPUs ---------------------------------------------------------------------------------------
# Efficiencies: fp32 training of convolutional and transformer models typically reaches 40-60% of
# the fp32 peak on datacenter GPUs, and mixed precision 30-45% of the tensor-core peak (MLPerf
# Training submissions sit near the top of that range); we take round values in those ranges.
DEVICE_PRESETS: dict[str, DevicePreset] = {
    # One GK210 of a Tesla K80 board (a scheduler sees each half as a GPU): 4.37 TFLOPS fp32 at
    # boost, 12 GB, 240 GB/s; no fast fp16 (NVIDIA Tesla K80 datasheet: 8.73 TFLOPS, 24 GB,
    # 480 GB/s per board).
    "k80": DevicePreset(
        name="k80",
        fp32_tflops=4.37,
        fp16_tflops=4.37,
        memory_gb=12.0,
        memory_gbs=240.0,
        fp32_efficiency=0.5,
        fp16_efficiency=0.5,
        intra_link="pcie3",
        source="NVIDIA Tesla K80 datasheet (per GK210)",
    ),
    # Tesla P100 PCIe 16 GB: 9.3 TFLOPS fp32, 18.7 TFLOPS fp16, 732 GB/s (NVIDIA P100 datasheet).
    # The 16 GB part, not the 12 GB one (549 GB/s): it is the P100 that clouds rent (GCP, Azure
    # NCv2), and the one Gavel's measured throughputs, which the device speeds are fitted on,
    # most likely ran on (Gavel's price code maps its P100 worker to Azure's NC6s v2).
    "p100": DevicePreset(
        name="p100",
        fp32_tflops=9.3,
        fp16_tflops=18.7,
        memory_gb=16.0,
        memory_gbs=732.0,
        fp32_efficiency=0.5,
        fp16_efficiency=0.4,
        intra_link="pcie3",
        source="NVIDIA Tesla P100 PCIe datasheet",
    ),
    # Tesla P40: 12 TFLOPS fp32, 24 GB, 346 GB/s; no fast fp16 (NVIDIA Tesla P40 datasheet).
    "p40": DevicePreset(
        name="p40",
        fp32_tflops=12.0,
        fp16_tflops=12.0,
        memory_gb=24.0,
        memory_gbs=346.0,
        fp32_efficiency=0.5,
        fp16_efficiency=0.5,
        intra_link="pcie3",
        source="NVIDIA Tesla P40 datasheet",
    ),
    # T4: 8.1 TFLOPS fp32, 65 TFLOPS fp16 tensor, 16 GB, 320 GB/s, PCIe 3 x16 (NVIDIA T4
    # datasheet).
    "t4": DevicePreset(
        name="t4",
        fp32_tflops=8.1,
        fp16_tflops=65.0,
        memory_gb=16.0,
        memory_gbs=320.0,
        fp32_efficiency=0.45,
        fp16_efficiency=0.3,
        intra_link="pcie3",
        source="NVIDIA T4 datasheet",
    ),
    # V100 SXM2: 15.7 TFLOPS fp32, 125 TFLOPS tensor, 32 GB, 900 GB/s, NVLink2 (NVIDIA V100
    # datasheet).
    "v100": DevicePreset(
        name="v100",
        fp32_tflops=15.7,
        fp16_tflops=125.0,
        memory_gb=32.0,
        memory_gbs=900.0,
        fp32_efficiency=0.5,
        fp16_efficiency=0.35,
        intra_link="nvlink2",
        source="NVIDIA V100 datasheet (SXM2)",
    ),
    # A10G (AWS g5): A10 datasheet figures, 31.2 TFLOPS fp32, 125 TFLOPS fp16 tensor, 24 GB,
    # 600 GB/s, PCIe 4 (NVIDIA A10 datasheet; AWS does not publish separate A10G peaks).
    "a10g": DevicePreset(
        name="a10g",
        fp32_tflops=31.2,
        fp16_tflops=125.0,
        memory_gb=24.0,
        memory_gbs=600.0,
        fp32_efficiency=0.4,
        fp16_efficiency=0.35,
        intra_link="pcie4",
        source="NVIDIA A10 datasheet (A10G on AWS g5)",
    ),
    # A100 SXM4 80 GB: 19.5 TFLOPS fp32, 312 TFLOPS fp16 tensor, 2039 GB/s, NVLink3 via NVSwitch
    # (NVIDIA A100 datasheet).
    "a100": DevicePreset(
        name="a100",
        fp32_tflops=19.5,
        fp16_tflops=312.0,
        memory_gb=80.0,
        memory_gbs=2039.0,
        fp32_efficiency=0.55,
        fp16_efficiency=0.4,
        intra_link="nvswitch",
        source="NVIDIA A100 datasheet (SXM4 80GB)",
    ),
    # H100 SXM5: 67 TFLOPS fp32, 989 TFLOPS fp16 tensor (dense), 80 GB, 3350 GB/s, NVLink4
    # (NVIDIA H100 datasheet).
    "h100": DevicePreset(
        name="h100",
        fp32_tflops=67.0,
        fp16_tflops=989.0,
        memory_gb=80.0,
        memory_gbs=3350.0,
        fp32_efficiency=0.45,
        fp16_efficiency=0.4,
        intra_link="nvlink4",
        source="NVIDIA H100 datasheet (SXM5)",
    ),
    # H200 SXM: the H100's compute (67 TFLOPS fp32, 989 TFLOPS fp16 tensor dense) with 141 GB of
    # HBM3e at 4800 GB/s, NVLink4 (NVIDIA H200 datasheet). CUDA names it "NVIDIA H200".
    "h200": DevicePreset(
        name="h200",
        fp32_tflops=67.0,
        fp16_tflops=989.0,
        memory_gb=141.0,
        memory_gbs=4800.0,
        fp32_efficiency=0.45,
        fp16_efficiency=0.4,
        intra_link="nvlink4",
        source="NVIDIA H200 datasheet (SXM)",
    ),
}


# The label of a profile measured on a CPU. A CPU is not a device preset: its FLOP rate is
# measured when it is profiled (``JobProfile.device_tflops``), since CPUs differ too much for one
# preset to stand for them; see :func:`cpu_to_gpu_factor`.
CPU_DEVICE = "cpu"


def preset_for_gpu(gpu_name: str) -> str | None:
    """The device preset of a GPU named as CUDA names it ("NVIDIA H100 80GB HBM3" -> "h100",
    "Tesla V100-SXM2-32GB" -> "v100"): a word of the name that is a preset's name; None when no
    preset is that GPU."""
    words = gpu_name.lower().replace("-", " ").replace("_", " ").split()
    return next((word for word in words if word in DEVICE_PRESETS), None)


def cpu_to_gpu_factor(cpu_tflops: float, gpu: str) -> float:
    """Factor that turns fp32 compute time measured on a CPU into one on GPU ``gpu``.

    ``cpu_tflops`` is the CPU's dense fp32 matmul rate, measured with the threads the profile
    used; the GPU's is its fp32 datasheet peak. The ratio assumes that training reaches the same
    share of each device's dense matmul rate and is compute-bound on both: a stated, rough
    conversion (memory-bound models gain less on a GPU).
    """
    check(cpu_tflops > 0, "cpu_to_gpu_factor", "cpu_tflops", f"must be > 0, got {cpu_tflops!r}")
    return cpu_tflops / device(gpu).fp32_tflops


def _lookup(registry: Mapping[str, P], kind: str, name: str) -> P:
    key = name.strip().lower()
    if key not in registry:
        raise ConfigError(
            kind, "name", f"unknown {kind.lower()} {name!r}; known: {sorted(registry)}"
        )
    return registry[key]


def device(name: str) -> DevicePreset:
    """The GPU preset called ``name`` (case-insensitive)."""
    return _lookup(DEVICE_PRESETS, "Device", name)


def interconnect(name: str) -> LinkPreset:
    """The intra-node interconnect preset called ``name`` (case-insensitive)."""
    return _lookup(INTERCONNECT_PRESETS, "Interconnect", name)


def nic(name: str) -> LinkPreset:
    """The NIC preset called ``name`` (case-insensitive)."""
    return _lookup(NIC_PRESETS, "Nic", name)
