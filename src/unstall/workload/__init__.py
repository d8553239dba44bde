"""One description of a DL job shared by every part of unstall: the model zoo, job profiles and
the iteration-time (perf) model.

What this part offers:

- The zoo: real ``torch.nn`` models by name (:data:`MODEL_REGISTRY` of :class:`ModelSpec`),
  ``build(name, **options)``, ``example_batch``, ``loss_fn``, and their static facts,
  ``facts(name, **options)`` -> :class:`ModelFacts` (parameters, gradient bytes and tensors,
  weight layers, forward FLOPs) or ``facts_table()`` for every model. The zoo imports torch; it
  is loaded on first use, so the perf model and the simulator start without it.
- A zoo model as a job to train: ``zoo_job(name, batch, seed, **options)`` ->
  :class:`ZooJob` ``(model_fn, data_fn, loss)``, its :class:`SyntheticData` (one seed rule for
  every part: worker ``rank``'s batch of step ``i`` from ``(seed, i, rank)``, so a job resumes
  at any data position); the losses by name, :data:`LOSSES` and ``resolve_loss``.
- :class:`JobProfile`: a measured job (``unstall profile`` writes it; the simulator and the cost
  advisor read it), saved and read as JSON.
- The perf model: a job (:class:`JobPerfSpec`; ``spec_for(model, device)`` for a zoo model or a
  Pollux application) on a :class:`Placement` (GPUs per node, Pollux strings like ``"22"``) over
  a :class:`unstall.net.TopologyConfig` -> ``iteration_time(...)`` (:class:`IterationTime`:
  compute, communication, exposed part, bottleneck link). ``comm_plan`` and ``plan_time`` split
  it into the plan of links and bytes and its (fast) evaluation; ``slowdown`` compares a
  placement with the consolidated one (``consolidated_placement``).
- Calibration against Pollux's measured placements: ``read_placements_dir(root)``, then
  ``run_calibration(tables, CalibrationConfig(...))`` -> :class:`CalibrationResult` and the
  per-point table.

Example:

>>> from unstall.net import topology_preset
>>> from unstall.workload import JobPerfSpec, Placement, facts, iteration_time, spec_for
>>> cluster = topology_preset("small")
>>> job = JobPerfSpec(compute_s=0.1, gradient_bytes=100e6, device="v100")
>>> one_node = iteration_time(job, Placement.parse("4"), cluster)
>>> two_nodes = iteration_time(job, Placement.parse("22"), cluster)
>>> two_nodes.total_s > one_node.total_s, two_nodes.bottleneck
(True, ('nic', 0))
>>> resnet = facts("resnet50")
>>> resnet.params, resnet.gradient_tensors
(25557032, 161)
>>> spec_for("resnet50", cluster.device).gradient_bytes == resnet.gradient_bytes
True
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from unstall.workload.calibration import calibrate_app, run_calibration
from unstall.workload.calibration_fit import CalibrationConfig
from unstall.workload.calibration_results import (
    AppCalibration,
    CalibrationResult,
    FittedParams,
)
from unstall.workload.job_specs import (
    APPLICATION_MODELS,
    COMM_KINDS,
    FRAMEWORK_OVERHEAD_S,
    PRECISIONS,
    JobPerfSpec,
    spec_for,
)
from unstall.workload.perf import IterationTime, iteration_time, plan_time, slowdown
from unstall.workload.placement import Placement, consolidated_placement
from unstall.workload.pollux_placements import read_placements, read_placements_dir
from unstall.workload.profiles import JobProfile
from unstall.workload.traffic import CommPlan, LinkLoad, comm_plan

if TYPE_CHECKING:
    from unstall.workload.losses import LOSSES, resolve_loss
    from unstall.workload.model_facts import ModelFacts, TensorFact
    from unstall.workload.zoo import (
        MODEL_REGISTRY,
        ModelSpec,
        ZooFactsTable,
        build,
        example_batch,
        facts,
        facts_table,
        loss_fn,
    )
    from unstall.workload.zoo_jobs import SyntheticData, ZooJob, zoo_job

# The names that need torch, and the module that holds each: imported on first access.
_LAZY = {
    "MODEL_REGISTRY": "unstall.workload.zoo",
    "ModelSpec": "unstall.workload.zoo",
    "ZooFactsTable": "unstall.workload.zoo",
    "build": "unstall.workload.zoo",
    "example_batch": "unstall.workload.zoo",
    "facts": "unstall.workload.zoo",
    "facts_table": "unstall.workload.zoo",
    "loss_fn": "unstall.workload.zoo",
    "ModelFacts": "unstall.workload.model_facts",
    "TensorFact": "unstall.workload.model_facts",
    "LOSSES": "unstall.workload.losses",
    "resolve_loss": "unstall.workload.losses",
    "SyntheticData": "unstall.workload.zoo_jobs",
    "ZooJob": "unstall.workload.zoo_jobs",
    "zoo_job": "unstall.workload.zoo_jobs",
}


def __getattr__(name: str) -> Any:
    """The zoo's names, imported (with torch) the first time one is asked for."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "APPLICATION_MODELS",
    "COMM_KINDS",
    "FRAMEWORK_OVERHEAD_S",
    "LOSSES",
    "MODEL_REGISTRY",
    "PRECISIONS",
    "AppCalibration",
    "CalibrationConfig",
    "CalibrationResult",
    "CommPlan",
    "FittedParams",
    "IterationTime",
    "JobPerfSpec",
    "JobProfile",
    "LinkLoad",
    "ModelFacts",
    "ModelSpec",
    "Placement",
    "SyntheticData",
    "TensorFact",
    "ZooFactsTable",
    "ZooJob",
    "build",
    "calibrate_app",
    "comm_plan",
    "consolidated_placement",
    "example_batch",
    "facts",
    "facts_table",
    "iteration_time",
    "loss_fn",
    "plan_time",
    "read_placements",
    "read_placements_dir",
    "resolve_loss",
    "run_calibration",
    "slowdown",
    "spec_for",
    "zoo_job",
]
