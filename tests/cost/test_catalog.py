"""The instance catalog: the shipped AWS file, its facts, and errors that name file, line, field."""

from __future__ import annotations

import csv
import fnmatch
import tomllib
from pathlib import Path

import pytest

from conftest import REPO_ROOT, shared_file
from unstall.cost.catalog import (
    DEFAULT_CATALOG_FILE,
    Catalog,
    Instance,
    default_catalog,
    load_catalog,
    parse_catalog,
)
from unstall.errors import ConfigError, DataFileError
from unstall.net.hardware import DEVICE_PRESETS

HEADER = "instance,gpus,gpu,gpu_memory_gb,gpu_link,network_gbps,usd_per_hour,date,source"
ROW_BIG = "big.8x,8,v100,16,nvlink2,25,24.48,2026-11,test"
ROW_ONE = "one.1x,1,t4,16,none,25,0.526,2026-11,test"


def _error(text: str) -> DataFileError:
    with pytest.raises(DataFileError) as info:
        parse_catalog(text, source="cat.csv")
    return info.value


def test_default_catalog_has_every_family_with_a_source_and_date() -> None:
    catalog = default_catalog()
    families = {i.family for i in catalog}
    assert families == {"p2", "p3", "p3dn", "g4dn", "g5", "p4d", "p5"}
    assert len(catalog) == 15
    for instance in catalog:
        assert instance.source and instance.date and instance.region == "us-east-1"
        assert instance.device in DEVICE_PRESETS
        assert instance.instance.startswith(instance.family + ".")
    p3 = catalog.get("p3.16xlarge")
    assert (p3.gpus, p3.device, p3.interconnect, p3.network_gbps, p3.usd_per_hour) == (
        8,
        "v100",
        "nvlink2",
        25.0,
        24.48,
    )
    assert catalog.get("g4dn.xlarge").interconnect == ""  # one GPU: no GPU link
    assert catalog.devices == ("k80", "v100", "t4", "a10g", "a100", "h100")


def test_default_catalog_agrees_with_the_public_facts() -> None:
    """The shipped file was written from ../shared/data/cloud: GPUs, type, memory, price."""
    path = shared_file("cloud", "aws_gpu_instances.csv")
    catalog = default_catalog()
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert {r["instance"] for r in rows} == {i.instance for i in catalog}
    for row in rows:
        ours = catalog.get(row["instance"])
        assert ours.gpus == int(row["gpus"])
        assert ours.device == row["gpu"].lower()
        assert ours.gpu_memory_gb == float(row["gpu_mem_gb"])
        assert ours.network_gbps == float(row["network_gbps"])
        assert ours.usd_per_hour == float(row["usd_per_hour"])
        assert (ours.gpu_link == "none") == (row["gpu_link"] == "none")


def test_the_default_file_ships_in_the_wheel() -> None:
    """pyproject's package data must match the catalog's path inside the package."""
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["unstall"]
    relative = f"cost/data/{DEFAULT_CATALOG_FILE}"
    assert any(fnmatch.fnmatch(relative, p) for p in patterns), patterns
    assert (REPO_ROOT / "src" / "unstall" / relative).is_file()


def test_user_catalog_with_comments_blank_lines_and_optional_columns(tmp_path: Path) -> None:
    path = tmp_path / "mine.csv"
    path.write_text(
        "# my prices\n\n"
        + HEADER
        + ",network_latency_us,note,min_billed_s\n"
        + ROW_BIG
        + ",5,fast,3600\n"
        + ROW_ONE
        + ",,,\n",
        encoding="utf-8",
    )
    catalog = load_catalog(path)
    assert catalog.source == str(path)
    assert [i.instance for i in catalog] == ["big.8x", "one.1x"]
    assert catalog.get("big.8x").network_latency_us == 5.0
    assert catalog.get("one.1x").network_latency_us == 25.0  # empty optional cell: the default
    assert catalog.get("big.8x").note == "fast"
    assert catalog.get("big.8x").min_billed_s == 3600.0  # billed by the hour
    assert catalog.get("one.1x").min_billed_s == 60.0
    assert catalog.dates == ("2026-11",)


