"""The cost advisor's entry: the cheapest configuration that trains a job within a time budget."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from unstall.cost.catalog import Catalog, Instance
from unstall.cost.predict import JobModel, TrainingConfig, job_from_profile
from unstall.cost.ranking import Recommendation, RecommendConfig, rank_configurations
from unstall.errors import ConfigError, a_or_an
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
    families: str | Sequence[str] = (),
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
        # One family may come alone: a str is a sequence too, and tuple() would split it into
        # letters ("p3" -> "p", "3").
        families=(families,) if isinstance(families, str) else tuple(families),
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
    families: str | Sequence[str] = (),
    precision: str = "fp32",
    on_instance: Callable[[Instance], None] | None = None,
) -> Recommendation:
    """Rank every configuration (1..``max_instances`` instances of each type of ``catalog``, of
    ``families`` when given: names like "p3", or one name) by predicted time and cost for
    training ``job`` on ``samples`` per epoch for ``epochs``; recommend the cheapest within
    ``budget_hours``.

    ``job`` is a measured :class:`JobProfile` (which ran in ``precision``: "fp32" or "fp16") or a
    :class:`JobModel` (e.g. :func:`job_from_model`'s FLOP estimate of a zoo model, which carries
    its own precision). Every GPU keeps the job's local batch unless ``global_batch`` is fixed;
    the network achieves ``network_efficiency`` of its line rate. ``on_instance`` follows each
    instance type predicted (for a progress bar).
    """
    _check_job(job)
    if not isinstance(catalog, Catalog):
        raise ConfigError(
            "recommend",
            "catalog",
            f"must be a Catalog (default_catalog() or load_catalog(path)), got {_shown(catalog)}",
        )
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


def _shown(value: object) -> str:
    """A wrong argument for an error line: its type, and its value when that is short text."""
    if isinstance(value, str | Path):
        return f"the {type(value).__name__} {str(value)!r}"
    return a_or_an(type(value).__name__)


def _check_job(job: object) -> None:
    """``job`` is what :func:`recommend` predicts; the usual mistakes get the call that makes
    the right thing (a model's name, a profile's file)."""
    if isinstance(job, JobProfile | JobModel):
        return
    why = f"must be a JobProfile or a JobModel, got {_shown(job)}"
    if isinstance(job, str | Path) and str(job).endswith(".json"):
        why += f": read a saved profile with JobProfile.load({str(job)!r})"
    elif isinstance(job, str):
        why += f": for the zoo model, build one with job_from_model({job!r}, catalog.devices)"
    raise ConfigError("recommend", "job", why)
