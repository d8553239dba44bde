"""Training time and cost of a job on ``count`` instances of one type (pure: no I/O).

A configuration of ``count`` instances of type ``T`` is a one-rack topology of ``count`` nodes,
each with ``T``'s GPUs, GPU type and GPU link, and ``T``'s network as the node NIC; the job runs
data-parallel on every GPU (:func:`unstall.workload.perf.iteration_time`, ring all-reduce or
parameter server as the job says). The network achieves
:data:`unstall.net.topology.CALIBRATED_NETWORK_EFFICIENCY` of its line rate by default: the
share fitted to Pollux's measured step times on AWS g4dn instances, used here for every
instance type (EFA instances may do better; ``network_efficiency`` changes it).

Batch sizes: by default every GPU keeps the job's local batch (the profile's, or 32 for a zoo
model), so the global batch grows with the GPUs and an epoch takes
``ceil(samples / (local_batch x GPUs))`` iterations. With ``global_batch`` the global batch is
fixed instead: an epoch takes ``ceil(samples / global_batch)`` iterations and each GPU computes
``ceil(global_batch / GPUs)`` samples (configurations with more GPUs than the global batch are
left out). Compute time is linear in the local batch (``JobPerfSpec.compute_at``), and so is the
input pipeline's time per iteration.

Measured figures win: when the job carries a measured iteration time for a configuration's
placement string ("8" = one instance of 8 GPUs, "44" = two of 4) at its own local batch, that time
is used as is on the GPU type it was measured on (``source = "measured"``), and on another GPU type
multiplied by the model's ratio between the two GPU types on the same links
(``"measured-scaled"``); everything else is ``"modelled"``. A measured placement is assumed to have
run on the same links as the candidate (profiles do not name their instance type).

Cost: the configuration's price per hour times the training time, each instance billed for at
least its catalog's ``min_billed_s`` (a minute by default): without it a job of seconds cost
nothing to the cent anywhere, and the largest, fastest configuration won every tie.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from unstall.config import check
from unstall.cost.catalog import Instance
from unstall.errors import ConfigError, did_you_mean
from unstall.net.device_speeds import relative_speed, speed_table
from unstall.net.hardware import DEVICE_PRESETS
from unstall.net.link import Link
from unstall.net.topology import (
    CALIBRATED_NETWORK_EFFICIENCY,
    INTRA,
    TopologyConfig,
)
from unstall.results import JsonResult
from unstall.workload import PRECISIONS, IterationTime, JobPerfSpec, Placement, iteration_time
from unstall.workload.profiles import JobProfile

MEASURED = "measured"
MEASURED_SCALED = "measured-scaled"
MODELLED = "modelled"
SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True, kw_only=True)
class TrainingConfig:
    """How much training: ``samples`` per epoch, ``epochs``, the batch rule, the network share."""

    samples: int
    epochs: float
    global_batch: int | None = None
    network_efficiency: float = CALIBRATED_NETWORK_EFFICIENCY

    def __post_init__(self) -> None:
        check(
            isinstance(self.samples, int) and self.samples >= 1,
            self,
            "samples",
            f"must be an integer >= 1, got {self.samples!r}",
        )
        check(
            math.isfinite(self.epochs) and self.epochs > 0,
            self,
            "epochs",
            f"must be a number > 0, got {self.epochs!r}",
        )
        check(
            self.global_batch is None
            or (isinstance(self.global_batch, int) and self.global_batch >= 1),
            self,
            "global_batch",
            f"must be an integer >= 1 or None, got {self.global_batch!r}",
        )
        # A batch larger than the epoch would be timed as samples that do not exist (a step of
        # 100,000 samples for an epoch of 100).
        check(
            self.global_batch is None or self.global_batch <= self.samples,
            self,
            "global_batch",
            f"{self.global_batch} is larger than the {self.samples:,} samples of an epoch",
        )
        check(
            0.0 < self.network_efficiency <= 1.0,
            self,
            "network_efficiency",
            f"must be in (0, 1] (a share of the line rate), got {self.network_efficiency!r}",
        )


@dataclass(frozen=True, kw_only=True)
class JobModel:
    """What is known about the job: its perf spec and any measured iteration times.

    ``spec`` is on the device it was measured or estimated on; ``per_device`` may hold estimates
    made directly on other devices (a zoo model's FLOP estimate with its fixed overhead), which
    win over scaling ``spec``. ``measured``: seconds per iteration on ``spec.device`` at
    ``spec.local_batch``, keyed by canonical placement string.
    """

    spec: JobPerfSpec
    per_device: dict[str, JobPerfSpec] = field(default_factory=dict, hash=False)
    measured: dict[str, float] = field(default_factory=dict, hash=False)
    origin: str = ""

    def __post_init__(self) -> None:
        for key, spec in self.per_device.items():
            check(spec.device == key, self, f"per_device.{key}", f"is on {spec.device!r}")
            check(
                spec.local_batch == self.spec.local_batch,
                self,
                f"per_device.{key}",
                f"local batch {spec.local_batch} differs from the job's {self.spec.local_batch}",
            )
        for key, seconds in self.measured.items():
            check(
                Placement.parse(key).render() == key,
                self,
                f"measured.{key}",
                "must be a canonical placement string (Placement.render())",
            )
            check(seconds > 0, self, f"measured.{key}", f"must be > 0 s, got {seconds!r}")

    @property
    def name(self) -> str:
        return self.spec.name

    def spec_on(self, device_name: str) -> JobPerfSpec:
        """The job's spec to run on ``device_name`` (scaled there by the perf model if needed)."""
        return self.per_device.get(device_name, self.spec)


def job_from_profile(
    profile: JobProfile, *, precision: str = "fp32", devices: str | Sequence[str] = ()
) -> JobModel:
    """A measured job: the profile's compute, gradients and data time, and its measured times.

    ``precision`` is the precision the profile ran in: it picks the GPU speeds (of the model's
    family, :mod:`unstall.net.device_speeds`) that scale the compute time between GPU types. A
    profile measured on a CPU is converted to each GPU type of ``devices``
    (:meth:`JobProfile.on_gpu`: compute scaled by the ratio of FLOP rates; the CPU's placement
    times dropped); ``origin`` states every factor.
    """
    if profile.on_cpu:
        return _job_from_cpu_profile(profile, precision=precision, devices=devices)
    spec = profile.to_perf_spec(precision=precision)
    measured = {Placement.parse(k).render(): float(v) for k, v in profile.measured.items()}
    origin = f"profile measured on {spec.device} at {spec.local_batch} samples per GPU"
    return JobModel(spec=spec, measured=measured, origin=origin)


def _job_from_cpu_profile(
    profile: JobProfile, *, precision: str, devices: str | Sequence[str]
) -> JobModel:
    """A CPU profile converted to every GPU type of ``devices`` (see :func:`job_from_profile`)."""
    check(
        precision == "fp32",
        "job_from_profile",
        "precision",
        f"the CPU profile of {profile.model} ran in fp32, not {precision}",
    )
    check(
        bool(devices),
        "job_from_profile",
        "devices",
        f"the CPU profile of {profile.model} needs the GPU types to convert it to",
    )
    names = _device_names(devices, "job_from_profile")
    per_device = {d: profile.on_gpu(d).to_perf_spec(precision=precision) for d in names}
    factors = ", ".join(f"{d} x{profile.cpu_factor(d):.3g}" for d in names)
    origin = (
        f"CPU profile ({profile.device_name or 'unnamed CPU'}, {profile.device_tflops:.3g}"
        f" TFLOP/s fp32 matmul) at {profile.local_batch} samples per worker, converted:"
        f" compute scaled by the CPU's / the GPU's fp32 FLOP rate ({factors}); its CPU"
        " placement times not used"
    )
    return JobModel(spec=per_device[names[0]], per_device=per_device, origin=origin)


def job_from_model(name: str, devices: str | Sequence[str], *, precision: str = "fp32") -> JobModel:
    """A zoo model (or Pollux application) estimated from its FLOPs on each of ``devices``.

    ``devices`` are GPU presets (``catalog.devices`` for every GPU of a catalog), or one
    preset's name. The estimates come from :func:`unstall.workload.spec_for` (FLOPs at a V100's
    typical achieved rate, scaled to each GPU by the measured speed of the model's family there,
    plus a fixed framework overhead per iteration); ``precision`` "fp16" moves the FLOP part to
    the family's mixed-precision speed (:mod:`unstall.net.device_speeds`).
    """
    from unstall.workload.job_specs import known_models, spec_for

    check(precision in PRECISIONS, "job_from_model", "precision", f"must be one of {PRECISIONS}")
    names = _device_names(devices, "job_from_model")
    # spec_for is the simulator's too, and its error names a trace's model column: checked here
    # first, so that the error names this function's argument.
    known = known_models()
    if not (isinstance(name, str) and name in known):
        raise ConfigError(
            "job_from_model",
            "name",
            f"unknown model {name!r}{did_you_mean(name, known)}; known: {known} (a measured "
            "job is a JobProfile: pass it to recommend as is)",
        )
    per_device = {d: _in_precision(spec_for(name, d), precision) for d in names}
    reference = per_device[names[0]]
    speeds = _speeds_origin(reference)
    origin = (
        f"zoo estimate from FLOPs ({precision}; {speeds}) at {reference.local_batch} samples"
        " per GPU"
    )
    return JobModel(spec=reference, per_device=per_device, origin=origin)


def _device_names(devices: str | Sequence[str], owner: str) -> tuple[str, ...]:
    """``devices`` as preset keys, each once, in order: one name alone is one device (a str is
    a sequence too, and would otherwise be read letter by letter)."""
    check(
        isinstance(devices, str | Iterable),
        owner,
        "devices",
        f"must be GPU preset names (e.g. catalog.devices), got {type(devices).__name__}",
    )
    names = (devices,) if isinstance(devices, str) else tuple(devices)
    check(bool(names), owner, "devices", "must name at least one device")
    for d in names:
        check(
            isinstance(d, str) and d.lower() in DEVICE_PRESETS,
            owner,
            "devices",
            f"unknown device {d!r}; known: {sorted(DEVICE_PRESETS)}",
        )
    # Preset keys are lower case (Instance.device): "V100" is the same GPU as "v100".
    return tuple(dict.fromkeys(d.lower() for d in names))


def _speeds_origin(spec: JobPerfSpec) -> str:
    """Where the GPU speeds that scale ``spec`` between GPU types come from."""
    if spec.family in speed_table().families:
        return f"GPU speeds measured for {spec.family}"
    if spec.step is not None:
        return "GPU speeds from the roofline fitted on measurements, for its FLOPs and layers"
    return "median measured GPU speeds"


def _in_precision(spec: JobPerfSpec, precision: str) -> JobPerfSpec:
    """``spec`` (estimated in its own precision) with its FLOP-bound part at ``precision``."""
    if precision == spec.precision:
        return spec
    ratio = relative_speed(spec.device, spec.family, spec.precision, spec.step) / relative_speed(
        spec.device, spec.family, precision, spec.step
    )
    variable = (spec.compute_s - spec.fixed_compute_s) * ratio
    return dataclasses.replace(spec, compute_s=spec.fixed_compute_s + variable, precision=precision)


# --- one configuration --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Prediction(JsonResult):
    """``count`` instances of ``instance``: per-iteration figures, then the whole training.

    ``iteration_s`` is the figure used (measured or modelled, see ``source``);
    ``modelled_iteration_s``, ``compute_s``, ``exposed_comm_s`` and ``slowest_link`` are always
    the perf model's. ``usd_per_hour`` is the price of the whole configuration.
    """

    instance: str
    count: int
    gpu: str
    gpus: int
    usd_per_hour: float
    local_batch: int
    global_batch: int
    iterations: float
    iteration_s: float
    modelled_iteration_s: float
    compute_s: float
    exposed_comm_s: float
    data_s: float
    slowest_link: str
    source: str
    predicted_hours: float
    predicted_cost_usd: float

    @property
    def label(self) -> str:
        return f"{self.count} x {self.instance}"

    @property
    def comm_stall_share(self) -> float:
        """Share of the modelled iteration lost to communication not hidden behind compute."""
        return self.exposed_comm_s / self.modelled_iteration_s


def instance_topology(
    instance: Instance, count: int, network_efficiency: float = CALIBRATED_NETWORK_EFFICIENCY
) -> TopologyConfig:
    """``count`` instances as a one-rack topology: one node per instance."""
    return TopologyConfig(
        name=f"{count}x{instance.instance}",
        racks=1,
        nodes_per_rack=count,
        gpus_per_node=instance.gpus,
        device=instance.device,
        intra_link_kind=instance.interconnect,
        nic=Link(bandwidth_gbps=instance.network_gbps, latency_us=instance.network_latency_us),
        network_efficiency=network_efficiency,
    )


def batch_split(local_batch: int, gpus: int, training: TrainingConfig) -> tuple[int, int] | None:
    """``(local batch, global batch)`` on ``gpus`` GPUs, or None when the global batch is too
    small to give every GPU a sample."""
    if training.global_batch is None:
        return local_batch, local_batch * gpus
    if gpus > training.global_batch:
        return None
    return math.ceil(training.global_batch / gpus), training.global_batch


def _at_batch(spec: JobPerfSpec, local_batch: int) -> JobPerfSpec:
    if local_batch == spec.local_batch:
        return spec
    return dataclasses.replace(
        spec,
        compute_s=spec.compute_at(local_batch),
        local_batch=local_batch,
        data_s=spec.data_s * local_batch / spec.local_batch,
    )


def _slowest_link(it: IterationTime) -> str:
    if it.bottleneck is None:
        return "none"
    return "gpu link" if it.bottleneck[0] == INTRA else "network"


def _iteration(
    job: JobModel, instance: Instance, placement: Placement, topology: TopologyConfig, local: int
) -> tuple[IterationTime, float, str]:
    """The modelled iteration, and the figure to use with its source."""
    modelled = iteration_time(_at_batch(job.spec_on(instance.device), local), placement, topology)
    seconds = job.measured.get(placement.render())
    if seconds is None or local != job.spec.local_batch:
        return modelled, modelled.total_s, MODELLED
    if instance.device == job.spec.device:
        return modelled, seconds, MEASURED
    # The measurement's GPU type on the candidate's links: the model's GPU-type ratio, only.
    reference = dataclasses.replace(topology, device=job.spec.device)
    on_reference = iteration_time(job.spec, placement, reference).total_s
    on_candidate = iteration_time(job.spec, placement, topology).total_s
    return modelled, seconds * on_candidate / on_reference, MEASURED_SCALED


def predict(
    job: JobModel, instance: Instance, count: int, training: TrainingConfig
) -> Prediction | None:
    """Training time and cost on ``count`` x ``instance``; None if the batch cannot be split."""
    check(isinstance(count, int) and count >= 1, "predict", "count", f"must be >= 1, got {count!r}")
    gpus = instance.gpus * count
    split = batch_split(job.spec.local_batch, gpus, training)
    if split is None:
        return None
    local, global_batch = split
    topology = instance_topology(instance, count, training.network_efficiency)
    placement = Placement((instance.gpus,) * count)
    modelled, seconds, source = _iteration(job, instance, placement, topology, local)
    iterations = training.epochs * math.ceil(training.samples / global_batch)
    hours = iterations * seconds / SECONDS_PER_HOUR
    price = instance.usd_per_hour * count
    billed_hours = max(hours, instance.min_billed_s / SECONDS_PER_HOUR)
    return Prediction(
        instance=instance.instance,
        count=count,
        gpu=instance.device,
        gpus=gpus,
        usd_per_hour=price,
        local_batch=local,
        global_batch=global_batch,
        iterations=iterations,
        iteration_s=seconds,
        modelled_iteration_s=modelled.total_s,
        compute_s=modelled.compute_s,
        exposed_comm_s=modelled.exposed_comm_s,
        data_s=_at_batch(job.spec_on(instance.device), local).data_s,
        slowest_link=_slowest_link(modelled),
        source=source,
        predicted_hours=hours,
        predicted_cost_usd=billed_hours * price,
    )


def predict_all(
    job: JobModel,
    instances: Sequence[Instance],
    training: TrainingConfig,
    *,
    max_instances: int = 16,
    on_instance: Callable[[Instance], None] | None = None,
) -> list[Prediction]:
    """Every configuration of 1..``max_instances`` instances of each type, in catalog order."""
    out = []
    for instance in instances:
        for count in range(1, max_instances + 1):
            found = predict(job, instance, count, training)
            if found is not None:
                out.append(found)
        if on_instance is not None:
            on_instance(instance)
    return out
