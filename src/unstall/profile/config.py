"""How a stall profile runs: workers, hosts, repeats, the emulated link, the device (plain data).

What is profiled (the model, its data, its loss) is not part of the config: those are objects
handed to :func:`unstall.profile.measure_stalls`. A config only describes the runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from unstall.config import check, check_non_negative, check_positive
from unstall.net.hardware import CPU_DEVICE, DEVICE_PRESETS, preset_for_gpu
from unstall.net.link import Link
from unstall.profile.comm_hook import link_json
from unstall.results import to_jsonable

BACKENDS = {"cpu": "gloo", "cuda": "nccl"}
DEVICE_CHOICES = ("auto", *BACKENDS)
# The one-worker runs that feed real data, in the order of each round (see unstall.profile.stalls).
DATA_RUNS = ("cold", "warm", "cached")
# ``profile_device`` that labels the JobProfile with the device the run used.
AUTO_LABEL = "auto"


def resolve_device(requested: str, *, gpus: int, workers_per_node: int) -> str:
    """The device the workers train on: ``cpu`` (gloo) or ``cuda`` (NCCL, one GPU per worker).

    ``auto`` takes CUDA when this host has a GPU for each of its workers (NCCL cannot share one
    GPU between two ranks) and the CPU otherwise; ``cuda`` without enough GPUs is an error.
    """
    check(requested in DEVICE_CHOICES, "ProfileConfig", "device", f"one of {DEVICE_CHOICES}")
    if requested == "auto":
        return "cuda" if gpus >= workers_per_node >= 1 else "cpu"
    if requested == "cuda":
        check(
            gpus >= workers_per_node,
            "ProfileConfig",
            "device",
            f"cuda needs a GPU per worker on each host: {workers_per_node} workers, {gpus} GPUs",
        )
    return requested


@dataclass(frozen=True, kw_only=True)
class InjectedDelays:
    """Known delays added to the loop, for validating the differential arithmetic.

    ``compute_s`` per iteration in every run; ``fetch_s`` per batch in the cold run only (slow
    storage); ``prep_s`` per batch in the cold and warm runs (slow decoding); ``allreduce_s`` per
    bucket in the multi-worker runs (a slow interconnect).
    """

    compute_s: float = 0.0
    fetch_s: float = 0.0
    prep_s: float = 0.0
    allreduce_s: float = 0.0

    def __post_init__(self) -> None:
        check_non_negative(
            self,
            compute_s=self.compute_s,
            fetch_s=self.fetch_s,
            prep_s=self.prep_s,
            allreduce_s=self.allreduce_s,
        )


@dataclass(frozen=True, kw_only=True)
class ProfileConfig:
    """One differential profile trained data-parallel on ``workers`` workers over ``nodes`` hosts.

    Each of ``repeats`` rounds times ``iterations`` iterations of every run after ``warmup``
    untimed ones; the rounds interleave the runs so that drift on a shared machine hits all runs
    alike. ``network`` is the emulated link of the network run on one host (``None``: no network
    run; across real hosts the network is real and no link is emulated). ``threads`` per worker
    defaults to the cores divided by the workers on a host (the same in every run, so that the
    runs differ only in what they isolate). ``profile_device`` labels the :class:`JobProfile`:
    ``auto`` with the device the run used (``cpu``, or the preset of the GPU CUDA names, see
    :func:`profile_label`); a GPU preset names the GPU of a CUDA run whose name matches none (a
    CPU run is always labelled ``cpu``). ``timeout_s`` bounds how long a
    worker waits for the others in a collective before the run fails.
    """

    workers: int = 2
    nodes: int = 1
    iterations: int = 10
    warmup: int = 3
    repeats: int = 3
    network: Link | None = None
    device: str = "cpu"
    threads: int | None = None
    bucket_mb: float = 25.0
    seed: int = 0
    profile_device: str = AUTO_LABEL
    measure_overhead: bool = False
    delays: InjectedDelays = field(default_factory=InjectedDelays)
    timeout_s: float = 600.0

    def __post_init__(self) -> None:
        for name in ("workers", "nodes", "iterations", "repeats"):
            value = getattr(self, name)
            check(
                isinstance(value, int) and value >= 1,
                self,
                name,
                f"must be an integer >= 1, got {value!r}",
            )
        check(isinstance(self.warmup, int) and self.warmup >= 0, self, "warmup", "must be >= 0")
        check(self.device in BACKENDS, self, "device", f"must be one of {sorted(BACKENDS)}")
        check(self.threads is None or self.threads >= 1, self, "threads", "must be >= 1")
        check(self.workers % self.nodes == 0, self, "nodes", "must divide workers")
        check(
            self.network is None or isinstance(self.network, Link),
            self,
            "network",
            f"must be a unstall.net.link.Link or None, got {type(self.network).__name__}",
        )
        check(
            self.nodes == 1 or self.network is None,
            self,
            "network",
            "across several hosts the network run is real: no emulated link",
        )
        check(
            self.network is None or self.workers > 1,
            self,
            "network",
            "an emulated link joins workers, and one worker has none to join: give workers >= 2",
        )
        check_positive(self, bucket_mb=self.bucket_mb, timeout_s=self.timeout_s)
        labels = (AUTO_LABEL, CPU_DEVICE) if self.device == "cpu" else (AUTO_LABEL,)
        check(
            self.profile_device in labels or self.device == "cuda",
            self,
            "profile_device",
            f"a CPU run is labelled {CPU_DEVICE}, not {self.profile_device!r}: recommend converts"
            " a CPU profile to each GPU, and unstall profile convert for the simulator",
        )
        check(
            self.device == "cpu" or self.profile_device in (AUTO_LABEL, *DEVICE_PRESETS),
            self,
            "profile_device",
            f"unknown device {self.profile_device!r}; known: {[AUTO_LABEL, *DEVICE_PRESETS]}",
        )

    @property
    def backend(self) -> str:
        return BACKENDS[self.device]

    @property
    def workers_per_node(self) -> int:
        return self.workers // self.nodes

    def to_dict(self) -> dict[str, Any]:
        """The config as JSON values; the link in the units the command line takes (Gbit/s, ms)."""
        out = {f.name: to_jsonable(getattr(self, f.name)) for f in fields(self)}
        out["network"] = link_json(self.network)
        return out


def profile_label(device: str, profile_device: str, device_name: str) -> str:
    """The device a JobProfile of a run on ``device`` ("cpu" or "cuda") names: ``cpu`` for a CPU;
    for a GPU the preset ``profile_device`` names, or with ``auto`` the preset of the GPU called
    ``device_name`` (CUDA's name), an error naming the GPU when no preset is it."""
    if device == "cpu":
        return CPU_DEVICE
    if profile_device != AUTO_LABEL:
        return profile_device
    preset = preset_for_gpu(device_name)
    check(
        preset is not None,
        "ProfileConfig",
        "profile_device",
        f"the GPU {device_name!r} is none of the device presets {sorted(DEVICE_PRESETS)}: name"
        " the one to label its profile with (profile_device=NAME)",
    )
    assert preset is not None
    return preset


def run_names(config: ProfileConfig, data_runs: Sequence[str] = ()) -> list[str]:
    """The runs a profile of ``config`` times, in the order of each round; ``data_runs`` are the
    one-worker data runs its data source offers (a subset of :data:`DATA_RUNS`)."""
    names = ["compute"]
    if config.measure_overhead:
        names.append("compute_untimed")
    names += [run for run in DATA_RUNS if run in data_runs]
    if config.workers > 1:  # one worker alone has no interconnect: no DDP run to time
        names.append("local")
        if config.measure_overhead:
            names.append("local_untimed")
    if config.network is not None or config.nodes > 1:
        names.append("network")
    return names
