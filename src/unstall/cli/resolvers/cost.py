"""The cost advisor's resolver: command-line text to what :func:`unstall.cost.recommend` takes.

- the job: a JobProfile JSON file (``--profile``, from ``unstall profile run --profile-out``) or a
  zoo model name (``--model``, estimated from its FLOPs on each GPU type of the catalog);
- the catalog: a CSV file (``--catalog``) or, by default, the AWS catalog shipped in the package.
"""

from __future__ import annotations

from pathlib import Path

from unstall.cost import Catalog, JobModel, default_catalog, job_from_model, job_from_profile
from unstall.cost import load_catalog as read_catalog
from unstall.errors import ConfigError
from unstall.workload.profiles import JobProfile


def resolve_catalog(path: str | Path | None) -> Catalog:
    """``--catalog``: the CSV file at ``path``, or the shipped AWS catalog when none is given."""
    return default_catalog() if path is None else read_catalog(path)


def resolve_job(
    *,
    profile: str | Path | None,
    model: str | None,
    catalog: Catalog,
    precision: str = "fp32",
) -> JobModel:
    """``--profile FILE`` or ``--model NAME`` (exactly one) to the job the cost model predicts.

    A profile ran in ``precision``; a zoo model is estimated in ``precision`` on each GPU type of
    ``catalog``.
    """
    if (profile is None) == (model is None):
        raise ConfigError("recommend", "--profile/--model", "give exactly one of them")
    if profile is not None:
        return job_from_profile(
            JobProfile.from_json(Path(profile)), precision=precision, devices=catalog.devices
        )
    assert model is not None
    return job_from_model(model, catalog.devices, precision=precision)
