"""The README and every page under docs/ hold runnable examples: each ```python block runs as
written, in order, from the repository's root (where their paths point), so the documentation
cannot drift from the front doors. The pages share the work: the README keeps one short example
a part, the pages the longer ones, and no example repeats another's heavy work."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from unstall.sched import POLICIES

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
# Examples that start a Ray cluster of their own (a live run emulating its nodes, a service).
OWN_RAY = re.compile(r"\b(?:run_live|serving|serve)\(")


def pages() -> list[Path]:
    """README.md and docs/*.md: every page a user reads."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def python_blocks() -> list[tuple[str, int, str]]:
    found = []
    for page in pages():
        name = page.relative_to(ROOT).as_posix()
        for i, code in enumerate(BLOCK.findall(page.read_text())):
            found.append((name, i + 1, code))
    return found


@pytest.mark.parametrize(
    "page", ["README.md", *(f"docs/{n}.md" for n in ("policy", "sim", "ps", "profile", "sparse"))]
)
def test_the_main_pages_have_python_examples(page: str) -> None:
    assert any(name == page for name, _, _ in python_blocks()), f"{page} has no ```python example"


def example_cases() -> list[object]:
    """Each block as a test case; one that starts a Ray cluster of its own (a live run: a
    minute on two cores) runs with the slow tests (`make test-slow`)."""
    return [
        pytest.param(
            page,
            index,
            code,
            id=f"{page}-{index}",
            marks=[pytest.mark.slow] if OWN_RAY.search(code) else [],
        )
        for page, index, code in python_blocks()
    ]


@pytest.mark.parametrize(("page", "index", "code"), example_cases())
def test_docs_example_runs(
    page: str,
    index: int,
    code: str,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    if OWN_RAY.search(code):
        # It starts and stops a Ray cluster of its own, which cannot share this process with
        # the session's Ray: a fresh interpreter runs it, as a user's script would.
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=900
        )
        assert done.returncode == 0, f"{page} python block {index}:\n{done.stdout}{done.stderr}"
        return
    if "ps.fit(" in code or "import ray" in code:
        request.getfixturevalue("ray_session")  # one Ray for the session, not one per example
    monkeypatch.chdir(ROOT)
    # An example may register a policy: the registry is global, so put it back afterwards.
    before = dict(POLICIES)
    try:
        exec(compile(code, f"{page} python block {index}", "exec"), {"__name__": "__docs__"})
    finally:
        POLICIES.clear()
        POLICIES.update(before)
