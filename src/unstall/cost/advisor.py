"""The cost advisor's entry: the cheapest configuration that trains a job within a time budget."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from unstall.cost.catalog import Catalog, Instance, default_catalog, load_catalog
from unstall.cost.predict import JobModel, TrainingConfig, job_from_model, job_from_profile
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
    job: JobProfile | JobModel | str | Path,
    config: RecommendConfig | None = None,
    *,
    catalog: Catalog | str | Path | None = None,
    precision: str = "fp32",
    on_instance: Callable[[Instance], None] | None = None,
    **question: Any,
) -> Recommendation:
    """Rank every configuration (1..``max_instances`` instances of each type of ``catalog``, of
    ``families`` when given: names like "p3", or one name) by predicted time and cost for
    training ``job`` on ``samples`` per epoch for ``epochs``; recommend the cheapest within
    ``budget_hours``.

    ``config`` is the question (a :class:`RecommendConfig`, built once, e.g. by
    :func:`recommend_config`, and handed whole); without one, the keyword ``question`` holds
    :func:`recommend_config`'s arguments (``samples=, epochs=, budget_hours=, global_batch=,
    network_efficiency=, max_instances=, families=``), built into one here.

    ``job`` is a measured :class:`JobProfile` (which ran in ``precision``: "fp32" or "fp16"), a
    :class:`JobModel` (e.g. :func:`job_from_model`'s FLOP estimate of a zoo model, which carries
    its own precision), or a name: a JobProfile JSON file, or a zoo model (estimated in
    ``precision`` on each GPU type of the catalog). ``catalog`` is a :class:`Catalog`, a CSV
    file, or None for the AWS catalog shipped in the package. Every GPU keeps the job's local
    batch unless ``global_batch`` is fixed; the network achieves ``network_efficiency`` of its
    line rate. ``on_instance`` follows each instance type predicted (for a progress bar).
    """
    chosen = resolve_catalog(catalog)
    config = _config(config, question)
    model = resolve_job(job, chosen, precision=precision)
    return rank_configurations(model, chosen, config, on_instance=on_instance)


def resolve_catalog(catalog: object = None) -> Catalog:
    """A catalog: the one given, the CSV file at a path, or (None) the AWS catalog shipped in
    the package."""
    if catalog is None:
        return default_catalog()
    if isinstance(catalog, Catalog):
        return catalog
    if isinstance(catalog, str | Path):
        return load_catalog(catalog)
    raise ConfigError(
        "recommend",
        "catalog",
        "must be a Catalog (default_catalog() or load_catalog(path)), a CSV file's path or"
        f" None, got {_shown(catalog)}",
    )


def resolve_job(job: object, catalog: Catalog, *, precision: str = "fp32") -> JobModel:
    """What the cost model predicts: a :class:`JobModel` as is; a :class:`JobProfile` (which
    ran in ``precision``) or a JobProfile JSON file, on ``catalog``'s GPU types; a zoo model's
    name, estimated in ``precision`` on each of them."""
    if isinstance(job, JobModel):
        return job
    if isinstance(job, Path) or (isinstance(job, str) and job.lower().endswith(".json")):
        job = JobProfile.from_json(Path(job))
    if isinstance(job, JobProfile):
        return job_from_profile(job, precision=precision, devices=catalog.devices)
    if isinstance(job, str):
        return job_from_model(job, catalog.devices, precision=precision)
    raise ConfigError(
        "recommend",
        "job",
        f"must be a JobProfile, a JobModel, a profile's .json file or a zoo model's name, got"
        f" {_shown(job)}",
    )


def _config(config: object, question: dict[str, Any]) -> RecommendConfig:
    """``config``, or one built of the keyword ``question`` when it is None."""
    if config is None:
        return recommend_config(**question)
    if not isinstance(config, RecommendConfig):
        raise ConfigError(
            "recommend",
            "config",
            f"must be a RecommendConfig (recommend_config(...)) or None, got {_shown(config)}",
        )
    if question:
        raise ConfigError(
            "recommend",
            "config",
            f"given with {', '.join(sorted(question))}: put them in the config",
        )
    return config


def _shown(value: object) -> str:
    """A wrong argument for an error line: its type, and its value when that is short text."""
    if isinstance(value, str | Path):
        return f"the {type(value).__name__} {str(value)!r}"
    return a_or_an(type(value).__name__)
