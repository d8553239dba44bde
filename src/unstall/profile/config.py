"""Configuration of a stall-profiling run (what to train, how long, which runs, which link)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from unstall.config import check, check_non_negative, check_positive
from unstall.net.hardware import DEVICE_PRESETS
from unstall.profile.link import LinkSpec
from unstall.workload import zoo

BACKENDS = {"cpu": "gloo", "cuda": "nccl"}
DEVICE_CHOICES = ("auto", *BACKENDS)


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
    """One differential profile of model ``model`` trained data-parallel on ``workers`` workers.

    Each of ``repeats`` rounds times ``iterations`` iterations of every run after ``warmup``
    untimed ones; the rounds interleave the runs so that drift on a shared machine hits all runs
    alike. ``threads`` per worker defaults to the cores divided by the workers (the same in every
    run, so that the runs differ only in what they isolate). ``profile_device`` labels the
    :class:`JobProfile` when it was measured on a CPU, which has no device preset.
    """

    model: str
    model_options: dict[str, object] = field(default_factory=dict)
    workers: int = 2
    nodes: int = 1
    batch: int = 8
    image_size: int = 32
    iterations: int = 10
    warmup: int = 3
    repeats: int = 3
    network: LinkSpec | None = None
    data_dir: Path | None = None
    device: str = "cpu"
    threads: int | None = None
    bucket_mb: float = 25.0
    seed: int = 0
    profile_device: str = "k80"
    measure_overhead: bool = False
    delays: InjectedDelays = field(default_factory=InjectedDelays)
    timeout_s: float = 600.0

    def __post_init__(self) -> None:
        zoo.spec(self.model)
        for name in ("workers", "nodes", "batch", "iterations", "repeats"):
            value = getattr(self, name)
            check(
                isinstance(value, int) and value >= 1,
                self,
                name,
                f"must be an integer >= 1, got {value!r}",
            )
        check(isinstance(self.warmup, int) and self.warmup >= 0, self, "warmup", "must be >= 0")
        check(self.image_size >= 32, self, "image_size", "must be >= 32 (zoo image models)")
        check(self.device in BACKENDS, self, "device", f"must be one of {sorted(BACKENDS)}")
        check(self.threads is None or self.threads >= 1, self, "threads", "must be >= 1")
        check(self.workers % self.nodes == 0, self, "nodes", "must divide workers")
        check(
            self.nodes == 1 or self.network is None,
            self,
            "network",
            "across several hosts the network run is real: no emulated link",
        )
        check_positive(self, bucket_mb=self.bucket_mb, timeout_s=self.timeout_s)
        check(
            self.profile_device in DEVICE_PRESETS,
            self,
            "profile_device",
            f"unknown device {self.profile_device!r}; known: {sorted(DEVICE_PRESETS)}",
        )
        if self.data_dir is not None:
            check(
                zoo.spec(self.model).input_kind == "image",
                self,
                "data_dir",
                f"the data runs feed images; {self.model} takes {zoo.spec(self.model).input_kind}",
            )

    @property
    def backend(self) -> str:
        return BACKENDS[self.device]

    @property
    def workers_per_node(self) -> int:
        return self.workers // self.nodes

    def zoo_options(self) -> dict[str, object]:
        """The model's options: ``image_size`` for image models, then ``model_options``."""
        options: dict[str, object] = {}
        if "image_size" in zoo.spec(self.model).defaults:
            options["image_size"] = self.image_size
        options.update(self.model_options)
        return options

    def run_names(self) -> list[str]:
        """The runs this config times, in the order of each round."""
        names = ["compute"]
        if self.measure_overhead:
            names.append("compute_untimed")
        if self.data_dir is not None:
            names += ["cold", "warm", "cached"]
        names.append("local")
        if self.measure_overhead:
            names.append("local_untimed")
        if self.network is not None or self.nodes > 1:
            names.append("network")
        return names
