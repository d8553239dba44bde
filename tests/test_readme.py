"""The README's Python examples run as written (each ```python block, in order, in a fresh
folder), so the documentation cannot drift from the front doors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def python_blocks() -> list[str]:
    return BLOCK.findall(README.read_text())


def test_the_readme_has_python_examples() -> None:
    assert python_blocks(), "README.md has no ```python example"


@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_readme_example_runs(
    index: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    code = python_blocks()[index]
    if "unstall.ps" in code or "import ray" in code:
        request.getfixturevalue("ray_session")
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"README.md python block {index + 1}", "exec"), {"__name__": "__readme__"})
