"""The package's import structure: no module imports itself back through others, and the parts
depend on each other in one direction only (the layering of DESIGN.md).

Every ``import`` counts, also those inside functions: a function-level import that closes a
circle still ties the two modules together, it only hides it until the function runs.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import unstall

PACKAGE_DIR = Path(unstall.__file__).parent

# Modules of the package root that every part may use (no part-level dependencies of their own).
CORE = {"unstall", "checks", "config", "errors", "results", "usercode", "ray_connect"}
# Entry points that may import anything (they only start the command line).
ENTRY = {"__main__"}

# Imports upward that a function makes only when it is called, each with its reason: none (the
# policy registry's ``dally`` is built by a factory that ``unstall.sim`` provides to it).
CALLED_UPWARD: set[str] = set()

# part -> the parts it may import. Anything not listed here is a layering error.
ALLOWED: dict[str, set[str]] = {
    "net": set(),
    "traces": set(),
    "sched": set(),
    "workload": {"net"},
    # The scheduling core: jobs' lifecycle and rounds, under the simulator, live and the service.
    "loop": {"sched"},
    "sim": {"net", "workload", "traces", "sched", "loop"},
    "ps": {"net", "workload"},
    "profile": {"net", "workload"},
    "cost": {"net", "workload", "profile"},
    "sparse": {"workload"},
    # The same policies on a real Ray cluster (DESIGN.md, "The live backend"): beside ps.
    "live": {"net", "workload", "traces", "sched", "loop", "sim"},
    # The scheduler service: the core driven by the live executors, a store and an API.
    "service": {"net", "workload", "traces", "sched", "loop", "sim", "live"},
    "report": {
        "net",
        "workload",
        "traces",
        "sched",
        "loop",
        "sim",
        "ps",
        "profile",
        "cost",
        "sparse",
    },
    "cli": {
        "net",
        "workload",
        "traces",
        "sched",
        "loop",
        "sim",
        "ps",
        "profile",
        "cost",
        "sparse",
        "report",
        "live",
        "service",
    },
}


def module_names() -> dict[str, Path]:
    names: dict[str, Path] = {}
    for path in PACKAGE_DIR.rglob("*.py"):
        parts = ["unstall", *path.relative_to(PACKAGE_DIR).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def imported_modules(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The package's modules that ``name`` imports (``from a import b`` is ``a.b`` when b is a
    module, else ``a``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in known:
                    yield full
                elif base in known:
                    yield base


def import_graph() -> dict[str, set[str]]:
    known = module_names()
    return {name: set(imported_modules(name, path, known)) - {name} for name, path in known.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def part_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "unstall"


def test_the_circle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]


def test_no_module_imports_itself_back() -> None:
    assert circles(import_graph()) == []


def test_parts_import_only_the_parts_below_them() -> None:
    wrong = []
    for module, imports in import_graph().items():
        part = part_of(module)
        if part in ENTRY:
            continue
        if part in CORE:
            allowed: set[str] = set()
        else:
            assert part in ALLOWED, f"part {part!r} ({module}) is missing from ALLOWED"
            allowed = ALLOWED[part] | {part}
        for target in imports:
            target_part = part_of(target)
            if target_part not in CORE and target_part not in allowed:
                wrong.append(f"{module} -> {target}")
    assert sorted(set(wrong) - CALLED_UPWARD) == []


def test_core_modules_import_no_part() -> None:
    graph = import_graph()
    for name in CORE - {"unstall"}:
        assert {part_of(t) for t in graph[f"unstall.{name}"]} <= CORE, name


REPO_ROOT = PACKAGE_DIR.parents[1]
# Where the command line may be imported: itself, its entry point, and its tests (tests/docs
# runs the documented command lines as a user types them).
CLI_USERS = ("src/unstall/cli/", "src/unstall/__main__.py", "tests/cli/", "tests/docs/")


def imports_of_cli(path: Path) -> list[str]:
    """The ``unstall.cli`` modules a file imports, at any depth (a function's imports too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[:2] == ["unstall", "cli"]]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            module = node.module or ""
            if module == "unstall" and any(a.name == "cli" for a in node.names):
                found.append("unstall.cli")
            elif module.split(".")[:2] == ["unstall", "cli"]:
                found.append(module)
    return found


def test_nothing_outside_the_command_line_imports_it() -> None:
    """The parts resolve their own names (DESIGN.md, "Front doors and user code"): the library,
    the benchmarks and the library's tests use the parts as any user does, never the CLI."""
    wrong = []
    for folder in ("src", "benchmarks", "tests"):
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            where = path.relative_to(REPO_ROOT).as_posix()
            if where.startswith(CLI_USERS):
                continue
            wrong += [f"{where} -> {name}" for name in imports_of_cli(path)]
    assert wrong == []
