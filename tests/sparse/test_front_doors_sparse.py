"""The sparse part's two subject front doors, ``unstall.sparse.lstm`` and ``unstall.sparse.cnn``,
hold to the rules tests/test_front_doors.py checks for ``unstall.sparse``: documented exports, no
submodule named like an export, an example that runs."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

SUBJECTS = ["unstall.sparse.lstm", "unstall.sparse.cnn"]


@pytest.mark.parametrize("name", SUBJECTS)
def test_exports_are_there_documented_and_unshadowed(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__doc__ and module.__all__
    for item in module.__all__:
        obj = getattr(module, item)
        if callable(obj):
            assert obj.__doc__, f"{name}.{item} has no docstring"
    submodules = {info.name for info in pkgutil.iter_modules(module.__path__)}
    assert submodules.isdisjoint(module.__all__)


@pytest.mark.parametrize("name", SUBJECTS)
def test_example_runs(name: str) -> None:
    module = importlib.import_module(name)
    tests = [t for t in doctest.DocTestFinder(exclude_empty=True).find(module, name) if t.examples]
    assert tests
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test)
    assert runner.failures == 0


def test_the_part_front_door_offers_both_subjects() -> None:
    import unstall.sparse as sparse
    from unstall.sparse import cnn, lstm

    for item in sparse.__all__:
        assert getattr(sparse, item) is getattr(lstm, item, None) or getattr(
            sparse, item
        ) is getattr(cnn, item, None), item
