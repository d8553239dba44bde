"""The pages under docs/ hold runnable examples: each ```python block runs as written from the
repository's root (where their paths point), so the documentation cannot drift from the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from unstall.sched import POLICIES

DOCS = Path(__file__).resolve().parents[2] / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def python_blocks() -> list[tuple[str, int, str]]:
    found = []
    for page in sorted(DOCS.glob("*.md")):
        for i, code in enumerate(BLOCK.findall(page.read_text())):
            found.append((page.name, i + 1, code))
    return found


def test_the_policy_page_has_a_python_example() -> None:
    assert any(page == "policy.md" for page, _, _ in python_blocks())


@pytest.mark.parametrize(
    ("page", "index", "code"), python_blocks(), ids=[f"{p}-{i}" for p, i, _ in python_blocks()]
)
def test_docs_example_runs(
    page: str, index: int, code: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(DOCS.parent)
    # An example may register a policy: the registry is global, so put it back afterwards.
    before = dict(POLICIES)
    try:
        exec(compile(code, f"docs/{page} python block {index}", "exec"), {"__name__": "__docs__"})
    finally:
        POLICIES.clear()
        POLICIES.update(before)
