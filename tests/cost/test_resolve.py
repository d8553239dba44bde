"""The cost advisor's names: a profile file or a zoo model to a job, a catalog file or the
shipped one; bad input is one line naming the parameter or the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from unstall.cost import default_catalog, resolve_catalog, resolve_job
from unstall.errors import ConfigError, DataFileError
from unstall.workload.profiles import JobProfile


def test_catalog_file_or_the_shipped_one(tmp_path: Path) -> None:
    assert resolve_catalog(None) == default_catalog()
    assert resolve_catalog(default_catalog()) == default_catalog()
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
    job = resolve_job(profile.save(tmp_path / "p.json"), catalog)
    assert job.name == "net" and job.measured == {"4": 0.12}
    assert resolve_job(str(tmp_path / "p.json"), catalog) == job
    assert resolve_job(profile, catalog) == job and resolve_job(job, catalog) is job
    zoo_job = resolve_job("resnet50", catalog, precision="fp16")
    assert set(zoo_job.per_device) == set(catalog.devices)
    with pytest.raises(ConfigError, match=r"recommend\.job: must be a JobProfile.*got a dict"):
        resolve_job({}, catalog)
    with pytest.raises(DataFileError, match=r"none\.json: no such file"):
        resolve_job(tmp_path / "none.json", catalog)
    with pytest.raises(ConfigError, match="unknown model"):
        resolve_job("nosuch", catalog)
