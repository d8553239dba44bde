"""The front door: ``unstall.cost.recommend`` takes a measured profile or a job model, a catalog
object and the question as keywords, and answers as the ranking does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from unstall.cost import (
    Catalog,
    JobModel,
    RecommendConfig,
    TrainingConfig,
    default_catalog,
    job_from_model,
    job_from_profile,
    parse_catalog,
    recommend,
    recommend_config,
)
from unstall.cost.ranking import rank_configurations
from unstall.errors import ConfigError, DataFileError
from unstall.workload.profiles import JobProfile

PROFILE = JobProfile(
    model="resnet50",
    device="v100",
    compute_s=0.11,
    local_batch=32,
    gradient_bytes=102_228_128,
    gradient_tensors=161,
    layers=54,
    measured={"8": 0.125, "4": 0.118},
)
IMAGENET: dict[str, Any] = {"samples": 1_281_167, "epochs": 90.0}


def test_a_profile_is_recommended_for_as_the_ranking_of_its_job_model() -> None:
    catalog = default_catalog()
    rec = recommend(PROFILE, catalog=catalog, budget_hours=24.0, families=["p3"], **IMAGENET)
    config = recommend_config(budget_hours=24.0, families=("p3",), **IMAGENET)
    same = rank_configurations(job_from_profile(PROFILE), catalog, config)
    assert rec == same
    assert rec.recommended is not None and rec.recommended.instance.startswith("p3.")
    assert {c.source for c in rec.candidates} >= {"measured", "modelled"}


def test_fp16_profile_and_job_model_and_progress() -> None:
    catalog = default_catalog()
    seen: list[str] = []
    job = job_from_profile(PROFILE, precision="fp16")
    assert isinstance(job, JobModel)
    rec = recommend(
        job,
        catalog=catalog,
        budget_hours=24.0,
        max_instances=2,
        on_instance=lambda i: seen.append(i.instance),
        **IMAGENET,
    )
    assert seen == [i.instance for i in catalog]
    assert sorted((c.instance, c.count) for c in rec.candidates) == sorted(
        (i.instance, count) for i in catalog for count in (1, 2)
    )
    # The profile ran in fp16 on a V100: there its compute is the measured one; elsewhere it is
    # scaled by the fp16 speeds, not the fp32 ones. The K80 has no fast fp16: a V100's fp16 run
    # says a K80 is several times further behind than an fp32 run says.
    fp32 = recommend(PROFILE, catalog=catalog, budget_hours=24.0, max_instances=2, **IMAGENET)
    as_fp32 = {(c.instance, c.count): c.compute_s for c in fp32.candidates}
    for c in rec.candidates:
        if c.gpu == "v100":
            assert c.compute_s == as_fp32[c.instance, c.count] == PROFILE.compute_s
        else:
            assert c.compute_s != as_fp32[c.instance, c.count], c
        if c.gpu == "k80":
            assert c.compute_s > 3 * as_fp32[c.instance, c.count], c


def test_a_catalog_of_ones_own_and_bad_questions_name_the_field() -> None:
    catalog = parse_catalog(
        "instance,gpus,gpu,gpu_memory_gb,gpu_link,network_gbps,usd_per_hour,date,source\n"
        "mine.4,4,v100,16,nvlink2,25,10.0,2026-11,me\n",
        source="mine.csv",
    )
    assert isinstance(catalog, Catalog)
    rec = recommend(PROFILE, catalog=catalog, budget_hours=1000.0, max_instances=2, **IMAGENET)
    assert rec.catalog == "mine.csv" and {c.instance for c in rec.candidates} == {"mine.4"}
    with pytest.raises(ConfigError, match=r"RecommendConfig\.budget_hours"):
        recommend(PROFILE, catalog=catalog, budget_hours=-1.0, **IMAGENET)
    with pytest.raises(ConfigError, match=r"TrainingConfig\.network_efficiency"):
        recommend(PROFILE, catalog=catalog, budget_hours=1.0, network_efficiency=2.0, **IMAGENET)


def test_the_job_may_be_a_zoo_models_name_or_a_profiles_file(tmp_path: Path) -> None:
    catalog = default_catalog()
    question: dict[str, Any] = {"samples": 10, "epochs": 1, "budget_hours": 2}
    by_name = recommend("resnet50", catalog=catalog, **question)
    built = recommend(job_from_model("resnet50", catalog.devices), catalog=catalog, **question)
    assert by_name.candidates == built.candidates
    path = PROFILE.save(tmp_path / "p.json")
    assert recommend(path, catalog=catalog, **question) == recommend(
        PROFILE, catalog=catalog, **question
    )
    with pytest.raises(ConfigError, match=r"recommend\.job: .*got a dict$"):
        recommend({}, catalog=catalog, **question)  # type: ignore[arg-type]


def test_the_question_is_one_config_built_once() -> None:
    catalog = default_catalog()
    config = recommend_config(budget_hours=24.0, **IMAGENET)
    assert recommend(PROFILE, config, catalog=catalog) == recommend(
        PROFILE, catalog=catalog, budget_hours=24.0, **IMAGENET
    )
    with pytest.raises(ConfigError, match=r"recommend\.config: given with budget_hours"):
        recommend(PROFILE, config, catalog=catalog, budget_hours=2.0)
    with pytest.raises(ConfigError, match=r"recommend\.config: must be a RecommendConfig"):
        recommend(PROFILE, {"budget_hours": 2}, catalog=catalog)  # type: ignore[arg-type]


def test_a_catalog_that_is_no_catalog_is_refused_by_name() -> None:
    with pytest.raises(DataFileError, match="aws: no such file"):
        recommend(PROFILE, catalog="aws", budget_hours=2.0, **IMAGENET)
    with pytest.raises(ConfigError) as info:
        recommend(PROFILE, catalog=3, budget_hours=2.0, **IMAGENET)  # type: ignore[arg-type]
    assert str(info.value) == (
        "recommend.catalog: must be a Catalog (default_catalog() or load_catalog(path)), a CSV"
        " file's path or None, got an int"
    )


def test_one_family_alone_is_one_family_not_its_letters() -> None:
    catalog = default_catalog()
    one = recommend(PROFILE, catalog=catalog, budget_hours=24.0, families="p3", **IMAGENET)
    listed = recommend(PROFILE, catalog=catalog, budget_hours=24.0, families=["p3"], **IMAGENET)
    assert one == listed
    assert {c.instance.split(".")[0] for c in one.candidates} == {"p3"}
    assert recommend_config(budget_hours=1.0, families="p3", **IMAGENET).families == ("p3",)
    with pytest.raises(ConfigError, match=r"RecommendConfig\.families: .*got the str 'p3'"):
        RecommendConfig(
            training=TrainingConfig(samples=10, epochs=1.0),
            budget_hours=1.0,
            families="p3",  # type: ignore[arg-type]
        )
