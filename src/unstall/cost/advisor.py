"""The cost advisor's entry: the cheapest configuration that trains a job within a time budget."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from unstall.cost.catalog import Catalog, Instance
from unstall.cost.predict import JobModel, TrainingConfig, job_from_profile
from unstall.cost.ranking import Recommendation, RecommendConfig, rank_configurations
from unstall.net.topology import CALIBRATED_NETWORK_EFFICIENCY
from unstall.workload.profiles import JobProfile


def recommend_config(
    *,
    samples: int,
    epochs: float,
    budget_hours: float,
    global_batch: int | None = None,
    network_efficiency: float = CALIBRATED_NETWORK_EFFICIENCY,
    max_instances: int = 16,
    families: Sequence[str] = (),
) -> RecommendConfig:
    """The question :func:`recommend` answers, as plain data (what a run's saved config holds);
    the arguments are :func:`recommend`'s."""
    training = TrainingConfig(
        samples=samples,
        epochs=epochs,
        global_batch=global_batch,
        network_efficiency=network_efficiency,
    )
    return RecommendConfig(
        training=training,
        budget_hours=budget_hours,
        max_instances=max_instances,
        families=tuple(families),
    )


def recommend(
    job: JobProfile | JobModel,
    *,
    catalog: Catalog,
    samples: int,
    epochs: float,
    budget_hours: float,
    global_batch: int | None = None,
    network_efficiency: float = CALIBRATED_NETWORK_EFFICIENCY,
    max_instances: int = 16,
    families: Sequence[str] = (),
    precision: str = "fp32",
    on_instance: Callable[[Instance], None] | None = None,
) -> Recommendation:
    """Rank every configuration (1..``max_instances`` instances of each type of ``catalog``, of
    ``families`` when given) by predicted time and cost for training ``job`` on ``samples`` per
    epoch for ``epochs``; recommend the cheapest within ``budget_hours``.

    ``job`` is a measured :class:`JobProfile` (which ran in ``precision``: "fp32" or "fp16") or a
    :class:`JobModel` (e.g. :func:`job_from_model`'s FLOP estimate of a zoo model, which carries
    its own precision). Every GPU keeps the job's local batch unless ``global_batch`` is fixed;
    the network achieves ``network_efficiency`` of its line rate. ``on_instance`` follows each
    instance type predicted (for a progress bar).
    """
    config = recommend_config(
        samples=samples,
        epochs=epochs,
        budget_hours=budget_hours,
        global_batch=global_batch,
        network_efficiency=network_efficiency,
        max_instances=max_instances,
        families=families,
    )
    model = (
        job
        if isinstance(job, JobModel)
        else job_from_profile(job, precision=precision, devices=catalog.devices)
    )
    return rank_configurations(model, catalog, config, on_instance=on_instance)