@pytest.mark.parametrize(
    ("text", "line", "field", "why"),
    [
        (f"{HEADER}\nbig.8x,eight,v100,16,nvlink2,25,24.48,2026-11,x", 2, "gpus", "integer"),
        (f"{HEADER}\nbig.8x,8,v100,16,nvlink2,25,cheap,2026-11,x", 2, "usd_per_hour", "number"),
        (f"{HEADER}\nbig.8x,8,b200,16,nvlink2,25,24.48,2026-11,x", 2, "gpu", "unknown GPU"),
        (f"{HEADER}\nbig.8x,8,v100,16,warp,25,24.48,2026-11,x", 2, "gpu_link", "unknown inter"),
        (f"{HEADER}\nbig.8x,8,v100,16,none,25,24.48,2026-11,x", 2, "gpu_link", "one GPU"),
        (f"{HEADER}\none.1x,1,t4,16,pcie3,25,0.5,2026-11,x", 2, "gpu_link", "one GPU"),
        (f"{HEADER}\nbig.8x,8,v100,16,nvlink2,25,-1,2026-11,x", 2, "usd_per_hour", "> 0"),
        (f"{HEADER}\nbig.8x,8,v100,16,nvlink2,25,nan,2026-11,x", 2, "usd_per_hour", "finite"),
        (f"{HEADER}\nbig.8x,8,v100,16,nvlink2,25,24.48,Nov 2026,x", 2, "date", "YYYY"),
        (f"{HEADER},min_billed_s\n{ROW_BIG},-60", 2, "min_billed_s", ">= 0"),
        (f"{HEADER}\nbig.8x,8,v100,16,nvlink2,25,24.48,2026-11,", 2, "source", "where"),
        (f"{HEADER}\n{ROW_BIG}\n\n# dup\n{ROW_BIG}", 5, "instance", "already on line 2"),
        (f"# c\n{HEADER},price\n{ROW_BIG},1", 2, "price", "unknown column"),
        (f"{HEADER.replace(',date', '')}\n{ROW_BIG}", 1, "date", "missing"),
        (f"{HEADER},gpus\n{ROW_BIG},8", 1, "gpus", "twice"),
    ],
)
def test_bad_rows_name_the_line_and_field(text: str, line: int, field: str, why: str) -> None:
    error = _error(text)
    assert (error.path, error.line, error.field) == ("cat.csv", line, field)
    assert why in error.why
    assert f"cat.csv, line {line}, field '{field}'" in str(error)


def test_a_row_with_the_wrong_number_of_cells_names_its_line() -> None:
    error = _error(f"{HEADER}\n{ROW_ONE}\n{ROW_BIG},extra")
    assert error.line == 3 and "10 cells" in error.why and "9 columns" in error.why


@pytest.mark.parametrize("text", ["", "# only a comment\n\n", HEADER + "\n"])
def test_empty_catalogs_are_refused(text: str) -> None:
    assert "no" in _error(text).why


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(DataFileError, match="no such file"):
        load_catalog(tmp_path / "absent.csv")


def test_instance_and_catalog_validate_in_python_too() -> None:
    good = dict(
        instance="x.1",
        gpus=1,
        gpu="T4",
        gpu_memory_gb=16.0,
        gpu_link="none",
        network_gbps=10.0,
        usd_per_hour=1.0,
        date="2026",
        source="s",
    )
    assert Instance(**good).device == "t4"  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"Instance\.gpus"):
        Instance(**{**good, "gpus": 0})  # type: ignore[arg-type]
    one = Instance(**good)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="duplicate"):
        Catalog(instances=(one, one), source="s")
    with pytest.raises(ConfigError, match="at least one"):
        Catalog(instances=(), source="s")
    with pytest.raises(ConfigError, match="no instance type 'y'"):
        Catalog(instances=(one,), source="s").get("y")
