"""The shared user-code loader: files and modules in, one-line errors naming the file out."""

from __future__ import annotations

import pickle
import sys
import textwrap
from pathlib import Path

import cloudpickle
import pytest

from unstall.usercode import UserCodeError, call_user, is_reference, load_callable, load_object


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_loads_a_function_from_a_file(tmp_path: Path) -> None:
    path = write(tmp_path, "m.py", "def make():\n    return 41 + 1\n")
    fn = load_callable(f"{path}:make", what="model function")
    assert fn() == 42


def test_a_file_imports_its_siblings(tmp_path: Path) -> None:
    write(tmp_path, "helper_sibling.py", "VALUE = 7\n")
    path = write(
        tmp_path, "main.py", "import helper_sibling\n\ndef f():\n    return helper_sibling.VALUE\n"
    )
    assert load_callable(f"{path}:f")() == 7


def test_a_function_imports_a_sibling_when_called(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))  # restored after the test
    write(tmp_path, "late_sibling.py", "VALUE = 8\n")
    path = write(
        tmp_path, "late.py", "def f():\n    from late_sibling import VALUE\n    return VALUE\n"
    )
    fn = load_callable(f"{path}:f")
    assert fn() == 8  # the import runs only now, after the file was loaded
    assert sys.path[-1] == str(tmp_path.resolve())  # last: it shadows no installed module


def test_two_files_of_one_name_stay_apart(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = write(tmp_path / "a", "model.py", "X = 'a'\n")
    second = write(tmp_path / "b", "model.py", "X = 'b'\n")
    assert load_object(f"{first}:X") == "a"
    assert load_object(f"{second}:X") == "b"


def test_loads_from_a_module_with_a_dotted_name() -> None:
    assert load_object("unstall.usercode:UserCodeError.__name__") == "UserCodeError"


def test_file_functions_pickle_by_value(tmp_path: Path) -> None:
    path = write(tmp_path, "byvalue_model.py", "def f(x):\n    return x * 3\n")
    fn = load_callable(f"{path}:f")
    blob = cloudpickle.dumps(fn)
    # A process that cannot import the file still gets the function: it travels in the bytes.
    del sys.modules[fn.__module__]
    assert pickle.loads(blob)(2) == 6


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        ("resnet18", False),
        ("my.py:make", True),
        ("pkg.mod:Policy", True),
        ("C:\\models", False),
        (":x", False),
        ("x:", False),
    ],
)
def test_is_reference(reference: str, expected: bool) -> None:
    assert is_reference(reference) is expected


def test_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(UserCodeError, match=r"model function file .*nope\.py: no such file"):
        load_object(f"{tmp_path / 'nope.py'}:f", what="model function")


def test_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.py", "x = 1\ndef f(:\n")
    with pytest.raises(UserCodeError, match=r"bad\.py, line 2: syntax error"):
        load_object(f"{path}:f")


def test_error_while_the_file_runs_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "boom.py", "x = 1\nraise RuntimeError('no GPU here')\n")
    with pytest.raises(UserCodeError, match=r"boom\.py, line 2: RuntimeError: no GPU here"):
        load_object(f"{path}:x")


def test_missing_name_lists_what_the_file_defines(tmp_path: Path) -> None:
    path = write(tmp_path, "m2.py", "def make_model():\n    pass\n")
    with pytest.raises(
        UserCodeError, match=r"has no model function 'make'; it defines: make_model"
    ):
        load_object(f"{path}:make", what="model function")


def test_unknown_module_says_so() -> None:
    with pytest.raises(UserCodeError, match=r"module 'no_such_pkg_xyz\.mod': not importable"):
        load_object("no_such_pkg_xyz.mod:f")


def test_not_callable(tmp_path: Path) -> None:
    path = write(tmp_path, "m3.py", "VALUE = 3\n")
    with pytest.raises(UserCodeError, match="is an int, not something to call"):
        load_callable(f"{path}:VALUE")


def test_no_colon() -> None:
    with pytest.raises(UserCodeError, match=r"want FILE\.py:NAME"):
        load_object("model.py")


def test_call_user_names_the_function_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "m4.py", "def data(rank, world):\n    return 1 / 0\n")
    fn = load_callable(f"{path}:data")
    with pytest.raises(
        UserCodeError, match=r"data function data \(.*m4\.py:1\) failed, line 2: ZeroDivisionError"
    ):
        call_user(fn, 0, 1, what="data function")
