"""Every `unstall` command shown in the README and in docs/*.md is one the command line accepts
(the command exists, every option is one of its own, every value parses), and every link of
these pages and of benchmarks/BENCHMARKS.md, anchors included, leads somewhere. Nothing heavy
runs here: the commands are parsed, not executed (tests/cli/test_examples.py and the tests of each
part run them)."""

from __future__ import annotations

import functools
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer.main

from unstall.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
SHELL_BLOCK = re.compile(r"^```(?:sh|bash|console)\n(.*?)^```", re.MULTILINE | re.DOTALL)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def pages() -> list[Path]:
    """README.md and docs/*.md: every page a user reads."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def shell_lines(text: str) -> list[str]:
    """The command lines of a page's shell blocks: continuations joined, comments dropped."""
    lines = []
    for block in SHELL_BLOCK.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line).strip()
            if line:
                lines.append(line)
    return lines


def unstall_commands() -> list[tuple[str, list[str]]]:
    """(page, argv after `unstall`) for each unstall command shown, `-m unstall` ones too."""
    found = []
    for page in pages():
        name = page.relative_to(ROOT).as_posix()
        for line in shell_lines(page.read_text()):
            for part in re.split(r"&&|;|\|", line):
                words = shlex.split(part)
                if words[:1] == ["unstall"]:
                    found.append((name, words[1:]))
                elif "-m" in words and words[words.index("-m") + 1 : words.index("-m") + 2] == [
                    "unstall"
                ]:
                    found.append((name, words[words.index("-m") + 2 :]))
    return found


def test_the_pages_show_commands() -> None:
    shown = {page for page, _ in unstall_commands()}
    for page in ("README.md", "docs/sim.md", "docs/ps.md", "docs/profile.md", "docs/sparse.md"):
        assert page in shown, f"{page} shows no unstall command"


@functools.cache
def _root() -> Any:
    return typer.main.get_command(app)  # the click tree, built once


def _leaf(argv: list[str]) -> tuple[Any, list[str], list[str]]:
    """The click command that `unstall argv` reaches, the words naming it, the rest."""
    command: Any = _root()
    path: list[str] = []
    rest = list(argv)
    while hasattr(command, "commands") and rest and not rest[0].startswith("-"):
        name = rest.pop(0)
        assert name in command.commands, f"`unstall {' '.join(path)}` has no command {name!r}"
        command = command.commands[name]
        path.append(name)
    return command, path, rest


@pytest.mark.parametrize(
    ("page", "argv"),
    unstall_commands(),
    ids=[f"{page}: unstall {' '.join(argv[:2])}" for page, argv in unstall_commands()],
)
def test_shown_command_parses(page: str, argv: list[str]) -> None:
    command, path, rest = _leaf(argv)
    assert not hasattr(command, "commands"), f"{page}: `unstall {' '.join(argv)}` names a group"
    known = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}
    for word in rest:
        option = word.split("=", 1)[0]
        if option.startswith("-") and not re.fullmatch(r"-\d.*", option):
            assert option in known, f"{page}: `unstall {' '.join(path)}` has no option {option}"
    try:
        # Parse and convert every value, without running the command.
        command.make_context(f"unstall {' '.join(path)}", rest)
    except Exception as error:
        message = error.format_message() if hasattr(error, "format_message") else str(error)
        # Files a page's earlier command writes (a profile, a trace) need not exist here.
        if "does not exist" not in message:
            raise AssertionError(f"{page}: `unstall {' '.join(argv)}`: {message}") from error


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", FENCE.sub("", page.read_text()), re.MULTILINE):
        slug = _slug(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


LINKED = [*pages(), ROOT / "benchmarks" / "BENCHMARKS.md"]


@pytest.mark.parametrize("page", LINKED, ids=[p.relative_to(ROOT).as_posix() for p in LINKED])
def test_links_lead_somewhere(page: Path) -> None:
    """Relative links point at files that exist, and anchors at headings of the page linked
    (BENCHMARKS.md's headline table points into its own sections)."""
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # a web address
        path, _, anchor = target.partition("#")
        where = page.parent / path if path else page
        if not where.exists():
            broken.append(f"{target}: no such file")
        elif anchor and (where.suffix != ".md" or anchor not in anchors(where)):
            broken.append(f"{target}: no such heading")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)
