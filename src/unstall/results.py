"""JSON for result dataclasses, and the ``--json PATH`` convention of the CLI.

Every run returns a dataclass with ``to_json()``; the CLI writes exactly that to ``PATH`` and the
run's full config beside it (``PATH`` with ``.config.json``), so any figure can be reproduced.
Every output file is written whole or not at all (:func:`replaced_atomically`): an interrupted
run leaves the previous file as it was, never a shorter one that still reads as valid.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def to_jsonable(obj: Any) -> Any:
    """Turn dataclasses, enums, paths, numpy scalars/arrays and containers into JSON values.

    Non-finite floats become ``None`` (JSON has no NaN or infinity).
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return to_jsonable(obj.value)
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, bool | int | str) or obj is None:
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        items = sorted(obj, key=repr) if isinstance(obj, set | frozenset) else obj
        return [to_jsonable(v) for v in items]
    if hasattr(obj, "tolist"):  # numpy arrays and scalars, torch tensors
        return to_jsonable(obj.tolist())
    if hasattr(obj, "to_dict"):  # pandas objects
        return to_jsonable(obj.to_dict())
    raise TypeError(f"cannot write {type(obj).__name__} as JSON")


class JsonResult:
    """Mixin for result dataclasses: ``to_dict()`` and ``to_json()``."""

    def to_dict(self) -> dict[str, Any]:
        out = to_jsonable(self)
        assert isinstance(out, dict)
        return out

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)


def config_path_for(path: Path) -> Path:
    """Where the config of the result at ``path`` goes: ``out.json`` -> ``out.config.json``."""
    stem = path.name[: -len(".json")] if path.name.endswith(".json") else path.name
    return path.with_name(stem + ".config.json")


def write_result(path: Path, result: Any, config: Any, *, command: str | None = None) -> Path:
    """Write ``result`` to ``path`` and its config (with the unstall version and command) beside it.

    Returns the config file's path.
    """
    from unstall import __version__

    body = result.to_json() if hasattr(result, "to_json") else json.dumps(to_jsonable(result))
    write_text_atomically(path, body + "\n")
    cfg = {
        "unstall_version": __version__,
        "command": command if command is not None else " ".join(sys.argv),
        "config": to_jsonable(config),
    }
    cpath = config_path_for(path)
    write_text_atomically(cpath, json.dumps(cfg, indent=2) + "\n")
    return cpath


@contextmanager
def replaced_atomically(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` (same folder and suffix, so writers that go by
    the suffix still do) to write the whole file to; on success it replaces ``path`` in one
    rename, on any failure or interruption it is removed and ``path`` stays as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.partial{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomically(path: Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` whole or not at all."""
    with replaced_atomically(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path
