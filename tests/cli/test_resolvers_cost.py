"""The cost advisor's resolver: a profile file or a zoo model to a job, a catalog file or the
shipped one; bad input is one line naming the option or the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from unstall.cli.resolvers.cost import resolve_catalog, resolve_job
from unstall.cost import default_catalog
from unstall.errors import ConfigError, DataFileError
from unstall.workload.profiles import JobProfile


def test_catalog_file_or_the_shipped_one(tmp_path: Path) -> None:
    assert resolve_catalog(None) == default_catalog()
    path = tmp_path / "cat.csv"
    path.write_text(
        "instance,gpus,gpu,gpu_memory_gb,gpu_link,network_gbps,usd_per_hour,date,source\n"
        "x.1,1,t4,16,none,25,0.5,2026-11,me\n",
        encoding="utf-8",
    )
    catalog = resolve_catalog(path)
    assert catalog.source == str(path) and [i.instance for i in catalog] == ["x.1"]
    with pytest.raises(DataFileError, match=r"absent\.csv: no such file"):
        resolve_catalog(tmp_path / "absent.csv")


def test_job_from_a_profile_or_a_zoo_model(tmp_path: Path) -> None:
    catalog = default_catalog()
    profile = JobProfile(
        model="net",
        device="v100",
        compute_s=0.1,
        local_batch=16,
        gradient_bytes=1000,
        gradient_tensors=2,
        layers=2,
        measured={"4": 0.12},
    )
    job = resolve_job(profile=profile.save(tmp_path / "p.json"), model=None, catalog=catalog)
    assert job.name == "net" and job.measured == {"4": 0.12}
    zoo_job = resolve_job(profile=None, model="resnet50", catalog=catalog, precision="fp16")
    assert set(zoo_job.per_device) == set(catalog.devices)
    with pytest.raises(ConfigError, match="exactly one"):
        resolve_job(profile=None, model=None, catalog=catalog)
    with pytest.raises(DataFileError, match=r"none\.json: no such file"):
        resolve_job(profile=tmp_path / "none.json", model=None, catalog=catalog)
    with pytest.raises(ConfigError, match="unknown model"):
        resolve_job(profile=None, model="nosuch", catalog=catalog)
