"""What a calibration returns: per application its fitted parameters and error figures, and the
figures over every application (see :mod:`unstall.workload.calibration`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from unstall.net.link import Link
from unstall.net.topology import TopologyConfig
from unstall.results import JsonResult
from unstall.workload.calibration_fit import NOMINAL_GRADIENT_BYTES, PARAM_NAMES, POLLUX_DEVICE
from unstall.workload.job_specs import JobPerfSpec
from unstall.workload.pollux_placements import GPUS_PER_NODE


@dataclass(frozen=True, kw_only=True)
class ErrorStats(JsonResult):
    """Relative errors |predicted - measured| / measured over a set of points."""

    median: float
    p90: float
    max: float
    mean: float

    @classmethod
    def of(cls, errors: np.ndarray) -> ErrorStats:
        return cls(
            median=float(np.median(errors)),
            p90=float(np.quantile(errors, 0.9)),
            max=float(np.max(errors)),
            mean=float(np.mean(errors)),
        )


@dataclass(frozen=True, kw_only=True)
class WorstPoint(JsonResult):
    """The point with the largest held-out error."""

    app: str
    placement: str
    local_bsz: int
    measured_s: float
    predicted_s: float
    rel_error: float


@dataclass(frozen=True, kw_only=True)
class FittedParams(JsonResult):
    """One application's fitted perf-model parameters (see the module docstring)."""

    compute_fixed_s: float
    compute_per_sample_s: float
    intra_s_per_pass: float
    intra_latency_ms: float
    nic_s_per_pass: float
    nic_latency_ms: float
    overlap: float
    gradient_bytes: float | None
    intra_gbps: float | None
    nic_gbps: float | None

    @classmethod
    def from_vector(cls, x: np.ndarray, gradient_bytes: float | None) -> FittedParams:
        values = dict(zip(PARAM_NAMES, (float(v) for v in x), strict=True))
        gbps = None if gradient_bytes is None else gradient_bytes * 8 / 1e9
        return cls(
            **values,
            gradient_bytes=gradient_bytes,
            intra_gbps=None if gbps is None else gbps / values["intra_s_per_pass"],
            nic_gbps=None if gbps is None else gbps / values["nic_s_per_pass"],
        )

    def vector(self) -> np.ndarray:
        return np.array([getattr(self, name) for name in PARAM_NAMES])

    def perf_model(
        self, local_bsz: int, gpus_per_node: int = GPUS_PER_NODE, nodes: int = 16
    ) -> tuple[JobPerfSpec, TopologyConfig]:
        """A :class:`JobPerfSpec` and one-rack :class:`TopologyConfig` that reproduce the fit.

        ``iteration_time(spec, placement, topology).total_s`` equals the calibrated prediction.
        """
        size = self.gradient_bytes or NOMINAL_GRADIENT_BYTES
        gbit = size * 8 / 1e9
        compute = self.compute_fixed_s + self.compute_per_sample_s * local_bsz
        spec = JobPerfSpec(
            name="calibrated",
            device=POLLUX_DEVICE,
            compute_s=max(compute, 1e-12),
            local_batch=local_bsz,
            fixed_compute_s=min(self.compute_fixed_s, max(compute, 1e-12)),
            gradient_bytes=size,
            bucket_bytes=size,  # one bucket: the fitted latency is per ring step
            overlap=self.overlap,
        )
        topology = TopologyConfig(
            name="calibrated",
            racks=1,
            nodes_per_rack=nodes,
            gpus_per_node=gpus_per_node,
            device=POLLUX_DEVICE,
            intra_link=Link(
                bandwidth_gbps=gbit / self.intra_s_per_pass, latency_us=self.intra_latency_ms * 1e3
            ),
            nic=Link(
                bandwidth_gbps=gbit / self.nic_s_per_pass, latency_us=self.nic_latency_ms * 1e3
            ),
        )
        return spec, topology


@dataclass(frozen=True, kw_only=True)
class AppCalibration(JsonResult):
    """One application: its fit, its errors, the baseline's, and where it errs most."""

    app: str
    points: int
    placements: int
    params: FittedParams
    in_sample: ErrorStats
    held_out: ErrorStats
    baseline_in_sample: ErrorStats
    baseline_held_out: ErrorStats
    held_out_median_by_nodes: dict[int, float]
    worst: WorstPoint


@dataclass(frozen=True, kw_only=True)
class CalibrationResult(JsonResult):
    """All applications: overall figures are over every point of every application.

    ``median_rel_error`` and ``max_rel_error`` are the held-out figures (each placement predicted
    by a model fitted without it); the in-sample and baseline figures sit beside them.
    """

    median_rel_error: float
    max_rel_error: float
    p90_rel_error: float
    in_sample_median_rel_error: float
    in_sample_max_rel_error: float
    baseline_median_rel_error: float
    baseline_max_rel_error: float
    points: int
    folds: int
    apps: tuple[AppCalibration, ...]
    held_out_median_by_nodes: dict[int, float]
    worst: WorstPoint
    worst_explained: str
