"""Each part's ``__init__.py`` is its front door: it says what the part offers, every name it
exports is there and documented, no submodule shadows an exported name, and the runnable example
in its docstring runs."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

FRONT_DOORS = [
    "unstall.net",
    "unstall.traces",
    "unstall.sched",
    "unstall.sim",
    "unstall.workload",
    "unstall.ps",
    "unstall.profile",
    "unstall.cost",
    "unstall.sparse",
]

# Front doors whose example needs a running Ray (the suite's one local session).
NEEDS_RAY = {"unstall.ps"}


@pytest.mark.parametrize("name", FRONT_DOORS)
def test_front_door_exports_documented_names(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__doc__, f"{name} has no docstring"
    exported = getattr(module, "__all__", None)
    assert exported, f"{name} has no __all__"
    for item in exported:
        assert hasattr(module, item), f"{name}.__all__ names {item!r}, which it lacks"
        obj = getattr(module, item)
        if callable(obj):
            assert obj.__doc__, f"{name}.{item} has no docstring"


@pytest.mark.parametrize("name", FRONT_DOORS)
def test_no_submodule_shadows_an_export(name: str) -> None:
    # ``import unstall.sim.simulate`` would rebind ``unstall.sim.simulate`` to the module.
    module = importlib.import_module(name)
    submodules = {info.name for info in pkgutil.iter_modules(module.__path__)}
    assert submodules.isdisjoint(module.__all__), name


@pytest.mark.parametrize("name", FRONT_DOORS)
def test_front_door_example_runs(name: str, request: pytest.FixtureRequest) -> None:
    if name in NEEDS_RAY:
        request.getfixturevalue("ray_session")
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    examples = [t for t in finder.find(module, name) if t.examples]
    assert examples, f"{name}'s docstring has no runnable example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in examples:
        runner.run(test)
    assert runner.failures == 0, f"{runner.failures} example(s) of {name} failed (output above)"
