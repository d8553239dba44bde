from __future__ import annotations

import dataclasses
import enum
import json
import math
from pathlib import Path

import numpy as np
import pytest

from unstall.config import check, check_positive, from_mapping, load_table_file
from unstall.errors import ConfigError, DataFileError
from unstall.results import JsonResult, config_path_for, to_jsonable, write_result


class Color(enum.Enum):
    RED = "red"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Inner:
    x: float
    path: Path


@dataclasses.dataclass(frozen=True, kw_only=True)
class Result(JsonResult):
    name: str
    inner: Inner
    values: tuple[float, ...]
    color: Color
    arr: object


@dataclasses.dataclass(frozen=True, kw_only=True)
class Cfg:
    n: int
    rate: float = 1.0

    def __post_init__(self) -> None:
        check_positive(self, n=self.n, rate=self.rate)


def make_result() -> Result:
    return Result(
        name="r",
        inner=Inner(x=float("nan"), path=Path("/tmp/a")),
        values=(1.0, math.inf),
        color=Color.RED,
        arr=np.arange(3, dtype=np.int64),
    )


def test_to_jsonable_converts_nested_values() -> None:
    out = to_jsonable(make_result())
    assert out == {
        "name": "r",
        "inner": {"x": None, "path": "/tmp/a"},
        "values": [1.0, None],
        "color": "red",
        "arr": [0, 1, 2],
    }


def test_to_jsonable_rejects_unknown_objects() -> None:
    with pytest.raises(TypeError, match="object"):
        to_jsonable(object())


def test_write_result_writes_result_and_config_beside_it(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "out.json"
    cpath = write_result(path, make_result(), Cfg(n=3), command="unstall x")
    assert cpath == tmp_path / "sub" / "out.config.json"
    assert json.loads(path.read_text())["name"] == "r"
    cfg = json.loads(cpath.read_text())
    assert cfg["config"] == {"n": 3, "rate": 1.0}
    assert cfg["command"] == "unstall x"
    assert "unstall_version" in cfg


def test_config_path_for_non_json_name() -> None:
    assert config_path_for(Path("a/result")) == Path("a/result.config.json")


def test_config_errors_name_class_and_field() -> None:
    with pytest.raises(ConfigError, match=r"Cfg\.rate: must be > 0, got -1"):
        Cfg(n=1, rate=-1.0)
    with pytest.raises(ConfigError, match=r"Thing\.size: too big"):
        check(False, "Thing", "size", "too big")


def test_from_mapping_names_unknown_fields(tmp_path: Path) -> None:
    assert from_mapping(Cfg, {"n": 2}, source="x.toml") == Cfg(n=2)
    with pytest.raises(DataFileError, match=r"x\.toml, field 'speed': unknown field"):
        from_mapping(Cfg, {"n": 2, "speed": 1}, source="x.toml")
    with pytest.raises(DataFileError, match=r"x\.toml"):
        from_mapping(Cfg, {}, source="x.toml")


def test_load_table_file_toml_json_and_errors(tmp_path: Path) -> None:
    good = tmp_path / "a.toml"
    good.write_text("n = 3\n")
    assert load_table_file(good) == {"n": 3}
    js = tmp_path / "a.json"
    js.write_text('{"n": 4}')
    assert load_table_file(js) == {"n": 4}
    bad = tmp_path / "b.json"
    bad.write_text('{\n"n": }')
    with pytest.raises(DataFileError, match=r"b\.json, line 2: not valid JSON"):
        load_table_file(bad)
    with pytest.raises(DataFileError, match="no such file"):
        load_table_file(tmp_path / "missing.toml")
    arr = tmp_path / "c.json"
    arr.write_text("[1]")
    with pytest.raises(DataFileError, match="top level"):
        load_table_file(arr)


def test_an_interrupted_write_leaves_the_previous_file_whole(tmp_path: Path) -> None:
    from unstall.results import replaced_atomically, write_text_atomically

    path = tmp_path / "jobs.csv"
    write_text_atomically(path, "job_id\n1\n2\n3\n")
    with pytest.raises(KeyboardInterrupt), replaced_atomically(path) as tmp:
        assert tmp.parent == path.parent and tmp.suffix == ".csv"  # writers go by the suffix
        tmp.write_text("job_id\n1\n", encoding="utf-8")  # half of a new table, then Ctrl-C
        raise KeyboardInterrupt
    assert path.read_text() == "job_id\n1\n2\n3\n"
    assert [p.name for p in tmp_path.iterdir()] == ["jobs.csv"]  # no partial file left


def test_write_result_replaces_a_previous_result_whole(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    write_result(out, {"a": 1}, {"x": 1}, command="first")
    write_result(out, {"a": 2}, {"x": 2}, command="second")
    assert json.loads(out.read_text()) == {"a": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.config.json", "r.json"]
